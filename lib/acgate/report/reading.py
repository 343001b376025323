"""One answer per question: what the page, the summary and the notebooks say a panel shows, from the verdicts of
both references (AC-GATE and the moderated distributed lag) and what is known of their error rates on this panel.

    answer = layer_answer(result, "L1")        # do the proxies hold the lags? which reference says so, on what
    text = lags_differ_reading(result)         # do the lags differ at all, and do the proxies explain it?

Each reference's verdicts stay its own (``acgate.audit.verdicts``); this module only reads them together. The rule:
a reference whose rates on this panel were measured (its panel-matched study is current) speaks for the panel; one
whose rates were not measured cannot overrule it, and where they disagree the reading says so and why, from
evidence the audit computed (:func:`shortfalls`: the twins a reference did not beat and in how many seeds, lag
curves that one positive gate cannot hold, no power on surrogates of this panel, a gate the layer needs). Where no
reference has measured rates, each verdict is read as it is. The lags-differ sentence never contradicts a supported
L1: it once read "the lags differ, but the proxies do not explain them (L1 not supported): look for what does"
beside the moderated distributed lag's supported L1 (its rates measured), because it followed AC-GATE's L1 alone,
whose rates were not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from acgate.audit.domain_audit import AuditResult, reference_config
from acgate.audit.panel_matched import frequent_false_alarm
from acgate.audit.verdicts import GATE_METHODS, GLS_FIT, heterogeneity_comparators, lags_changed
from acgate.report.render import readable
from acgate.statistics import format_p

# a feature's pooled curve with this share of its weight against its sign, or features whose pooled k* differ by this
# many lags, is what one positive lag distribution for every feature cannot hold
AGAINST_SIGN, FEATURE_RANGE = 0.25, 1.0


@dataclass
class Answer:
    """The answer to one question (a layer): ``verdict`` ("supported" or not), the references that support it,
    those whose rates on the panel are measured, and ``why``: which reference the answer follows, and any
    disagreement (empty where every reference agrees)."""

    verdict: str
    supported_by: list[str]
    measured: list[str]
    why: str


def measured_references(result: AuditResult, layer: str) -> list[str]:
    """The references whose rates for ``layer`` the audit's panel-matched study measured under their current
    rules."""
    study = result.error_rates or {}
    stale = set(study.get("stale", []))
    return [reference for reference, layers in study.get("error_rates", {}).items()
            if layer in layers and reference not in stale]


def answer(verdicts: dict[str, str], measured: list[str], reasons: dict[str, list[str]] | None = None) -> Answer:
    """One layer's answer from each reference's calibrated verdict (reference -> verdict) and the references whose
    rates are measured: supported where a reference that speaks for the panel (measured, or every reference where
    none is) says so; not claimed where no reference claims anything. ``reasons`` (reference -> why it fell short)
    follow a reference that disagrees with the answer."""
    verdicts = {r: v for r, v in verdicts.items() if v != "not claimed"}  # a reference with no runs says nothing
    if not verdicts:
        return Answer("not claimed", [], measured, "")
    reasons = reasons or {}
    speaking = [r for r in verdicts if r in measured] or list(verdicts)
    supported_by = [r for r in speaking if verdicts[r] == "supported"]
    unmeasured = [r for r in verdicts if r not in speaking]
    notes = []
    if supported_by and (others := [r for r in speaking if r not in supported_by]):
        notes.append(f"{_names(supported_by)} supported, {_names(others)} {_verdicts(verdicts, others)}"
                     + "".join(f" ({readable(r)}: {', '.join(reasons[r])})" for r in others if reasons.get(r)))
    for reference in unmeasured:
        if verdicts[reference] == "supported" and supported_by:
            notes.append(f"{readable(reference)} agrees (its rates on this panel are not measured)")
        elif (verdicts[reference] == "supported") != bool(supported_by):
            why = f" ({', '.join(reasons[reference])})" if reasons.get(reference) else ""
            notes.append(f"{readable(reference)} says {verdicts[reference]}{why}, but its rates on this panel are "
                         f"not measured, so {_names(speaking)} speak{'s' if len(speaking) == 1 else ''} for it")
    verdict = ("supported" if supported_by else
               "ruled out" if all(verdicts[r] == "ruled out" for r in speaking) else "not certified")
    return Answer(verdict, supported_by, measured, "; ".join(notes))


def layer_answer(result: AuditResult, layer: str) -> Answer:
    """The answer to one layer's question (L1, L2 or L3) from both references' calibrated verdicts, with why a
    reference that disagrees fell short (:func:`shortfalls`)."""
    verdicts = {reference: found["calibrated"][layer]["verdict"]
                for reference, found in result.verdicts_by_reference.items()}
    reasons = {reference: shortfalls(result, reference, layer) for reference in verdicts}
    return answer(verdicts, measured_references(result, layer), reasons)


def l1_answer(result: AuditResult) -> Answer:
    """Do the proxies hold the lags (L1), from both references."""
    return layer_answer(result, "L1")


def shortfalls(result: AuditResult, reference: str, layer: str) -> list[str]:
    """Why ``reference``'s calibrated verdict on ``layer`` fell short, from what the audit computed: for a gate model's
    L1, the twins it did not beat on held-out loss (and in how many seeds it did better) and lag curves its one
    positive gate for every feature cannot hold (the GLS fit's features' curves change sign or differ in lag); for
    L2, an L1 that does not hold; on any layer, no spread detected on surrogates of this panel. Empty where its
    verdict is "supported" or nothing is known."""
    found = result.verdicts_by_reference.get(reference, {}).get("calibrated", {}).get(layer, {})
    if found.get("verdict") in (None, "supported", "not claimed"):
        return []
    reasons = []
    if layer == "L1" and reference in GATE_METHODS:
        reasons += _twins_not_beaten(result, reference) + _curves_a_gate_cannot_hold(result)
    if layer == "L2" and result.verdicts_by_reference[reference]["calibrated"]["L1"]["verdict"] != "supported":
        reasons.append("its L2 needs its L1, which is not supported")
    if layer == "L2":
        reasons += _only_through_the_proxies(result, reference)
    rate = (result.error_rates or {}).get("error_rates", {}).get(reference, {}).get(layer)
    if rate and rate.get("power") and rate.get("smallest_detectable") is None \
            and reference not in (result.error_rates or {}).get("stale", []):
        reasons.append("on surrogates of this panel it detected no lag spread simulated in 80 % of them")
    return reasons


def _only_through_the_proxies(result: AuditResult, reference: str) -> list[str]:
    """The stratifiers ``reference``'s k* aligns with beyond chance but no more closely than random directions of the
    proxies (L2's lag-free p): an association L2 does not count, said with how well the proxies predict them."""
    summary = getattr(result, "l2_summary", None)
    if summary is None or summary.empty:
        return []
    method = reference if reference in GATE_METHODS else GLS_FIT
    alpha = result.config.alpha
    rows = summary[(summary.method == method) & ~summary.circular_joint & (summary.alignment_p < alpha)
                   & ~(summary.lag_free_p < alpha)]
    return [f"its k* aligns with {r.stratifier} beyond chance (rho {r.alignment_rho:+.2f}) but no more closely than "
            f"random directions of the proxies (lag-free p {r.lag_free_p:.2f}; the proxies predict {r.stratifier} "
            f"with R {r.proxy_r_joint:.2f}): with these proxies L2 cannot tell its direction from theirs"
            for r in rows.itertuples()]


def _twins_not_beaten(result: AuditResult, reference: str) -> list[str]:
    cfg = reference_config(result.config, reference)
    heldout = result.heldout[result.heldout.reference == reference] if len(result.heldout) else result.heldout
    mse = result.l0.pivot_table(index="seed", columns="method", values="mse") if len(result.l0) else None
    out = []
    for twin in heterogeneity_comparators(cfg):
        rows = heldout[heldout.comparator == twin]
        if rows.empty:
            continue
        r = rows.iloc[0]
        if r.p_entity_better < cfg.alpha and (np.isnan(r.p_seed_better) or r.p_seed_better < cfg.alpha):
            continue
        seeds = ""
        if mse is not None and {reference, twin} <= set(mse.columns):
            pair = mse[[reference, twin]].dropna()
            seeds = f" (better in {int((pair[reference] < pair[twin]).sum())} of {len(pair)} seeds)"
        out.append(f"{readable(twin)}{seeds}")
    return [f"it did not beat {', '.join(out)} on held-out loss"] if out else []


def _curves_a_gate_cannot_hold(result: AuditResult) -> list[str]:
    tests = result.lag_tests
    if tests is None or "against_sign_share" not in tests or tests.against_sign_share.isna().all():
        return []
    first = tests.dropna(subset=["against_sign_share"]).iloc[0]
    parts = []
    if first.against_sign_share >= AGAINST_SIGN:
        parts.append(f"a feature's pooled lag curve changes sign along the lags ({first.against_sign_share:.0%} of "
                     "its weight against its sign)")
    if first.feature_kstar_range >= FEATURE_RANGE:
        parts.append(f"the features' lags differ (k* by feature: {first.feature_kstar})")
    if not parts:
        return []
    return [f"{' and '.join(parts)} in the classical GLS fit, which one positive lag distribution for every feature "
            "(its gate) cannot hold"]


QUESTIONS = {"L1": "Do the proxies hold the lags (L1)?", "L2": "Do the lags follow a stratifier's direction (L2)?",
             "L3": "Are the true lags recovered (L3)?", "lags differ": "Do the entities' lags differ at all?"}


def readings(result: AuditResult) -> dict[str, str]:
    """One sentence per question (:data:`QUESTIONS`): the answer from both references, who gives it and any
    disagreement with why; the lags-differ question's reading (:func:`lags_differ_reading`) last."""
    out = {}
    for layer in ("L1", "L2", "L3"):
        found = layer_answer(result, layer)
        by = f" (by {_names(found.supported_by)})" if found.supported_by else ""
        why = found.why
        if not why and found.verdict == "not certified":  # agreed: say what stands in the way of each, if known
            why = "; ".join(f"{readable(r)}: {', '.join(reasons)}" for r in result.verdicts_by_reference
                            if (reasons := shortfalls(result, r, layer)))
        out[layer] = f"{found.verdict}{by}" + (f"; {why}" if why else "")
    if changed := lags_changed(result.config.alpha, result.lag_tests):  # every layer reads an average of two maps
        test = (f"stability test p {format_p(changed['p'])}; mean k* {changed['kstar_early']:.2f} before "
                f"{changed['first_late']}, {changed['kstar_late']:.2f} from then")
        alarm = frequent_false_alarm(result.error_rates.get("lags_changed"), result.config.alpha)
        out["L1"] += (f"; the stability test says the lags changed over time ({test}), but it says so in "
                      f"{alarm['supported']} of {alarm['replicates']} of this panel's surrogates whose lags never "
                      f"change ({alarm['scenario']}): no evidence of a break" if alarm else
                      f"; but the lags changed over time ({test}): this describes an average of the two periods")
    out["lags differ"] = lags_differ_reading(result, with_why=False) or "not claimed"
    return out


def lags_differ_reading(result: AuditResult, with_why: bool = True) -> str:
    """What the lags-differ statement and L1 say together (empty where the statement is not claimed), with L1's
    disagreement and why where ``with_why`` (:func:`readings` gives it with L1's answer already)."""
    differ = (result.lags_differ or {}).get("verdict", "not claimed")
    if differ == "not claimed":
        return ""
    l1 = l1_answer(result)
    by = f" (L1 supported by {_names(l1.supported_by)})" if l1.supported_by else ""
    if differ == "supported":
        text = (f"the lags differ, and the proxies hold them{by}" if l1.supported_by else
                "the lags differ, but no reference finds that the proxies hold them (L1 not supported): look for what "
                "does")
    else:
        text = (f"the pooled test does not show it, but L1 finds lags the proxies hold{by}" if l1.supported_by else
                "not shown: this panel's pooled test cannot tell the entities' lags apart")
    return f"{text}; {l1.why}" if l1.why and with_why else text


def _names(references: list[str]) -> str:
    return " and ".join(readable(r) for r in references)


def _verdicts(verdicts: dict[str, str], references: list[str]) -> str:
    found = {verdicts[r] for r in references}
    return found.pop() if len(found) == 1 else ", ".join(f"{readable(r)} {verdicts[r]}" for r in references)
