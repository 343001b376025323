"""acgate.report.reading: one answer per question from both references' verdicts and what is measured of their
rates on the panel."""

from types import SimpleNamespace

import pandas as pd

from acgate.audit.domain_audit import HELDOUT_COLUMNS
from acgate.config import AuditConfig
from acgate.report import reading


def result(l1: dict[str, str], measured: list[str], differ: str = "supported", **tables) -> SimpleNamespace:
    """An audit's result as the reading sees it: each reference's calibrated L1, the panel-matched study's rates
    (for the references in ``measured``), the lags-differ statement, and the audit's tables (empty unless given)."""
    return SimpleNamespace(
        verdicts_by_reference={r: {"calibrated": {"L1": {"verdict": v}}} for r, v in l1.items()},
        error_rates={"error_rates": {r: {"L1": {"sentence": "..."}} for r in measured}, "stale": []},
        lags_differ={"verdict": differ}, config=AuditConfig(),
        heldout=tables.get("heldout", pd.DataFrame(columns=HELDOUT_COLUMNS)),
        l0=tables.get("l0", pd.DataFrame(columns=["seed", "method", "mse"])), lag_tests=tables.get("lag_tests"))


def test_a_disagreement_says_why_from_what_the_audit_computed():
    """A two-driver panel: one driver's lags the same for all, the other's following a proxy. The moderated DL's L1
    supported (rates measured); AC-GATE's not certified, and the answer says why: it fell short of its
    shuffled-proxy twin (better in 4 of 5 seeds), and the features' curves differ in lag and change sign, which its
    one positive gate for every feature cannot hold."""
    heldout = pd.DataFrame([{"reference": "acgate", "comparator": twin, "p_seed_better": p, "p_entity_better": p}
                            for twin, p in (("no_ac_encoder", 0.03), ("shuffled_proxies", 0.2),
                                            ("proxy_shared_gate", 0.03))], columns=HELDOUT_COLUMNS)
    mse = {"acgate": [1.0, 1.0, 1.0, 1.0, 1.2], "shuffled_proxies": [1.1, 1.1, 1.1, 1.1, 1.1]}
    l0 = pd.DataFrame([{"seed": s, "method": m, "mse": v[s]} for m, v in mse.items() for s in range(5)])
    lag_tests = pd.DataFrame([{"feature_kstar": "driver_a 2.00; driver_b 5.50", "feature_kstar_range": 3.5,
                               "against_sign_share": 0.4}])
    two_drivers = result({"acgate": "not certified", "moderated_dl": "supported"}, measured=["moderated_dl"],
                         heldout=heldout, l0=l0, lag_tests=lag_tests)
    answer = reading.layer_answer(two_drivers, "L1")
    assert answer.verdict == "supported" and answer.supported_by == ["moderated_dl"]
    assert "it did not beat Shuffled-Proxy Gate (better in 4 of 5 seeds) on held-out loss" in answer.why, answer.why
    assert "No-AC-Encoder" not in answer.why and "Proxy Shared-Gate" not in answer.why  # the twins it beat
    assert "k* by feature: driver_a 2.00; driver_b 5.50" in answer.why and "40% of its weight" in answer.why
    assert "cannot hold" in answer.why and "its rates on this panel are not measured" in answer.why
    # where the curves are one positive bump alike for every feature, no such reason is given
    alike = result({"acgate": "not certified", "moderated_dl": "supported"}, ["moderated_dl"], heldout=heldout,
                   l0=l0, lag_tests=lag_tests.assign(feature_kstar_range=0.2, against_sign_share=0.05))
    assert "cannot hold" not in reading.layer_answer(alike, "L1").why


def test_a_reference_without_measured_rates_cannot_overrule_one_with_them():
    """Three unseen panels whose lags follow the proxies: the moderated DL's L1 supported (its rates measured),
    AC-GATE's not certified (its rates not measured), and the page read "the lags differ, but the proxies do not
    explain them (L1 not supported): look for what does"."""
    disagree = result({"acgate": "not certified", "moderated_dl": "supported"}, measured=["moderated_dl"])
    text = reading.lags_differ_reading(disagree)
    assert text.startswith("the lags differ, and the proxies hold them (L1 supported by Moderated DL)")
    assert "AC-GATE says not certified, but its rates on this panel are not measured" in text
    assert "do not explain" not in text and "look for what does" not in text
    answer = reading.l1_answer(disagree)
    assert answer.verdict == "supported" and answer.supported_by == ["moderated_dl"]


def test_an_unmeasured_support_does_not_make_the_answer():
    only = result({"acgate": "supported", "moderated_dl": "not certified"}, measured=["moderated_dl"])
    answer = reading.l1_answer(only)
    assert answer.verdict == "not certified"
    assert "AC-GATE says supported, but its rates on this panel are not measured" in answer.why
    assert reading.lags_differ_reading(only).startswith("the lags differ, but no reference finds that the proxies hold")


def test_without_measured_rates_each_verdict_is_read_as_it_is():
    both = result({"acgate": "not certified", "moderated_dl": "supported"}, measured=[])
    answer = reading.l1_answer(both)
    assert answer.verdict == "supported" and answer.why == "Moderated DL supported, AC-GATE not certified"
    agree = result({"acgate": "not certified", "moderated_dl": "not certified"}, measured=[], differ="not certified")
    assert reading.lags_differ_reading(agree) == "not shown: this panel's pooled test cannot tell the entities' lags " \
                                                 "apart"
    assert reading.lags_differ_reading(result({"acgate": "supported"}, [], differ="not claimed")) == ""


def test_a_reference_that_was_not_run_says_nothing():
    """An audit of the classical family alone: AC-GATE's cells are "not claimed" (no runs), which is no
    disagreement ("AC-GATE says not claimed, but its rates ... are not measured" was printed)."""
    classical = result({"acgate": "not claimed", "moderated_dl": "supported"}, measured=["moderated_dl"])
    assert reading.lags_differ_reading(classical) == ("the lags differ, and the proxies hold them (L1 supported by "
                                                      "Moderated DL)")
