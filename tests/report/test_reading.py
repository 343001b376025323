"""acgate.report.reading: one answer per question from both references' verdicts and what is measured of their
rates on the panel."""

from types import SimpleNamespace

from acgate.report import reading


def result(l1: dict[str, str], measured: list[str], differ: str = "supported") -> SimpleNamespace:
    """An audit's result as the reading sees it: each reference's calibrated L1, the panel-matched study's rates
    (for the references in ``measured``) and the lags-differ statement."""
    return SimpleNamespace(
        verdicts_by_reference={r: {"calibrated": {"L1": {"verdict": v}}} for r, v in l1.items()},
        error_rates={"error_rates": {r: {"L1": {"sentence": "..."}} for r in measured}, "stale": []},
        lags_differ={"verdict": differ})


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
