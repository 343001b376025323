"""One answer per question: what the page, the summary and the notebooks say a panel shows, from the verdicts of
both references (AC-GATE and the moderated distributed lag) and what is known of their error rates on this panel.

    answer = l1_answer(result)                 # do the proxies hold the lags? which reference says so, on what
    text = lags_differ_reading(result)         # do the lags differ at all, and do the proxies explain it?

Each reference's verdicts stay its own (``acgate.audit.verdicts``); this module only reads them together. The rule:
a reference whose rates on this panel were measured (its panel-matched study is current) speaks for the panel; one
whose rates were not measured cannot overrule it, and where they disagree the reading says so and why. Where no
reference has measured rates, each verdict is read as it is. The lags-differ sentence never contradicts a
supported L1: it once read "the lags differ, but the proxies do not explain them (L1 not supported): look for what
does" beside the moderated distributed lag's supported L1 (its rates measured), because it followed AC-GATE's L1
alone, whose rates were not.
"""

from __future__ import annotations

from dataclasses import dataclass

from acgate.audit.domain_audit import AuditResult
from acgate.report.render import readable


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


def answer(verdicts: dict[str, str], measured: list[str]) -> Answer:
    """One layer's answer from each reference's calibrated verdict (reference -> verdict) and the references whose
    rates are measured: supported where a reference that speaks for the panel (measured, or every reference where
    none is) says so."""
    verdicts = {r: v for r, v in verdicts.items() if v != "not claimed"}  # a reference with no runs says nothing
    speaking = [r for r in verdicts if r in measured] or list(verdicts)
    supported_by = [r for r in speaking if verdicts[r] == "supported"]
    unmeasured = [r for r in verdicts if r not in speaking]
    notes = []
    if supported_by and (others := [r for r in speaking if r not in supported_by]):
        notes.append(f"{_names(supported_by)} supported, {_names(others)} {_verdicts(verdicts, others)}")
    for reference in unmeasured:
        if (verdicts[reference] == "supported") != bool(supported_by):
            notes.append(f"{readable(reference)} says {verdicts[reference]}, but its rates on this panel are not "
                         f"measured, so {_names(speaking)} speak{'s' if len(speaking) == 1 else ''} for it")
    return Answer("supported" if supported_by else "not certified", supported_by, measured, "; ".join(notes))


def l1_answer(result: AuditResult) -> Answer:
    """Do the proxies hold the lags (L1), from both references."""
    verdicts = {reference: found["calibrated"]["L1"]["verdict"]
                for reference, found in result.verdicts_by_reference.items()}
    return answer(verdicts, measured_references(result, "L1"))


def lags_differ_reading(result: AuditResult) -> str:
    """What the lags-differ statement and L1 say together (empty where the statement is not claimed)."""
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
    return f"{text}; {l1.why}" if l1.why else text


def _names(references: list[str]) -> str:
    return " and ".join(readable(r) for r in references)


def _verdicts(verdicts: dict[str, str], references: list[str]) -> str:
    found = {verdicts[r] for r in references}
    return found.pop() if len(found) == 1 else ", ".join(f"{readable(r)} {verdicts[r]}" for r in references)
