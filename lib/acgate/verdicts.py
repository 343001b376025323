"""The verdict rules of the audit: the paper's, and the calibrated ones the project stands behind.

Both turn the audit's tables into one verdict per layer for a reference method: *supported*, *not certified*, *ruled
out* or *not claimed*, each with the rule that produced it and the evidence it read. The rules are estimator-agnostic:
the reference is AC-GATE (``audit.reference``'s default) or the classical moderated distributed lag, and each is
judged against the comparators of its own family (:data:`FAMILIES`); the audit gives both side by side.

- ``paper_verdicts``: the paper's Algorithm 1 as published, with the repository's honest additions of the first
  version (a practical L1 spread, circular stratifiers flagged one proxy at a time, a seed-pooled test). Kept so
  the two can be read side by side; its error rates on controls are published in ``tables/audit_calibration``.
- ``calibrated_verdicts``: rules whose behaviour on negative and positive controls is measured
  (``notebooks/06_audit_calibration.py``):

  * **L0 forecast**: the reference beats every comparator (every other method and persistence) on the same test
    rows, one-sided, with uncertainty over seeds (Wilcoxon) and over entities (entity block bootstrap), Holm over
    the comparators. Ruled out when some comparator beats it the same way.
  * **L1 heterogeneity**: a practical spread of k* across entities, *and* held-out evidence that the
    proxy-conditioned lags matter: the reference beats its family's shared-lag twin (No-AC-Encoder, or the shared
    distributed lag) and its twin trained on shuffled proxies, each over seeds and over entities (both comparators
    must be beaten, so no correction).
  * **L2 alignment**: only when L1 is supported, the k* ordering is reproducible across seeds (where seeds share
    entities), and some stratifier that the proxies do not carry jointly aligns with k* beyond chance (entity
    permutation) and beyond what lag-free k* (random functions of the proxies) would give, Holm over stratifiers.
  * **L3 recovery**: the same rule as the paper's set (:func:`l3_verdict`), which is never supported without a
    collapsed model of the reference's family to beat.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from acgate.config import GATE_METHODS, AuditConfig
from acgate.statistics import format_p, smallest_wilcoxon_p

VERDICTS = ("supported", "not certified", "ruled out", "not claimed")
LAYERS = ("L0", "L1", "L2", "L3")


@dataclass(frozen=True)
class Family:
    """A reference's comparators: its shared-lag twin and its shuffled-proxy twin (the calibrated L1 must beat both)
    and the collapsed models whose constant k* L3's recovery must beat."""

    shared: str
    shuffled: str
    collapsed: tuple[str, ...]


FAMILIES = {"acgate": Family("no_ac_encoder", "shuffled_proxies", ("no_ac_encoder", "uniform_lag")),
            "moderated_dl": Family("shared_dl", "shuffled_dl", ("shared_dl",))}
REFERENCES = tuple(FAMILIES)  # the audit gives the verdicts of each that was run, side by side


def family(reference: str) -> Family:
    """The comparators of ``reference``: AC-GATE's for the gate models, the moderated distributed lag's for the
    classical ones."""
    return FAMILIES["acgate" if reference in GATE_METHODS else "moderated_dl"]


def heterogeneity_comparators(cfg: AuditConfig) -> list[str]:
    """The methods the calibrated L1 needs the reference to beat: ``audit.heterogeneity_comparators``, or (empty)
    the reference family's shared-lag and shuffled-proxy twins."""
    twins = family(cfg.reference)
    return list(cfg.heterogeneity_comparators) or [twins.shared, twins.shuffled]


def cell(verdict: str, rule: str, evidence: str, warnings: list[str] | None = None) -> dict:
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict '{verdict}'; one of {', '.join(VERDICTS)}")
    return {"verdict": verdict, "rule": rule, "evidence": evidence, "warnings": warnings or []}


def of_reference(table: pd.DataFrame, reference: str) -> pd.DataFrame:
    """The rows of a paired-comparison table (held-out or Wilcoxon, with a ``reference`` column) about ``reference``."""
    return table[table.reference == reference] if "reference" in table else table


# --- the paper's rules


def paper_verdicts(cfg: AuditConfig, l1: pd.DataFrame, l2_summary: pd.DataFrame, l3: pd.DataFrame,
                   wilcoxon: pd.DataFrame, has_stratifiers: bool) -> dict:
    """The L0-L3 verdicts of the paper's rules for the reference method."""
    wilcoxon = of_reference(wilcoxon, cfg.reference)
    return {"L0": _paper_l0(cfg, wilcoxon), "L1": _paper_l1(cfg, l1),
            "L2": _paper_l2(cfg, l2_summary, has_stratifiers), "L3": l3_verdict(cfg, l3, wilcoxon)}


def _paper_l0(cfg: AuditConfig, wilcoxon: pd.DataFrame) -> dict:
    ref, a = cfg.reference, cfg.alpha
    rule = (f"paper: supported when {ref}'s test MSE is lower than every other method's with two-sided paired "
            f"Wilcoxon p < {a}; ruled out when some method's is lower with p < {a}; else not certified")
    mse = wilcoxon[wilcoxon.metric == "test_mse"]
    if mse.empty:
        return cell("not certified", rule, "no other method to compare with")
    better = mse[(mse.p < a) & (mse.mean_diff < 0)]
    worse = mse[(mse.p < a) & (mse.mean_diff > 0)]
    evidence = "; ".join(f"{r.method}: diff {r.mean_diff:+.4g}, p {r.p:.2g}" for r in mse.itertuples())
    return cell("ruled out" if len(better) else "supported" if len(worse) == len(mse) else "not certified",
                rule, evidence)


def _paper_l1(cfg: AuditConfig, l1: pd.DataFrame) -> dict:
    rule = (f"paper: supported when sd_i(k*) > {cfg.practical_sd} in at least {cfg.l1_min_share:.0%} of seeds; "
            f"ruled out when sd_i(k*) <= epsilon = {cfg.epsilon:g} in every seed; else not certified")
    mine = l1[l1.method == cfg.reference]
    if mine.empty:
        return cell("not claimed", rule, f"no runs of {cfg.reference}")
    share = (~mine.degenerate_practical).mean()
    evidence = (f"mean sd(k*) {mine.kstar_sd.mean():.3f}; non-degenerate seeds: {share:.0%} practical, "
                f"{(~mine.degenerate_paper).mean():.0%} with the paper's epsilon")
    verdict = ("ruled out" if mine.degenerate_paper.all() else
               "supported" if share >= cfg.l1_min_share else "not certified")
    return cell(verdict, rule, evidence)


def _paper_l2(cfg: AuditConfig, l2_summary: pd.DataFrame, has_stratifiers: bool) -> dict:
    a = cfg.alpha
    rule = (f"paper: supported when some stratifier not circular with any single proxy has Fisher p < {a}, at "
            f"least half the seeds with permutation p < {a}, and (where every seed has the same entities) "
            f"seed-pooled p < {a}; ruled out when every seed is L1-degenerate; not claimed without a testable "
            "stratifier; else not certified")
    summary = l2_summary[l2_summary.method == cfg.reference] if not l2_summary.empty else l2_summary
    if not has_stratifiers:
        return cell("not claimed", rule, "no stratifiers")
    if summary.empty or summary.seeds_tested.sum() == 0:
        return _nothing_tested(summary, rule)
    passes = summary[(summary.fisher_p < a) & (summary.share_p_below_alpha >= 0.5)
                     & ~(summary.pooled_p >= a)]  # pooled p NaN (not applicable) does not block
    clean = passes[~passes.circular]
    evidence = "; ".join(f"{r.stratifier}{' (circular)' if r.circular else ''}: mean|rho| {r.mean_abs_rho:.3f}, "
                         f"share p<{a} {r.share_p_below_alpha:.2f}, Fisher p {r.fisher_p:.2g}"
                         for r in summary.itertuples())
    if len(passes) and clean.empty:
        evidence += "; only circular stratifiers pass"
    return cell("supported" if len(clean) else "not certified", rule, evidence)


def _nothing_tested(summary: pd.DataFrame, rule: str) -> dict:
    """L2 where no seed was tested: ruled out when L1 found every seed degenerate (nothing to stratify); not claimed
    when a stratifier could not be tested at all (constant across entities or missing), which says nothing about
    the lags."""
    untestable = summary[(summary.seeds_tested == 0) & (summary.seeds_skipped == 0)] if len(summary) else summary
    if len(untestable):
        return cell("not claimed", rule, f"not testable: {', '.join(untestable.stratifier)} has no spread across "
                    "entities (or no values) where k* has one")
    return cell("ruled out", rule, "every seed L1-degenerate: nothing to stratify")


def l3_verdict(cfg: AuditConfig, l3: pd.DataFrame, wilcoxon: pd.DataFrame) -> dict:
    """L3 (both rule sets): recovery of the true lags, which must beat every collapsed ablation that was run and
    needs at least one of them."""
    a, collapsed_models = cfg.alpha, family(cfg.reference).collapsed
    rule = (f"supported when mean Spearman(k*, lag centre) >= {cfg.l3_min_spearman} and k* MAE is lower than each "
            f"collapsed model's ({', '.join(collapsed_models)}; at least one must have run) with paired Wilcoxon "
            f"p < {a}; ruled out when mean Spearman < 0.2; else not certified (also when Spearman is undefined "
            "because k* or the truth is constant)")
    mine = l3[l3.method == cfg.reference] if not l3.empty else l3
    if mine.empty:
        return cell("not claimed", rule, "no ground truth")
    rho = mine.spearman_lag_centre.mean()
    collapsed = wilcoxon[(wilcoxon.metric == "kstar_mae_lag_centre") & wilcoxon.method.isin(collapsed_models)]
    beats = len(collapsed) > 0 and bool(((collapsed.p < a) & (collapsed.mean_diff > 0)).all())
    evidence = (f"mean Spearman {rho:.3f}, mean MAE {mine.mae_lag_centre.mean():.3f}; "
                + ("; ".join(f"{r.method} MAE diff {r.mean_diff:+.3f}, p {r.p:.2g}" for r in collapsed.itertuples())
                   or "no collapsed model was run, so recovery cannot be told from a constant k*"))
    verdict = ("not certified" if np.isnan(rho) else "ruled out" if rho < 0.2 else
               "supported" if rho >= cfg.l3_min_spearman and beats else "not certified")
    return cell(verdict, rule, evidence)


# --- the calibrated rules


def calibrated_verdicts(cfg: AuditConfig, l1: pd.DataFrame, heldout: pd.DataFrame, agreement: pd.DataFrame,
                        l2_summary: pd.DataFrame, l3: pd.DataFrame, wilcoxon: pd.DataFrame,
                        has_stratifiers: bool, shared_entities: bool) -> dict:
    """The L0-L3 verdicts of the calibrated rules for the reference method."""
    heldout, wilcoxon = of_reference(heldout, cfg.reference), of_reference(wilcoxon, cfg.reference)
    l1_cell = _heterogeneity(cfg, l1, heldout)
    return {"L0": _forecast(cfg, heldout, shared_entities), "L1": l1_cell,
            "L2": _alignment(cfg, l1_cell, agreement, l2_summary, has_stratifiers),
            "L3": l3_verdict(cfg, l3, wilcoxon)}


def _seed_warning(comparator: str, nonzero_pairs: int, level: float) -> str | None:
    """A warning when the seeds cannot reach ``level`` (alpha, or alpha / m for the first step of Holm)."""
    floor = smallest_wilcoxon_p(int(nonzero_pairs))
    if floor >= level:
        return (f"{comparator}: {int(nonzero_pairs)} seeds with a non-zero difference can give a one-sided "
                f"Wilcoxon p of at best {floor:.3g}, which cannot reach {level:.3g}; train more seeds")
    return None


def _forecast(cfg: AuditConfig, heldout: pd.DataFrame, shared_entities: bool) -> dict:
    a = cfg.alpha
    rule = (f"calibrated: supported when {cfg.reference}'s test MSE, on the same test rows, is lower than every "
            "comparator's (every other method and persistence) by a one-sided paired Wilcoxon over seeds and a "
            f"one-sided entity block bootstrap, the larger p Holm-adjusted over the comparators below {a}; ruled out "
            "when some comparator is lower by the same test; else not certified")
    if heldout.empty:
        return cell("not certified", rule, "no comparator was scored")
    level = a / len(heldout)  # Holm's first step
    warnings = [w for w in (_seed_warning(r.comparator, r.nonzero_pairs, level) for r in heldout.itertuples()) if w]
    if shared_entities:
        warnings.append("every seed shares one test window and one set of entities: the Wilcoxon over seeds "
                        "measures training randomness only; the entity bootstrap carries the sampling uncertainty")
    evidence = "; ".join(f"{r.comparator}: loss diff {r.mean_loss_diff:+.4g} (comparator - reference), Holm p "
                         f"better {format_p(r.holm_better)}, worse {format_p(r.holm_worse)}"
                         for r in heldout.itertuples())
    if set(heldout.comparator) == {"persistence"}:
        evidence = "against persistence alone: " + evidence
    verdict = ("ruled out" if (heldout.holm_worse < a).any() else
               "supported" if (heldout.holm_better < a).all() else "not certified")
    return cell(verdict, rule, evidence, warnings)


def _heterogeneity(cfg: AuditConfig, l1: pd.DataFrame, heldout: pd.DataFrame) -> dict:
    a, comparators = cfg.alpha, heterogeneity_comparators(cfg)
    rule = (f"calibrated: supported when sd_i(k*) > {cfg.practical_sd} in at least {cfg.l1_min_share:.0%} of seeds "
            f"and {cfg.reference} has a lower held-out test loss than each of {', '.join(comparators)} (one-sided "
            f"Wilcoxon over seeds and entity block bootstrap, both p < {a}); ruled out when sd_i(k*) <= epsilon = "
            f"{cfg.epsilon:g} in every seed; else not certified")
    mine = l1[l1.method == cfg.reference]
    if mine.empty:
        return cell("not claimed", rule, f"no runs of {cfg.reference}")
    if mine.degenerate_paper.all():
        return cell("ruled out", rule, f"sd(k*) <= epsilon in every seed (mean {mine.kstar_sd.mean():.3g})")
    share = (~mine.degenerate_practical).mean()
    parts = [f"sd(k*) > {cfg.practical_sd} in {share:.0%} of seeds (mean sd {mine.kstar_sd.mean():.3f})"]
    rows = heldout.set_index("comparator") if not heldout.empty else pd.DataFrame()
    beaten, warnings = [], []
    for comparator in comparators:
        if comparator not in rows.index:
            parts.append(f"{comparator} not run: heterogeneity cannot be told from a shared or shuffled gate")
            continue
        r = rows.loc[comparator]
        ok = bool(r.p_entity_better < a and (np.isnan(r.p_seed_better) or r.p_seed_better < a))  # NaN: see heldout
        beaten.append(ok)
        parts.append(f"vs {comparator}: loss diff {r.mean_loss_diff:+.4g}, p seeds {format_p(r.p_seed_better)}, "
                     f"p entities {format_p(r.p_entity_better, cfg.bootstrap)}{'' if ok else ' (not beaten)'}")
        warning = _seed_warning(comparator, r.nonzero_pairs, a)
        if warning:
            warnings.append(warning)
    supported = share >= cfg.l1_min_share and len(beaten) == len(comparators) and all(beaten)
    return cell("supported" if supported else "not certified", rule, "; ".join(parts), warnings)


def _alignment(cfg: AuditConfig, l1_cell: dict, agreement: pd.DataFrame, l2_summary: pd.DataFrame,
               has_stratifiers: bool) -> dict:
    a = cfg.alpha
    rule = (f"calibrated: supported only when L1 is supported, the seed-to-seed Spearman of k* has median >= "
            f"{cfg.min_seed_agreement} (where seeds share entities), and some stratifier whose ranks the proxies "
            f"do not predict jointly (rank multiple correlation < {cfg.circular_threshold}) has, Holm-adjusted over "
            f"those stratifiers, p < {a} for both the entity-permutation test (seed-pooled where seeds share "
            "entities, else Fisher over independent seeds) and the test against lag-free k* (random functions of "
            "the proxies); ruled out when every seed is L1-degenerate (nothing to stratify); not claimed without "
            "a testable stratifier; else not certified")
    if not has_stratifiers:
        return cell("not claimed", rule, "no stratifiers")
    summary = l2_summary[l2_summary.method == cfg.reference] if not l2_summary.empty else l2_summary
    if summary.empty or summary.seeds_tested.sum() == 0:
        return _nothing_tested(summary, rule)
    evidence = "; ".join(_stratifier_evidence(r, cfg) for r in summary.itertuples())
    mine = agreement[agreement.method == cfg.reference] if not agreement.empty else agreement
    blockers = []
    if l1_cell["verdict"] != "supported":
        blockers.append("L1 not supported: no held-out evidence that the lags differ")
    if len(mine) and np.isfinite(mine.median_rho.iloc[0]) and mine.median_rho.iloc[0] < cfg.min_seed_agreement:
        blockers.append(f"k* ordering not reproducible across seeds (median seed-pair Spearman "
                        f"{mine.median_rho.iloc[0]:.2f} < {cfg.min_seed_agreement})")
    passing = summary[~summary.circular_joint & (summary.p_holm < a)]
    verdict = "supported" if len(passing) and not blockers else "not certified"
    return cell(verdict, rule, "; ".join(blockers + [evidence]))


def _stratifier_evidence(row, cfg: AuditConfig) -> str:
    if row.circular_joint:
        return f"{row.stratifier}: circular (the proxies predict its ranks with R {row.proxy_r_joint:.2f})"
    return (f"{row.stratifier}: rho {row.alignment_rho:+.3f}, "
            f"permutation p {format_p(row.alignment_p, cfg.permutations)}, "
            f"lag-free p {format_p(row.lag_free_p, cfg.permutations)}, Holm p {format_p(row.p_holm)}")
