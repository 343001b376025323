"""Tests of acgate.report.figures: the report's figures at a page's width, legible and labelled."""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from acgate import statistics  # noqa: E402
from acgate.report import figures, render  # noqa: E402


def test_mean_abs_rho_leaves_out_circular_stratifiers(own_report):
    _, results = own_report
    result = next(iter(results.values()))
    assert result.l2_summary.set_index(["method", "stratifier"]).circular[("acgate", "mean_capacity")]
    points = figures.alignment_points(results).set_index("method")
    l2 = result.l2[(result.l2.method == "acgate") & (result.l2.stratifier != "mean_capacity")]
    assert points.mean_abs_rho["acgate"] == pytest.approx(l2.rho.abs().mean())
    assert points.persistence_r2["acgate"] == pytest.approx(result.l0.query("method == 'persistence'").r2_by_time
                                                            .mean())


def legible(fig, smallest=7.0, width=7.2):
    """The figure prints at a page's width with every text at least ``smallest`` pt, and has no empty panel."""
    fig.canvas.draw()
    assert fig.get_size_inches()[0] <= width
    sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip()]
    assert min(sizes) >= smallest
    assert all(ax.has_data() for ax in fig.axes), "an empty panel"


def test_own_panel_figures_are_legible_and_have_no_empty_panel(own_report, own_panel):
    tables, results = own_report
    runs, data, _ = own_panel
    evidence = figures.evidence_figure(tables, results)
    legible(evidence)
    assert [ax.get_title(loc="left")[0] for ax in evidence.axes] == ["A", "B"]  # no synthetic panel
    legible(figures.case_study_figure(results, data))
    legible(figures.forecast_r2_figure(runs, results))


def test_a_figure_from_fewer_seeds_than_the_papers_says_how_many(own_report, own_panel):
    tables, results = own_report
    runs, data, _ = own_panel
    for fig in (figures.evidence_figure(tables, results), figures.case_study_figure(results, data),
                figures.forecast_r2_figure(runs, results)):
        assert fig.get_suptitle() == "3 seeds"
    twenty = {"a": SimpleNamespace(l1=pd.DataFrame({"seed": range(20)})),
              "b": SimpleNamespace(l1=pd.DataFrame({"seed": range(5)}))}
    assert figures.seed_note(twenty, ["a"]) is None and figures.seed_note(twenty, ["a", "b"]) == "5–20 seeds"


def texts_outside_their_panel(fig) -> list[str]:
    """The texts drawn in a panel (ax.text) that reach beyond it."""
    renderer = fig.canvas.get_renderer()
    fig.canvas.draw()
    outside = []
    for ax in fig.axes:
        panel = ax.get_window_extent(renderer)
        for text in ax.texts:
            box = text.get_window_extent(renderer)
            if box.x0 < panel.x0 - 0.5 or box.x1 > panel.x1 + 0.5 or box.y0 < panel.y0 - 0.5 or box.y1 > panel.y1 + 0.5:
                outside.append(text.get_text())
    return outside


def test_evidence_figure_texts_stay_in_their_panels_and_legends_keep_methods_from_domains(own_report):
    """Panel A's "undefined (k* constant)" ran out of its panel into B; panel C had one legend of 7 hues and 4
    markers, methods and domains mixed; A's error bars were not said to be sds."""
    tables, results = own_report
    methods = ["acgate", "no_ac_encoder", "uniform_lag", "no_recon_reg", "shuffled_proxies", "plain_lstm"]
    synth = pd.DataFrame([{"domain": d, "method": m, "spearman_lag_centre_mean": np.nan if m in methods[1:3] else 0.9,
                           "spearman_lag_centre_sd": 0.05}
                          for d in ("synthetic_linear", "synthetic_nonlinear") for m in methods])
    fig = figures.evidence_figure({**tables, "synthetic_summary": synth}, results)
    assert [ax.get_title(loc="left")[0] for ax in fig.axes] == ["A", "B", "C"]
    assert texts_outside_their_panel(fig) == []
    recovery, _, forecast = fig.axes
    assert "sd over seeds" in [t.get_text() for t in recovery.get_legend().get_texts()]
    legends = [forecast.get_legend(), *(a for a in forecast.artists if isinstance(a, matplotlib.legend.Legend))]
    points = figures.alignment_points(results)
    method_labels, domain_labels = set(points.method.map(render.readable)), set(points.domain.map(render.readable))
    assert len(legends) == 2
    for legend in legends:
        labels = {t.get_text() for t in legend.get_texts()}
        assert not (labels & method_labels and labels & domain_labels), labels


def test_forecast_r2_figure_shares_one_r2_axis_and_says_what_the_black_bar_is(monkeypatch):
    """Economics ran from -0.8 and energy from 0, each on its own R2 axis; the black bar (the mean over seeds) was
    not explained anywhere."""
    runs = {"economics": [-0.8, 0.1, 0.3], "energy": [0.5, 0.6, 0.7]}
    results = {d: SimpleNamespace(domain=d, kind="data", l1=pd.DataFrame({"seed": range(3), "method": "acgate"}),
                                  l0=pd.DataFrame({"method": ["persistence"], "r2_by_time": [0.95]})) for d in runs}
    monkeypatch.setattr(figures, "collect", lambda runs_root, result: pd.DataFrame(
        {"seed": range(3), "method": "acgate", "test_r2_by_time": runs[result.domain]}))
    fig = figures.forecast_r2_figure(Path("runs"), results)
    assert len({ax.get_xlim() for ax in fig.axes}) == 1
    assert fig.axes[0].get_xlim()[0] < -0.8 and fig.axes[0].get_xlim()[1] > 0.95
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["one seed", "mean over seeds", "persistence forecast"]
    assert fig.get_suptitle() == "3 seeds"


def test_a_method_a_domain_did_not_run_says_not_run_in_both_figures(own_report, monkeypatch):
    """tft left out of one domain (leave_out): the recovery panel drew a zero-length bar for its scenario, as if its
    Spearman were 0; the forecast figure put tft's row where that panel's next method was (or last)."""
    tables, results = own_report
    synth = pd.DataFrame([{"domain": d, "method": m, "spearman_lag_centre_mean": 0.9, "spearman_lag_centre_sd": 0.05}
                          for d in ("synthetic_linear", "synthetic_nonlinear")
                          for m in ("acgate", "tft", "moderated_dl") if (d, m) != ("synthetic_nonlinear", "tft")])
    fig = figures.evidence_figure({**tables, "synthetic_summary": synth}, results)
    recovery = fig.axes[0]
    assert [t.get_text() for t in recovery.texts] == ["not run (nonlinear)"]
    assert texts_outside_their_panel(fig) == []
    ran = {"economics": ["acgate", "moderated_dl"], "energy": ["acgate", "tft", "moderated_dl"]}
    results = {d: SimpleNamespace(domain=d, kind="data", l1=pd.DataFrame({"seed": 0, "method": m}),
                                  l0=pd.DataFrame({"method": ["persistence"], "r2_by_time": [0.0]}))
               for d, m in ran.items()}
    monkeypatch.setattr(figures, "collect", lambda runs_root, result: pd.DataFrame(
        {"seed": 0, "method": ran[result.domain], "test_r2_by_time": np.arange(len(ran[result.domain])) / 10}))
    fig = figures.forecast_r2_figure(Path("runs"), results)
    fig.canvas.draw()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["AC-GATE", "TFT", "Moderated DL"]
    assert [(t.get_text(), t.get_position()[1]) for t in fig.axes[0].texts] == [("not run", 1)]
    assert [c.get_offsets()[0, 1] for c in fig.axes[0].collections if len(c.get_offsets())] == [0, 2]  # own rows
    assert len(fig.axes[1].texts) == 0


def test_the_calibration_figure_has_no_caption_one_font_size_and_its_replicate_counts():
    """It had its caption as a title, texts of 8, 10 and 12 pt, and no replicate counts (50 for a negative control,
    30 for a positive one; a panel-matched study trains 5 AC-GATE replicates and 20 of the moderated DL)."""
    rows = []
    for scenario, control, counts in (("homogeneous_lags", "negative", {"acgate": 50, "moderated_dl": 50}),
                                      ("proxy_lags_one", "positive", {"acgate": 5, "moderated_dl": 20})):
        for reference, replicates in counts.items():
            for rule in ("paper", "calibrated"):
                for layer in ("L1", "L2", "L3", "lags differ"):
                    rows.append({"scenario": scenario, "control": control, "reference": reference, "rule": rule,
                                 "layer": layer, "truth": "supported" if control == "positive" else "not supported",
                                 "replicates": replicates, "supported": 1, "share_supported": 1 / replicates,
                                 "ci_low": 0.0, "ci_high": 0.3})
    fig = figures.calibration_figure(pd.DataFrame(rows))
    legible(fig)
    assert fig.get_suptitle() == ""
    sizes = {t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip()}
    assert len(sizes) == 1, sizes
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [
        "homogeneous lags (negative)\nn = 50", "proxy lags one (positive)\nn = 5 AC-GATE, 20 Moderated DL"]


def test_case_study_trend_stays_within_the_data_and_panels_share_k_star(own_report, own_panel):
    _, results = own_report
    fig = figures.case_study_figure(results, own_panel[1])
    for ax in fig.axes:
        (points,), (trend, *_) = ax.collections, ax.lines
        x, y = points.get_offsets().T
        assert x.min() <= trend.get_xdata().min() and trend.get_xdata().max() <= x.max()
        assert y.min() <= trend.get_ydata().min() and trend.get_ydata().max() <= y.max()
    assert len({ax.get_ylim() for ax in fig.axes}) == 1
    assert re.search(r", p (≤ 1/201|= \d)", fig.axes[0].get_title(loc="left"))


def case_study_inputs(tmp_path):
    """Two real panels' audits for the case study, made up: economics (a PWT panel: countries, years; its paper
    stratifier mean_hc at p 0.0085) and a user's own "mine" (its p at the floor of 2000 permutations)."""
    rng = np.random.default_rng(0)
    results = {}
    for domain, loader, stratifier, p in (("economics", "pwt", "mean_hc", 0.0085), ("mine", None, "mean_x", 1 / 2001)):
        entities = [f"E{i:02d}" for i in range(30)]
        folder = tmp_path / "processed" / domain
        folder.mkdir(parents=True)
        pd.DataFrame({"entity": entities, stratifier: rng.normal(size=30)}).to_csv(folder / "stratifiers.csv",
                                                                                  index=False)
        if loader:
            (folder / "manifest.json").write_text(json.dumps({"params": {"data": {"loader": loader}}}))
        kstar = pd.DataFrame([{"entity": e, "seed": s, "method": "acgate", "kstar": rng.uniform(1, 5)}
                              for e in entities for s in range(20)])
        summary = pd.DataFrame([{"method": "acgate", "stratifier": stratifier, "circular": False,
                                 "closest_proxy": "mean_y", "circular_joint": False, "proxy_r_joint": 0.3,
                                 "mean_abs_rho": 0.4, "pooled_rho": 0.41, "pooled_p": p}])
        results[domain] = SimpleNamespace(kind="data", l2_summary=summary, kstar_by_entity=kstar,
                                          l1=kstar[["seed", "method"]].drop_duplicates(),
                                          config=SimpleNamespace(permutations=2000))
    return results, tmp_path, {"case_study": {"economics": {"stratifier": "mean_hc"}}}


def test_case_study_figure_is_lettered_with_units_countries_and_one_p_notation(tmp_path):
    """The case study's panels had no letters, no units on the axes, "entity" for a country, and a p printed as
    "p = 0.0085" beside a mathtext "p $\\leq$ 1/2001"."""
    results, data_root, paper = case_study_inputs(tmp_path)
    fig = figures.case_study_figure(results, data_root, paper)
    economics, mine = fig.axes
    assert economics.get_title(loc="left") == "A  economics: $\\rho$ = 0.41, p = 0.0085"
    assert mine.get_title(loc="left") == "B  mine: $\\rho$ = 0.41, p ≤ 1/2001"
    assert economics.get_title(loc="left").endswith(statistics.p_text(0.0085, 2000))
    assert economics.get_xlabel() == "mean human capital (PWT index)" and mine.get_xlabel() == "mean x"
    assert economics.get_ylabel() == "seed-mean $k^\\star$ of AC-GATE (years)"
    assert [ax.collections[0].get_label() for ax in fig.axes] == ["country", "entity"]
    assert fig.get_suptitle() == ""  # 20 seeds: the paper's grid


def test_quantile_medians_follow_the_ranks():
    x = pd.Series(np.arange(50.0))
    trend = figures.quantile_medians(x, 10 - x / 10)
    assert len(trend) == 5 and trend.y.is_monotonic_decreasing and trend.x.min() >= 0 and trend.x.max() <= 49
