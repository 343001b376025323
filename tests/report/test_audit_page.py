"""The audit report page of a domain: a tiny grid of a user's own panel (the example panel, 3 seeds, a few methods of
both families, one method left out of a seed) renders as one self-contained HTML page and its Markdown twin, with the
verdicts first, the problems and warnings once each, the figures, the data and the provenance."""

import html
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from acgate.layout import AUDIT_MARKDOWN, AUDIT_PAGE, MEMORY_OFF
from tests.report.conftest import PARTIAL, ROOT


def test_the_page_puts_the_verdicts_first_then_figures_data_and_provenance(tiny_grid):
    result, params, runs, _, html_path, _ = tiny_grid
    page = html_path.read_text()
    sections = ["What this panel shows", "Verdicts at a glance", "Problems", "Warnings", "Verdicts for AC-GATE",
                "Verdicts for Moderated DL", "Do the entities&#x27; lags differ at all?",
                "AC-GATE against the classical yardstick", "Figures", "Data", "Runs audited", "Provenance"]
    places = [re.search(rf"<h[2-3][^>]*>{re.escape(s)}|<strong>{re.escape(s)}", page).start() for s in sections]
    assert places == sorted(places)
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    for found in result.verdicts_by_reference.values():  # each layer: its verdict, and the paper's beside it
        for layer, cell in found["calibrated"].items():
            assert f"{cell['verdict']} (paper: {found['paper'][layer]['verdict']}" in text
    assert f"runs/{result.domain}/seed02/{PARTIAL}" not in page and "left out" in page
    assert all(html.escape(p) in page for p in result.problems) and len(result.problems) >= 2  # the run left out
    warnings = list(dict.fromkeys(w.split(": ", 1)[1] for w in result.warnings()))
    left_out = next(w for w in warnings if "asked for were left out" in w)  # warns every layer of both references
    assert f"acgate L0, L1, L2, L3 (calibrated rule); moderated_dl L0, L1, L2, L3 (calibrated rule): {left_out}" in text
    items = re.findall(r"<li id='w(\d+)'><strong>W\1</strong> (.*?)</li>", page)  # once each, numbered
    assert [html.unescape(item).split("rule): ", 1)[1] for _, item in items] == warnings
    assert all(f'href="#w{n}"' in page for n, _ in items)  # and the verdicts refer to them by number
    # the committed calibration of the rules for this AC-GATE (the example panel's: without the gate's memory)
    folder = ROOT / "tables" / ("" if params.model.gate_memory else MEMORY_OFF)
    committed = pd.read_csv(folder / "audit_calibration.csv")
    negatives = committed[(committed.control == "negative") & (committed.reference == "acgate")
                          & (committed.rule == "calibrated") & (committed.layer == "L1")].replicates.sum()
    assert "Generic error rates" in page and f"of {negatives} negatives" in page
    assert f"tables/{MEMORY_OFF}/audit_calibration.csv (" in page  # the provenance names the one read
    assert "Against the Moderated DL, AC-GATE forecasts held-out data" in page
    names = re.findall(r'<figure id="figure-(\w+)"', page)
    assert names == ["kstar", "stratifier_rho", "kstar_stratifiers", "heldout", "neural_vs_classical", "recovery"]
    assert "40 entities kept, 0 dropped" in page and "2021..2024" in page  # the data: entities, the test window
    manifest = (runs / result.domain / "seed00" / "acgate" / "manifest.json").read_text()
    digest = re.search(r'"code_digest": "(\w+)"', manifest).group(1)
    assert digest in page and params.digest() in page and "0-2" in page


def test_the_generic_rates_are_those_of_the_ac_gate_audited(tmp_path):
    """AC-GATE without the gate's memory reads the calibration in the tables' gate_memory_off folder, and a
    calibration of the other model never gives its rates: the page of such a run showed the paper's model's."""
    import json

    from acgate.audit.verdicts import RULES_VERSIONS
    from acgate.report.audit_page import generic_calibration

    def calibration_in(folder: Path, gate_memory: bool) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "tables" / "audit_calibration.csv", folder)
        record = json.loads((ROOT / "tables" / "audit_calibration.json").read_text())
        record["params"]["model"]["gate_memory"] = gate_memory
        (folder / "audit_calibration.json").write_text(json.dumps(record))

    calibration_in(tmp_path, True)  # the paper's model's, where every audit of it reads it
    assert generic_calibration([tmp_path])["rates"]
    off = generic_calibration([tmp_path], gate_memory=False)
    assert "rates" not in off and off["note"] == f"no calibration of the rules (audit_calibration.csv) in " \
                                                 f"{tmp_path / MEMORY_OFF}; make calibrate-own measures it"
    calibration_in(tmp_path / MEMORY_OFF, True)  # the paper's model's, in the other model's folder
    assert "rates" not in (wrong := generic_calibration([tmp_path], gate_memory=False))
    assert wrong["note"].endswith("measured AC-GATE with the gate's memory (the paper's model) and this audit's "
                                  "AC-GATE is without the gate's memory: its error rates do not apply; make "
                                  "calibrate-own measures it")
    calibration_in(tmp_path / MEMORY_OFF, False)
    assert generic_calibration([tmp_path], gate_memory=False)["file"].endswith(
        f"{MEMORY_OFF}/audit_calibration.csv")
    record = json.loads((tmp_path / "audit_calibration.json").read_text())  # one of older rules names the target
    record["rules_version"] = {reference: version - 1 for reference, version in RULES_VERSIONS.items()}
    (tmp_path / "audit_calibration.json").write_text(json.dumps(record))
    assert generic_calibration([tmp_path])["note"].endswith("its error rates do not apply; make calibrate measures it")


def test_the_page_is_self_contained(tiny_grid):
    page = tiny_grid[4].read_text()
    for text in (page, tiny_grid[5].read_text()):  # no folder of the machine: the runs' folder is shown relative
        assert str(tiny_grid[2]) not in text and str(ROOT) not in text
    sources = re.findall(r'src="([^"]*)"', page)
    assert len(sources) == 6 and all(s.startswith("data:image/png;base64,") for s in sources)
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert all(href.startswith("#") for href in re.findall(r'href="([^"]*)"', page))  # only within the page


def test_the_markdown_twin_says_the_same_with_its_figures_beside_it(tiny_grid):
    result, _, _, _, html_path, md_path = tiny_grid
    text = md_path.read_text()
    assert md_path.name == AUDIT_MARKDOWN and html_path.name == AUDIT_PAGE
    for heading in ("## Verdicts at a glance", "## Verdicts for AC-GATE", "## Figures", "## Data", "## Provenance"):
        assert heading in text
    figures = re.findall(r"!\[\w+\]\((report_figures/\w+\.png)\)", text)
    assert len(figures) == 6 and all((md_path.parent / f).read_bytes().startswith(b"\x89PNG") for f in figures)
    last = len({w.split(": ", 1)[1] for w in result.warnings()})
    assert f"**W{last}**" in text and f"**W{last + 1}**" not in text and "> **Warnings" in text


def test_the_glance_states_each_rules_error_rates_or_why_they_were_not_measured(tiny_grid):
    """Beside the verdicts: each rule's false supports and smallest detected spread on surrogates of the panel, or
    "not measured" and why (no study; no AC-GATE replicates in it; L0, which the surrogates do not test)."""
    import dataclasses

    from acgate.report.audit_page import rates_at_a_glance

    result = tiny_grid[0]
    page = tiny_grid[4].read_text()
    assert "not measured: no panel-matched study" in page
    assert "A simulated panel (its true lags in column true_lag)" in page  # the example is simulated, not real
    rate = {"false_support": {"supported": 6, "replicates": 240}, "smallest_detectable": 1.0,
            "worst_null": {"scenario": "effect_size", "supported": 4, "replicates": 40}}
    study = {"note": "", "settings": {"neural_replicates": 0},
             "error_rates": {"moderated_dl": {"L1": rate, "L2": {**rate, "smallest_detectable": None},
                                              "lags differ": {**rate, "smallest_detectable": 0.5}}}}
    table = rates_at_a_glance(dataclasses.replace(result, error_rates=study), ["acgate", "moderated_dl"])
    classical, neural = table["Moderated DL"].to_numpy(), table["AC-GATE"].to_numpy()  # rows: L0, L1, L2, L3, differ
    # the worst null class first (the size of a test is its worst case), the pooled count beside it
    assert classical[1] == ("false in 4 of 40 of its worst null (effect_size), 6 of 240 in all; detects a spread of 1 "
                            "lag in 80 %")
    assert classical[2].endswith("detects no spread simulated in 80 %")
    assert table.loc["lags differ at all"].iloc[0].endswith("detects a spread of 0.5 lags in 80 %")
    assert neural[1] == ("not measured: the study trained no AC-GATE replicates (neural_replicates 0; about 20 a "
                         "scenario measure its rates, each costing 7-17 classical ones)")
    assert table.iloc[0].str.startswith("not measured: a forecast comparison").all()
    stale = rates_at_a_glance(dataclasses.replace(result, error_rates={**study, "stale": ["acgate"]}),
                              ["acgate", "moderated_dl"])
    assert stale["AC-GATE"].iloc[1].startswith("not measured: the study measured them under other rules")


def test_each_glance_cell_says_whether_its_rate_on_the_panel_is_measured(tiny_grid):
    """A green "supported" stood in the glance table while its rate on the panel was "not measured", said only in the
    table below: each L1-L3 cell now carries its worst null's false supports or "rate not measured". An AC-GATE rate
    measured on replicates of 5 seeds does not stand beside verdicts of 3 (its tests run over seeds); the classical
    reference's fits read no seed, and its rates stand."""
    import dataclasses

    from acgate.audit import panel_matched
    from acgate.report.audit_page import rate_in_cell, rates_at_a_glance

    result = tiny_grid[0]
    assert "rate not measured" in tiny_grid[4].read_text()  # no study beside the example's grid
    rate = {"false_support": {"supported": 6, "replicates": 240}, "smallest_detectable": 1.0,
            "worst_null": {"scenario": "effect_size", "supported": 4, "replicates": 40}}
    study = {"note": "", "settings": {"neural_replicates": 20, "seeds": 5},
             "error_rates": {"moderated_dl": {"L1": rate}, "acgate": {"L1": rate}}}
    assert rate_in_cell(study, "moderated_dl", "L1") == "false in 4/40 nulls of its worst"
    assert rate_in_cell(study, "moderated_dl", "L2") == "rate not measured"
    assert panel_matched.at_seeds(study, 5) == study
    three = panel_matched.at_seeds(study, 3)
    assert list(three["error_rates"]) == ["moderated_dl"] and three["seeds_differ"] == ["acgate"]
    table = rates_at_a_glance(dataclasses.replace(result, error_rates=three), ["acgate", "moderated_dl"])
    assert table["AC-GATE"].iloc[1] == ("not measured: the study's replicates have 5 seeds and this audit 3, and "
                                        "AC-GATE's verdicts test over seeds")
    assert table["Moderated DL"].iloc[1].startswith("false in 4 of 40 of its worst null")


def test_a_blind_ac_gate_not_certified_points_to_the_classical_reference():
    """Where AC-GATE detects a 1-lag spread in under half as many surrogates as the moderated distributed lag, its
    L1 or L2 "not certified" says little, and the warning names the classical one; not where it keeps up, nor for a
    "supported", nor where either was not measured at 1 lag."""
    from acgate.report.page_warnings import power_warning

    def rates(neural, classical):
        return {"acgate": {"L1": {"power": {"1": {"supported": neural, "replicates": 20}}}},
                "moderated_dl": {"L1": {"power": {"1": {"supported": classical, "replicates": 40}}}}}

    warning = power_warning(rates(2, 37), "acgate", "L1", "not certified")
    assert warning.startswith("on surrogates of this panel AC-GATE detects a spread of 1 lag in 2 of 20, under half "
                              "the moderated distributed lag's 37 of 40") and warning.endswith("distributed lag's L1")
    assert power_warning(rates(10, 37), "acgate", "L1", "not certified") is None  # 50 % against 92 %: over half
    assert power_warning(rates(2, 37), "acgate", "L1", "supported") is None
    assert power_warning(rates(2, 37), "moderated_dl", "L1", "not certified") is None
    assert power_warning({"moderated_dl": rates(2, 37)["moderated_dl"]}, "acgate", "L1", "not certified") is None



def test_lag_tests_whose_persistence_is_not_the_surrogates_are_warned_for(tiny_grid):
    """The GLS tests' rho is read from each entity's own full curves, the surrogates' from the panel's noise model, and
    the tests' p rest on the first (energy's lags-differ p 0.02 at rho 0.26, 0.66 at the noise model's 0.67): the page
    warns beside the classical L1 and the lags-differ statement where they are more than 0.2 apart, and not where
    they agree or no study gives the second."""
    import dataclasses

    from acgate.report.audit_page import build_page
    from acgate.report.page import render_markdown
    from acgate.report.page_warnings import persistence_warning

    result, params, runs, data, _, _ = tiny_grid

    def at(rho, noise):
        study = {**result.error_rates, "residual_ar1": noise}
        return dataclasses.replace(result, lag_tests=result.lag_tests.assign(rho=rho), error_rates=study)

    warning = persistence_warning(at(0.26, 0.674))
    assert warning.startswith("the lag tests read the noise's persistence as AR(1) 0.26 where the panel's noise "
                              "model reads 0.67") and "so they reject more readily" in warning
    assert "reject less readily" in persistence_warning(at(0.99, 0.7))
    assert persistence_warning(at(0.8, 0.92)) is None and persistence_warning(at(0.26, None)) is None
    page = render_markdown(build_page(at(0.26, 0.674), params, runs, data))[0]
    number = re.search(r"W(\d+)\*\* the lag tests read the noise's persistence", page).group(1)
    classical = page[page.index("### L1", page.index("Verdicts for Moderated DL")):]
    assert f"W{number}" in classical[:classical.index("### L2")]  # beside the classical L1
    statement = page[page.index("Do the entities' lags differ at all?"):]
    assert f"W{number}" in statement[:statement.index("AC-GATE against the classical yardstick")]
    assert "the noise's persistence" not in render_markdown(build_page(at(0.8, 0.92), params, runs, data))[0]


def test_a_stability_warning_that_the_panels_surrogates_often_raise_falsely_says_so(tiny_grid):
    """On economics' surrogates whose countries share a shock with loadings that follow the proxies, the stability
    test said the lags changed in 5 of 20 (57 of 200 in a study of that class), and it says so on economics itself:
    where the panel-matched surrogates raise it clearly more often than alpha in their worst scenario, the page says
    the warning is no evidence of a break; not where they seldom do, nor where the test did not reject."""
    import dataclasses

    from acgate.report.audit_page import build_page
    from acgate.report.page import render_markdown
    from acgate.report.page_warnings import alarm_warning

    result, params, runs, data, _, _ = tiny_grid
    often = {"false_support": {"supported": 7, "replicates": 280, "ci": [0.0101, 0.0508]},
             "worst_null": {"scenario": "common_shock", "supported": 5, "replicates": 20, "ci": [0.0866, 0.491]}}
    seldom = {**often, "worst_null": {**often["worst_null"], "supported": 1, "ci": [0.0013, 0.2487]}}
    assert alarm_warning(often, 0.05) == (
        "on surrogates of this panel whose lags never change, the stability test said they changed in 5 of 20 of its "
        "worst null (common_shock; 95 % interval 9-49 %), 7 of 280 over all: the warning that the lags changed is no "
        "evidence of a break here")
    assert alarm_warning(seldom, 0.05) is None

    def page(alarms, p):
        tests = result.lag_tests.assign(stable_p=p, stable_first_late=2021, stable_kstar_early=3.0,
                                        stable_kstar_late=4.0, stable_kstar_mean_abs_change=1.0)
        shown = dataclasses.replace(result, lag_tests=tests, error_rates={**result.error_rates, "lags_changed": alarms})
        return render_markdown(build_page(shown, params, runs, data))[0]

    often_page, seldom_page = page(often, 0.01), page(seldom, 0.01)
    assert "the lags changed over time" in often_page and "no evidence of a break here" in often_page
    # ... and the plain-language reading of L1 (what this panel shows) does not call it a change
    assert ("but it says so in 5 of 20 of this panel's surrogates whose lags never change (common_shock): no evidence "
            "of a break") in often_page and "an average of the two periods" not in often_page
    assert "no evidence of a break" not in seldom_page and "an average of the two periods" in seldom_page
    assert "no evidence of a break" not in page(often, 0.5)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MEASURE = """<script>
var wide = [document.documentElement.scrollWidth + " of " + window.innerWidth];
document.querySelectorAll("table, p, li, h1, h2, h3, figure, img").forEach(function (e) {
  var right = e.getBoundingClientRect().right;
  if (e.scrollWidth > e.clientWidth + 1 || right > window.innerWidth + 1)
    wide.push(e.tagName + " " + e.scrollWidth + "/" + e.clientWidth + ": " + (e.innerText || "").slice(0, 60));
});
parent.postMessage(wide.join("\\n"), "*");
</script>"""


def laid_out_at(width: int, page: Path, folder: Path) -> list[str]:
    """What headless Chromium finds too wide when it lays the page out ``width`` px wide (in a frame of that width:
    a headless window is at least 500 px): the document's width against the frame's first, then each element that
    scrolls or runs past the frame's right edge."""
    (folder / "page.html").write_text(page.read_text() + MEASURE)
    (folder / "host.html").write_text(
        f'<!doctype html><html><body><iframe src="page.html" style="width:{width}px;height:800px;border:0"></iframe>'
        '<script>addEventListener("message", function (e) { document.body.dataset.wide = e.data; });</script>'
        "</body></html>")
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={folder / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
                           (folder / "host.html").as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'data-wide="([^"]*)"', done.stdout)
    assert found, done.stderr[-2000:]
    return html.unescape(found.group(1)).split("\n")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian: apt-get install chromium)")
def test_the_page_fits_a_phones_width(tiny_grid, tmp_path):
    """At 390 px the page scrolled sideways (449 px wide): the provenance table (583 px in a 343 px column), lines
    holding a timestamp or a path, and each figure's border. Now nothing is wider than the screen; only preformatted
    text (the params) scrolls in its own box."""
    wide = laid_out_at(390, tiny_grid[4], tmp_path)
    document, inner = (int(n) for n in wide[0].split(" of "))
    assert inner == 390 and document <= 390, wide
    assert wide[1:] == [], wide
    desktop = laid_out_at(1280, tiny_grid[4], tmp_path)
    assert len(desktop) == 1 and int(desktop[0].split(" of ")[0]) <= 1280, desktop


def test_ac_gates_reach_on_panels_like_this_one_stands_beside_its_verdicts(tiny_grid, tmp_path, monkeypatch):
    """Where AC-GATE's k* read the lags in few of the map's panels nearest this one (N, lagged share and rho from the
    panel-matched study's source), a numbered warning stands beside each of its verdicts on the lags (L1-L3, not the
    forecast); where it read them, one line opens its section; with no share or rho from a study, nothing."""
    import dataclasses

    from acgate.audit import reach
    from acgate.report.audit_page import build_page
    from acgate.report.page import render_markdown

    result, params, runs, data, _, _ = tiny_grid
    study = {**result.error_rates, "entities": 88, "lagged_share": 0.05, "residual_ar1": 0.92}
    cells = [(40, 0.05, 0.95, 0.04, 0.95), (600, 0.7, 0.0, 0.45, 0.3)]

    def page_with(acgate_read: float, study: dict = study) -> str:
        rows = [{"n": n, "share": s, "rho": r, "method": method, "panels": 20, "median_spearman": 0.9,
                 "median_slope": read, "share_read": read, "measured_share": ms, "measured_rho": mr}
                for n, s, r, ms, mr in cells for method, read in (("acgate", acgate_read), ("moderated_dl", 0.9))]
        pd.DataFrame(rows).to_csv(tmp_path / "reach_summary.csv", index=False)
        (tmp_path / MEMORY_OFF).mkdir(exist_ok=True)  # the example's AC-GATE has no gate memory: its own map's rows
        pd.DataFrame(rows).query("method == 'acgate'").to_csv(tmp_path / MEMORY_OFF / "reach_summary.csv", index=False)
        monkeypatch.setattr(reach, "MAP_FOLDER", tmp_path)
        return render_markdown(build_page(dataclasses.replace(result, error_rates=study), params, runs, data))[0]

    page = page_with(0.1)
    number = re.search(r"W(\d+)\*\* AC-GATE's reach \(without the gate's memory; DGP panels whose lags spread",
                       page).group(1)
    assert "in 2 of 20 panels (median slope 0.10), the moderated distributed lag's in 18 of 20" in page
    section = page[page.index("Verdicts for AC-GATE"):page.index("Verdicts for Moderated DL")]
    layers = {layer: section[section.index(f"### {layer}"):] for layer in ("L0", "L1", "L2", "L3")}
    for layer in ("L1", "L2", "L3"):
        assert f"W{number}" in layers[layer][:layers[layer].index("###", 4) if layer != "L3" else None]
    assert f"W{number}" not in layers["L0"][:layers["L0"].index("### L1")]
    from acgate.panel_audit import PanelAudit  # the summary's warnings are the page's

    warned = PanelAudit(dataclasses.replace(result, error_rates=study), params, runs, runs).warnings
    assert any(line.startswith("AC-GATE's reach (without the gate's memory; DGP panels whose lags spread")
               for line in warned)
    sighted = page_with(0.9)
    assert "can carry information on the lags here." in sighted and "** AC-GATE's reach" not in sighted
    assert "AC-GATE's reach" not in page_with(0.1, {**study, "lagged_share": None})  # no study's source
