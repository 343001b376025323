"""The report's presentation (tables as readers see them, figures at a page's width) and a user's own panel getting a
report about that panel only."""

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from acgate import statistics  # noqa: E402
from acgate.audit import domain_audit as audit
from acgate.config import load_params  # noqa: E402
from acgate.data import prep
from acgate.data.example import write_example  # noqa: E402
from acgate.models import runner
from acgate.report import figures, inputs, paper_tables, render, reproduction
from acgate.runs import code_digest, code_versions  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
METHODS = ["acgate", "no_ac_encoder", "shuffled_proxies"]
L2_COLUMNS = ["method", "stratifier", "circular", "closest_proxy", "max_abs_spearman_with_proxy", "seeds_tested",
              "mean_abs_rho", "median_rho", "share_p_below_alpha", "fisher_p", "sign_consistency", "pooled_rho",
              "pooled_p", "proxy_r_joint", "circular_joint", "pooled_lag_free_p", "p_holm", "permutations"]


@pytest.fixture(scope="module")
def own_panel(tmp_path_factory):
    """The example panel (a user's own) with a third stratifier that duplicates a proxy, trained for 3 seeds under
    the smoke profile and audited: (runs root, data root, domain)."""
    tmp = tmp_path_factory.mktemp("own_report")
    params = load_params(ROOT / "params" / "example_panel.yaml", ROOT / "params" / "smoke_panel.yaml")
    data = dataclasses.replace(params.data, csv_file=str(write_example(tmp / "example_panel.csv")),
                               stratifiers=[*params.data.stratifiers, "mean:capacity"])
    params = dataclasses.replace(params, data=data, audit=dataclasses.replace(params.audit, permutations=200))
    long, source = prep.load_long(params, ROOT)
    prep.save(prep.prepare(long, params, source), tmp / "data" / "processed" / params.domain, {"note": "test"})
    for seed in range(3):
        panel = prep.panel_for_training(params, seed, tmp / "data")
        for method in METHODS:
            runner.run_method(panel, params, method, seed, tmp / "runs", lambda s: None)
    result = audit.audit_domain(params, tmp / "runs", tmp / "data", 3, METHODS)
    result.write(tmp / "runs" / params.domain / "audit")
    return tmp / "runs", tmp / "data", params.domain


@pytest.fixture(scope="module")
def own_report(own_panel):
    runs, _, domain = own_panel
    return paper_tables.build_tables(runs, [domain])


def test_an_own_panel_gets_no_paper_only_tables(own_report, own_panel):
    tables, _ = own_report
    domain = own_panel[2]
    assert "reproduction" not in tables  # no domain of the paper was run
    assert "wilcoxon_real_r2" not in tables and f"{domain}_wilcoxon_r2" in tables
    assert set(tables[f"{domain}_wilcoxon_r2"].domain) == {domain}
    assert set(tables["controlled_comparison"].method) == set(METHODS)  # only the methods that ran
    assert paper_tables.caption(f"{domain}_wilcoxon_r2").startswith(f"{domain}: paired Wilcoxon")


def test_the_reproduction_table_has_rows_only_for_paper_domains_that_ran(own_report):
    tables, results = own_report
    assert reproduction.reproduction(tables, results).empty


def test_the_reproduction_lookup_places_every_paper_number_once():
    paper = inputs.paper_numbers()

    def numbers(node):  # the paper's numbers (and verdicts) below a section; the case study names its stratifier
        return sum(numbers(v) if isinstance(v, dict) else k != "stratifier" for k, v in node.items())

    expected = sum(numbers(paper[s]) for s in paper if s not in ("ours", "not_comparable"))
    table = reproduction.reproduction({}, dict.fromkeys(inputs.paper_domains(paper)), paper)
    assert len(table) == expected + 4  # the synthetic verdict row stands for both scenarios
    assert not table.duplicated(["paper_table", "row", "quantity"]).any()
    numeric = table[table.paper_table != "verdict_matrix"]
    assert numeric.ours.isna().all() and (table[table.paper_table == "verdict_matrix"].ours == "").all()


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


def l2_frame():
    rows = []
    for i, method in enumerate(["acgate", "no_recon_reg", "shuffled_proxies"]):
        for j, stratifier in enumerate(["mean_hc", "mean_log_gdp_per_worker", "mean_log_capital_per_worker"]):
            rows.append([method, stratifier, j == 0, "mean_hc", 0.66 + 0.1 * j, 20, 0.248 + i / 10, 0.185, 0.55,
                         2.8e-14, 0.75, 0.287, 0.0085 if i else 1 / 2001, 0.718, j == 0, 0.66, np.nan, 2000])
    return pd.DataFrame(rows, columns=L2_COLUMNS)


def test_markdown_keeps_each_columns_precision_and_readable_headers():
    frame = pd.DataFrame({"domain": ["economics", "energy"], "test_r2_by_time": [0.64, 0.646],
                          "mean_diff": [-0.0001, 0.25], "fisher_p_min": [9.9e-22, 0.37]})
    text = render.markdown_table(frame, "caption")
    header, _, *rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in text.splitlines()[2:]]
    assert header == ["domain", "test R² (per year)", "mean difference", "Fisher p min"]
    assert [r[1] for r in rows] == ["0.640", "0.646"]  # not "0.64" beside "0.646"
    assert [r[2] for r in rows] == ["0.000", "0.250"]  # never a negative zero


def markdown_rows(text: str) -> list[list[str]]:
    """The cells of each row of a Markdown table (after its caption), split at the "|" that are not escaped."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def test_markdown_cells_escape_bars_counts_are_whole_and_p_keeps_two_digits():
    """The Grouped ARDL's k* kind "diagnostic: ARDL |coefficients|" shifted every later cell of its row; counts read
    as 75815.000 and W as 58.000; p = 0.40 printed as 0.4 beside 0.062."""
    frame = pd.DataFrame({"method": ["grouped_ardl", "acgate"], "kstar_kind": ["diagnostic: ARDL |coefficients|", "s"],
                          "parameters_economics": [75815.0, float("nan")], "W": [58.0, 3.5], "p": [0.4, 0.0625],
                          "domain": ["economics_proxy_shuffle", "synthetic_linear"]})
    header, _, *rows = markdown_rows(render.markdown_table(frame, "caption"))
    assert all(len(row) == len(header) for row in rows)
    assert rows[0][:5] == ["Grouped ARDL", "diagnostic: ARDL \\|coefficients\\|", "75815", "58", "0.40"]
    assert rows[1][3:] == ["3.5", "0.062", "synthetic linear"] and rows[0][5] == "economics (proxy shuffle)"


def test_every_committed_markdown_table_has_as_many_cells_in_each_row_as_its_header():
    for path in sorted((ROOT / "tables").glob("*.md")):
        header, *rows = markdown_rows(path.read_text())
        assert all(len(row) == len(header) for row in rows), path.name


def test_a_wilcoxon_p_at_the_floor_of_its_pairs_says_so():
    values = pd.Series([1.0, 2.0, 3.0, 4.0, 5.0])
    row = statistics.paired_wilcoxon(values * 2, values)  # 5 seeds, all better: p = 2/2^5
    wilcoxon = pd.DataFrame([{"metric": "test_mse", "reference": "acgate", "method": "tft", **row}])
    table = paper_tables.wilcoxon_table({"toy": SimpleNamespace(wilcoxon=wilcoxon)}, "test_mse", ["toy"])
    assert table.p[0] == pytest.approx(0.0625) and table.note[0] == "p at its floor for 5 pairs (every pair agrees)"


def test_readable_labels_know_the_papers_names_and_fall_back_to_the_id():
    assert render.readable("mean_log_gdp_per_worker") == "mean log GDP per worker"
    assert render.readable("trend_hc") == "trend of human capital"
    assert render.readable("mean_survey_noise") == "mean survey noise"  # a user's own name
    assert render.readable("region_size") == "region size"
    assert render.readable("energy_proxy_shuffle") == "energy (proxy shuffle)"
    assert render.header("parameters_economics") == "parameters, economics"


def test_a_wide_latex_table_is_split_into_parts_that_repeat_the_row_names(tmp_path):
    frame = l2_frame()
    paths = render.write_table(frame, tmp_path, "economics_l2", "Economics L2.")
    assert pd.read_csv(paths[0]).columns.tolist() == L2_COLUMNS  # the CSV keeps the machine names
    latex = paths[2].read_text()
    parts = latex.split(r"\par\medskip")[1:]
    assert len(parts) >= 2 and all("method" in p and "stratifier" in p for p in parts)
    assert "mean $|\\rho|$" in latex and "mean_abs_rho" not in latex and r"$\leq$ 1/2001" in latex


def test_the_l2_tables_show_their_main_columns_on_one_page_and_the_reproduction_no_latex(tmp_path):
    """economics_l2.tex ran to 4 stacked parts of 18 columns; the reproduction's LaTeX to 40 pages."""
    frame = l2_frame()
    paths = render.write_table(frame, tmp_path, "economics_l2", "Economics L2.", paper_tables.latex_view("economics_l2",
                                                                                                  frame))
    assert pd.read_csv(paths[0]).columns.tolist() == L2_COLUMNS and "lag-free p" in paths[1].read_text()
    assert r"\medskip" not in paths[2].read_text() and "lag-free" not in paths[2].read_text()
    (tmp_path / "reproduction.tex").write_text("stale")
    assert paper_tables.latex_view("reproduction", frame) is False
    paths = render.write_table(frame, tmp_path, "reproduction", "R.", paper_tables.latex_view("reproduction", frame))
    assert [p.suffix for p in paths] == [".csv", ".md"] and not (tmp_path / "reproduction.tex").exists()


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed")
def test_every_latex_table_fits_a_page(tmp_path):
    frames = {"economics_l2": l2_frame(),
              "synthetic_summary": pd.DataFrame({
                  "domain": ["synthetic_nonlinear"] * 3, "method": ["acgate", "shuffled_proxies", "plain_lstm"],
                  "seeds": [20] * 3, "kstar_kind": ["structural", "structural", "diagnostic: occlusion"],
                  **{f"{c}_{s}": [0.0319, 0.7144, 0.9821] for s in ("mean", "sd")
                     for c in ("test_mse", "mae_lag_centre", "spearman_lag_centre", "mae_dgp_mean_lag",
                               "spearman_dgp_mean_lag", "kstar_sd")}, "median_seconds": [6.5, 7.1, 25.9]})}
    for name, frame in frames.items():
        render.write_table(frame, tmp_path, name, f"{name}.", paper_tables.latex_view(name, frame))
    body = "\n".join(rf"\input{{{name}.tex}}" for name in frames)
    (tmp_path / "doc.tex").write_text(
        "\\documentclass{article}\\usepackage[T1]{fontenc}\\usepackage{booktabs,longtable}"
        f"\\usepackage[letterpaper,margin=1in]{{geometry}}\\begin{{document}}\n{body}\n\\end{{document}}\n")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "doc.tex"], cwd=tmp_path, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "Overfull \\hbox" not in (tmp_path / "doc.log").read_text()  # 6.5 in of text width


def test_the_run_manifest_says_when_runs_were_made_by_different_code(own_panel, own_report):
    runs_root, _, _ = own_panel
    record = paper_tables.run_manifest(runs_root, own_report[1], [], [])
    assert record["runs_code_digest"] == [code_digest()] and record["code_versions"] is None
    manifests = [{"code_digest": "aaa", "git_sha": "1+dirty"}] * 3 + [{"code_digest": "bbb", "git_sha": "1+dirty"}]
    sentence = code_versions(manifests)
    assert sentence.startswith("these runs were made by 2 different versions of the code")
    assert "aaa (3 runs, git 1+dirty); bbb (1 runs, git 1+dirty)" in sentence and "retrain=true" in sentence


def test_suite_times_keep_the_last_whole_suite_per_device():
    def record(devices, made, wall, cores=2):
        return {"domains": {"a": {"runs": 30}, "b": {"runs": 10}}, "devices": devices, "training_seconds_total": 99.0,
                "machine": {"cores": cores, "cpu": "Some CPU"}, "runs_git_sha": ["abc"], "created_utc": f"t{wall}",
                "workflow": {"wall_minutes_to_report": wall, "runs_made_in_this_invocation": made}}

    cpu = paper_tables.suite_times(record(["cpu"], 40, 31.5), {})
    assert cpu == {"cpu on 2 cores (Some CPU)": {"wall_minutes": 31.5, "runs": 40, "training_seconds_total": 99.0,
                                                  "runs_git_sha": ["abc"], "finished_utc": "t31.5"}}
    assert paper_tables.suite_times(record(["cpu"], 0, 0.4), cpu) == cpu  # only the report redone: not a suite time
    assert paper_tables.suite_times(record(["cpu"], 12, 9.0), cpu) == cpu  # a few runs redone
    both = paper_tables.suite_times(record(["cuda (NVIDIA H100)"], 40, 2.5, cores=16), cpu)
    assert both["cpu on 2 cores (Some CPU)"] == cpu["cpu on 2 cores (Some CPU)"]
    assert both["cuda (NVIDIA H100) on 16 cores (Some CPU)"]["wall_minutes"] == 2.5
    kept = paper_tables.suite_times(record(["cpu"], 40, 29.0), both)
    assert kept["cpu on 2 cores (Some CPU)"]["wall_minutes"] == 29.0
    partial = record(["cpu"], 40, 12.0)
    partial["workflow"]["skipped_domains"] = {"energy": "input files missing", "economics": "input files missing"}
    both = paper_tables.suite_times(partial, cpu)
    assert both["cpu on 2 cores (Some CPU), without economics, energy"]["wall_minutes"] == 12
    assert both["cpu on 2 cores (Some CPU)"]["wall_minutes"] == 31.5
