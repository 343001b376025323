"""acgate.report.summary: an audit's results as numbers (the deciding p-values, the rates with their intervals,
k* with its interval over seeds) and its summary as text, HTML and LaTeX, read through ``PanelAudit``."""

import dataclasses
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from acgate.audit.domain_audit import reference_config
from acgate.audit.verdicts import LAYERS, calibrated_verdicts
from acgate.panel_audit import PanelAudit
from acgate.report import render
from acgate.statistics import fisher_combined
from tests.report.test_render import compiled

ROOT = Path(__file__).resolve().parents[2]


def audited(tiny_grid, error_rates=None) -> PanelAudit:
    result, params, _, _, html_path, _ = tiny_grid
    if error_rates is not None:
        result = dataclasses.replace(result, error_rates=error_rates)
    return PanelAudit(result, params, html_path, html_path.parent)


def test_each_verdict_gives_the_p_value_it_turned_on_read_from_the_audit_tables(tiny_grid):
    """The numbers sat only inside evidence strings; each is checked here against the audit's own tables."""
    result = tiny_grid[0]
    audit = audited(tiny_grid)
    numbers = audit.to_frame()
    assert list(numbers.index) == [*((r, layer) for r in ("acgate", "moderated_dl") for layer in LAYERS),
                                   ("", "lags differ")]
    assert (numbers.verdict == audit.verdicts.set_index(["reference", "layer"]).verdict).all()
    tested = result.lag_tests[np.isfinite(result.lag_tests.p_vs_entity_scaled)]
    combined = [p.iloc[0] if len(p) == 1 else fisher_combined(p)
                for p in (tested.p_vs_entity_scaled, tested.p_vs_shared)]
    assert numbers.loc[("moderated_dl", "L1"), "p_value"] == pytest.approx(max(combined))
    assert numbers.loc[("moderated_dl", "L1"), "value"] == pytest.approx(tested.kstar_sd.mean())
    heldout = result.heldout[result.heldout.reference == "acgate"]
    assert numbers.loc[("acgate", "L0"), "p_value"] == pytest.approx(heldout.holm_better.max())
    twins = heldout.set_index("comparator").loc[["no_ac_encoder", "shuffled_proxies", "proxy_shared_gate"]]
    assert numbers.loc[("acgate", "L1"), "p_value"] == pytest.approx(
        np.fmax(twins.p_entity_better, twins.p_seed_better).max())
    l3 = result.l3[result.l3.method == "acgate"]
    assert numbers.loc[("acgate", "L3"), "value"] == pytest.approx(l3.spearman_lag_centre.mean())
    assert audit.pvalues.equals(numbers.p_value) and audit.pvalues.dtype == float
    # no study beside the example's grid: its rates are NaN, not zero
    assert numbers.false_supported.isna().all() and (numbers.worst_null == "").all()


def test_the_rates_are_the_worst_null_class_with_its_clopper_pearson_interval(tiny_grid):
    study = json.loads((ROOT / "tables" / "economics_panel_matched.json").read_text())
    numbers = audited(tiny_grid, {"note": "", "settings": study["settings"],
                                  "error_rates": study["error_rates"]}).to_frame()
    rate = study["error_rates"]["moderated_dl"]["L1"]
    row = numbers.loc[("moderated_dl", "L1")]
    worst = rate["worst_null"]
    assert (row.worst_null, row.false_supported, row.false_replicates) == (
        worst["scenario"], worst["supported"], worst["replicates"])
    low, high = stats.binomtest(worst["supported"], worst["replicates"]).proportion_ci(method="exact")
    assert (row.false_rate_low, row.false_rate_high) == (pytest.approx(low, abs=1e-4), pytest.approx(high, abs=1e-4))
    assert np.isnan(row.smallest_detectable) == (rate["smallest_detectable"] is None)
    assert np.isnan(numbers.loc[("acgate", "L1"), "false_supported"])  # the committed study trained no AC-GATE


def test_kstar_per_entity_comes_with_its_interval_over_seeds(tiny_grid, tmp_path):
    result = tiny_grid[0]
    intervals = audited(tiny_grid).conf_int(alpha=0.1)
    runs = result.kstar_by_entity
    one = runs[(runs.method == "acgate") & (runs.entity == runs.entity.iloc[0])].kstar
    low, high = stats.t.interval(0.9, len(one) - 1, loc=one.mean(), scale=stats.sem(one))
    row = intervals.loc[("acgate", runs.entity.iloc[0])]
    assert (row.kstar, row.lower, row.upper, row.seeds) == (pytest.approx(one.mean()), pytest.approx(low),
                                                            pytest.approx(high), len(one))
    classical = intervals.loc["moderated_dl"]
    assert classical.lower.isna().all() and classical.upper.isna().all()  # a closed-form fit reads no seed
    with pytest.raises(ValueError, match="alpha=5"):
        audited(tiny_grid).conf_int(alpha=5)
    apart = PanelAudit(dataclasses.replace(result, shared_entities=False), *tiny_grid[1:2], tiny_grid[4], tmp_path)
    with pytest.raises(ValueError, match="panels of their own"):  # each seed's entity e000 is another entity
        apart.conf_int()


def test_a_study_without_nulls_a_missing_p_and_the_numbers_in_latex(tiny_grid):
    """A study of positives alone has no worst null (its rates are NaN, not a crash); a comparator whose Holm p is NaN
    leaves L0 without a deciding p; the LaTeX prints p-values and counts as such (p 0.0004 read "0.000", a count of
    3 "3.000")."""
    result = tiny_grid[0]
    power = {"1": {"supported": 3, "replicates": 4, "ci": [0.19, 0.99], "true_kstar_sd": 1.0}}
    positives = {"note": "", "settings": {"replicates": 4, "neural_replicates": 0, "seeds": 5}, "error_rates": {
        "moderated_dl": {"L1": {"false_support": {"supported": 0, "replicates": 0, "ci": None}, "worst_null": {},
                                "power": power, "smallest_detectable": None}}}}
    row = audited(tiny_grid, positives).to_frame().loc[("moderated_dl", "L1")]
    assert np.isnan(row.false_supported) and np.isnan(row.false_rate_low) and row.worst_null == ""
    heldout = result.heldout.copy()
    heldout.loc[heldout.index[0], "holm_better"] = np.nan  # a comparator its tests could not score
    cfg = reference_config(result.config, heldout.reference.iloc[0])
    cell = calibrated_verdicts(cfg, result.l1, heldout, result.seed_agreement, result.l2_summary, result.l3,
                               result.wilcoxon, True, result.shared_entities, result.lag_tests)["L0"]
    assert cell["p"] is None and cell["verdict"] != "supported"
    frame = audited(tiny_grid).to_frame().reset_index().assign(p_value=0.0004, false_supported=3.0)
    latex = render.latex_table(frame, "numbers", "Numbers.")
    assert " 0.00040 " in latex and " 3 " in latex and "0.000 " not in latex and "3.000" not in latex


def test_the_summary_renders_as_text_html_and_latex(tiny_grid):
    audit = audited(tiny_grid)
    summary = audit.summary()
    text = str(summary)
    assert text.startswith("AC-GATE audit of example_panel: 3 seeds") and f"report: {audit.report}" in text
    assert "What this panel shows" in text and text == summary.as_text()
    page = summary.as_html()
    assert page.count("<table") == 2 and "p_value" in page and "<li>" in page
    latex = summary.as_latex()
    assert latex.count(r"\begin{table}") == 2 and r"\label{tab:example_panel_summary_numbers}" in latex
    assert r"\label{tab:example_panel_numbers}" in audit.to_latex()


def test_the_documented_columns_are_the_frames(tiny_grid):
    """docs/own_panel.md lists to_frame()'s columns; the list is the frame's."""
    docs = (ROOT / "docs" / "own_panel.md").read_text()
    listed = re.search(r"`to_frame\(\)` has the columns (.+?)\.", docs.replace("\n", " "))
    assert listed, "docs/own_panel.md names no columns of to_frame()"
    assert re.findall(r"`(\w+)`", listed.group(1)) == list(audited(tiny_grid).to_frame().columns)


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed")
def test_the_summarys_latex_compiles_and_fits_the_page(tiny_grid, tmp_path):
    audit = audited(tiny_grid)
    (tmp_path / "summary.tex").write_text(audit.summary().as_latex())
    (tmp_path / "numbers.tex").write_text(audit.to_latex())
    assert "Overfull \\hbox" not in compiled(tmp_path, ["summary", "numbers"])
