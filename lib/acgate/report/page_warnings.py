"""The warnings of a domain's audit page, each once, and the verdicts each stands beside:

    warnings, numbers = page_warnings(result)   # numbers: (reference, kind, layer) -> the warnings' numbers (1-based)

Beside the verdicts' own warnings (:meth:`acgate.audit.domain_audit.AuditResult.warnings`), what the panel's
surrogates and maps say of them: a "supported" that the rule gives in clearly more of the panel-matched nulls than
alpha (:func:`rate_warning`), a gate model's "not certified" where it detects a 1-lag spread in under half the share
the classical reference does (:func:`power_warning`), a "lags changed" that the stability test raised in surrogates
whose lags never change (:func:`alarm_warning`), lag tests that read the noise's persistence far from the noise model
the surrogates carry (:func:`persistence_warning`), and AC-GATE's reach where its k* read no lags in panels like this
one (:func:`reach_reading`). :mod:`acgate.report.audit_page` draws them; ``PanelAudit.warnings`` lists the same.
"""

from __future__ import annotations

import pandas as pd

from acgate.audit import reach
from acgate.audit.domain_audit import AuditResult
from acgate.audit.head_to_head import NEURAL
from acgate.audit.panel_matched import frequent_false_alarm, spread_text
from acgate.audit.verdicts import CLASSICAL_REFERENCE, LAYERS, lags_changed
from acgate.config import GATE_METHODS
from acgate.report import render


def rate_warning(rate: dict, verdict: str, alpha: float) -> str | None:
    """A warning where a rule says "supported" in clearly more panel-matched nulls than alpha (the lower end of the
    95 % interval above it): there a "supported" is no evidence. None otherwise."""
    low = (rate["false_support"]["ci"] or [0.0])[0]
    if verdict != "supported" or low <= alpha:
        return None
    return (f"on panels like this one this rule says \"supported\" where it must not in "
            f"{rate['false_support']['supported']} of {rate['false_support']['replicates']} nulls: this verdict is "
            "no evidence here")


def alarm_warning(alarms: dict, alpha: float) -> str | None:
    """A warning where the stability test's "lags changed" appeared in clearly more of the panel-matched surrogates
    of its worst null scenario than alpha (:func:`acgate.audit.panel_matched.frequent_false_alarm`; none of the
    surrogates' lags change over time): there the warning is no evidence of a break. On economics it appeared in 5 of
    20 surrogates whose countries share a shock with loadings that follow the proxies (57 of 200 in a study of that
    class alone). None otherwise."""
    worst, pooled = frequent_false_alarm(alarms, alpha), alarms["false_support"]
    if worst is None:
        return None
    return (f"on surrogates of this panel whose lags never change, the stability test said they changed in "
            f"{worst['supported']} of {worst['replicates']} of its worst null ({worst['scenario']}; 95 % interval "
            f"{100 * worst['ci'][0]:.0f}-{100 * worst['ci'][1]:.0f} %), {pooled['supported']} of "
            f"{pooled['replicates']} over all: the warning that the lags changed is no evidence of a break here")


POWER_SPREAD, POWER_SHARE = "1", 0.5  # AC-GATE is warned for when its power at 1 lag is under half the classical's


def power_warning(rates: dict, reference: str, layer: str, verdict: str) -> str | None:
    """A warning on a gate model's L1 or L2 "not certified" where, on surrogates of this panel, it detects a spread of
    :data:`POWER_SPREAD` lag in under :data:`POWER_SHARE` of the share the classical reference detects
    (:data:`acgate.audit.verdicts.CLASSICAL_REFERENCE`): its verdict then says little, and the classical one is the one
    to read. None otherwise (or where either was not measured at that spread)."""
    if reference not in GATE_METHODS or layer not in ("L1", "L2") or verdict != "not certified":
        return None
    mine = rates.get(reference, {}).get(layer, {}).get("power", {}).get(POWER_SPREAD)
    theirs = rates.get(CLASSICAL_REFERENCE, {}).get(layer, {}).get("power", {}).get(POWER_SPREAD)
    if not (mine and theirs and mine["replicates"] and theirs["replicates"]):
        return None
    share, classical = mine["supported"] / mine["replicates"], theirs["supported"] / theirs["replicates"]
    if share >= POWER_SHARE * classical:
        return None
    return (f"on surrogates of this panel {render.readable(reference)} detects {spread_text(POWER_SPREAD, mine)} in "
            f"{mine['supported']} of {mine['replicates']}, under half the moderated distributed lag's "
            f"{theirs['supported']} of {theirs['replicates']}: this \"not certified\" says little; read the moderated "
            f"distributed lag's {layer}")


PERSISTENCE_GAP = 0.2  # the lag tests' rho this far from the surrogates' (about 2 sd of its estimate on them): warned


def persistence_warning(result: AuditResult) -> str | None:
    """A warning where the lag tests read the noise's persistence (their error model's AR(1) rho, the median over the
    tested panels) more than :data:`PERSISTENCE_GAP` away from the panel's noise model, which the panel-matched
    study's surrogates carry (``residual_ar1`` of :attr:`AuditResult.error_rates`): their error rates were measured at
    the noise model's, and the tests' p depend on rho (a lower one corrects less for the persistence: on energy the
    lags-differ test's p is 0.02 at rho 0.26, 0.38 at 0.5 and 0.66 at 0.67, the noise model's). The tests' estimate
    reads economics at 0.99 and energy at 0.53, the noise model 0.92 and 0.67. None where they agree or either is
    missing."""
    noise = result.error_rates.get("residual_ar1")
    rho = result.lag_tests.rho.dropna() if "rho" in result.lag_tests else pd.Series(dtype=float)
    if noise is None or rho.empty or abs(float(rho.median()) - noise) <= PERSISTENCE_GAP:
        return None
    return (f"the lag tests read the noise's persistence as AR(1) {rho.median():.2f} where the panel's noise model "
            f"reads {noise:.2f}: their p (the classical L1, the lags-differ statement, the stability over time) rest "
            f"on the first, a {'lower' if rho.median() < noise else 'higher'} persistence "
            f"({'so they reject more readily' if rho.median() < noise else 'so they reject less readily'}), and the "
            f"panel-matched error rates beside them were measured on surrogates at the second; a verdict that turns "
            f"on the tests' p is not certain here")


def lags_differ_rate(rates: dict) -> dict | None:
    """The panel-matched rates of the lags-differ statement: one statement for both references, a test of the
    classical fit, so the classical reference's rates (:data:`acgate.audit.calibration.STATEMENTS`); None where the
    study has none under its current rules."""
    return rates.get(CLASSICAL_REFERENCE, {}).get("lags differ")


def grouped_warnings(result: AuditResult) -> tuple[list[str], dict[tuple[str, str, str], list[int]]]:
    """Every warning the verdicts carry, once, each saying where it applies (:meth:`AuditResult.warnings`); and
    (reference, rule, layer) -> the numbers (1-based) of that cell's warnings."""
    texts = list(result.warning_places())
    numbers = {(reference, rule, layer): [texts.index(w) + 1 for w in cell.get("warnings", [])]
               for reference, found in result.verdicts_by_reference.items() for rule in ("calibrated", "paper")
               for layer, cell in found[rule].items()}
    return result.warnings(), numbers


def reach_reading(result: AuditResult) -> dict | None:
    """Where AC-GATE's reach map (:func:`acgate.audit.reach.reading`, of AC-GATE with or without the gate's memory as
    it was audited) places the panel, from the N, lagged share and noise persistence of the panel-matched study's
    source; None where AC-GATE is not audited or no study gave them."""
    study = result.error_rates
    if NEURAL not in result.verdicts_by_reference or None in (study.get("lagged_share"), study.get("residual_ar1")):
        return None
    return reach.reading(study["entities"], study["lagged_share"], study["residual_ar1"],
                         gate_memory=result.gate_memory)


def page_warnings(result: AuditResult) -> tuple[list[str], dict[tuple[str, str, str], list[int]]]:
    """Every warning of the page, each once: the verdicts' own (:func:`grouped_warnings`), the panel-matched rates'
    (a "supported" this rule gives in clearly more nulls than alpha, a "not certified" it could not have shown, the
    stability test's false alarms), the lag tests' persistence (:func:`persistence_warning`) and AC-GATE's reach where
    its k* reads no lags in panels like this one (:func:`reach_reading`); with the numbers shown beside each verdict:
    (reference, kind, layer) -> numbers, kind "calibrated", "paper", "matched", "noise" or "reach"."""
    rates = result.error_rates.get("error_rates", {})
    extra = {}
    for reference in result.verdicts_by_reference:
        for layer, cell in result.verdicts_by_reference[reference]["calibrated"].items():
            rate = rates.get(reference, {}).get(layer)
            reasons = [why for why in (rate and rate_warning(rate, cell["verdict"], result.config.alpha),
                                       power_warning(rates, reference, layer, cell["verdict"])) if why]
            if reasons:
                extra[(reference, layer)] = f"{reference} {layer} (panel-matched error rates): {'; '.join(reasons)}"
    differ = lags_differ_rate(rates)
    if differ and (why := rate_warning(differ, result.lags_differ.get("verdict", ""), result.config.alpha)):
        extra[("", "lags differ")] = f"lags differ (panel-matched error rates): {why}"
    alarms = result.error_rates.get("lags_changed")
    if alarms and lags_changed(result.config.alpha, result.lag_tests) and \
            (why := alarm_warning(alarms, result.config.alpha)):
        extra[("", "lags changed")] = f"lags changed (panel-matched error rates): {why}"
    warnings, numbers = grouped_warnings(result)
    warnings = [*warnings, *extra.values()]
    numbers |= {(reference, "matched", layer): [len(warnings) - len(extra) + i]
                for i, (reference, layer) in enumerate(extra, start=1)}
    if persistence := persistence_warning(result):  # beside the tests its rho sets: classical L1, lags differ
        warnings.append(persistence)
        numbers |= {key: [len(warnings)] for key in ((CLASSICAL_REFERENCE, "noise", "L1"),
                                                     ("", "noise", "lags differ"))}
    said = reach_reading(result)
    if said and not said["reads"]:  # beside every AC-GATE verdict on the lags (L0 is the forecast)
        warnings.append(said["sentence"])
        numbers |= {(NEURAL, "reach", layer): [len(warnings)] for layer in LAYERS if layer != "L0"}
    return warnings, numbers
