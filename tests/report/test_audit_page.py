"""The audit report page of a domain: a tiny grid of a user's own panel (the example panel, 3 seeds, a few methods of
both families, one method left out of a seed) renders as one self-contained HTML page and its Markdown twin, with the
verdicts first, the problems and warnings once each, the figures, the data and the provenance; user strings are
escaped; and the HTML view of a grid links each report at its top."""

import dataclasses
import html
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import nbformat  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from acgate.audit import domain_audit as audit
from acgate.config import load_params  # noqa: E402
from acgate.data import prep
from acgate.data.example import write_example  # noqa: E402
from acgate.models import runner  # noqa: E402
from acgate.notebook.html_view import html_view  # noqa: E402
from acgate.report.audit_page import HTML_NAME, MARKDOWN_NAME, write_audit_report  # noqa: E402
from acgate.report.page import Code, Page, Strong, render_html, render_markdown  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
METHODS = ["acgate", "no_ac_encoder", "shuffled_proxies", "proxy_shared_gate", "moderated_dl", "shared_dl",
           "two_stage_dl"]
PARTIAL = "uniform_lag"  # trained for seeds 0 and 1 of 3: a run asked for and left out


@pytest.fixture(scope="module")
def tiny_grid(tmp_path_factory):
    """The example panel (a user's own, whose true lags are known) trained for 3 seeds under the smoke profile,
    audited, and its report written: (audit result, params, runs root, data root, html path, markdown path)."""
    tmp = tmp_path_factory.mktemp("audit_report")
    params = load_params(ROOT / "params" / "example_panel.yaml", ROOT / "params" / "smoke_panel.yaml")
    data = dataclasses.replace(params.data, csv_file=str(write_example(tmp / "example_panel.csv")))
    params = dataclasses.replace(params, data=data, audit=dataclasses.replace(params.audit, permutations=200,
                                                                              bootstrap=200))
    long, source = prep.load_long(params, ROOT)
    prep.save(prep.prepare(long, params, source), tmp / "data" / "processed" / params.domain, {"note": "test"})
    for seed in range(3):
        panel = prep.panel_for_training(params, seed, tmp / "data")
        for method in METHODS + [PARTIAL] * (seed < 2):
            runner.run_method(panel, params, method, seed, tmp / "runs", lambda s: None)
    result = audit.audit_domain(params, tmp / "runs", tmp / "data", 3, [*METHODS, PARTIAL])
    out = tmp / "runs" / params.domain / "audit"
    result.write(out)
    html_path, md_path = write_audit_report(result, params, tmp / "runs", tmp / "data", out, [ROOT / "tables"])
    return result, params, tmp / "runs", tmp / "data", html_path, md_path


def test_the_page_puts_the_verdicts_first_then_figures_data_and_provenance(tiny_grid):
    result, params, runs, _, html_path, _ = tiny_grid
    page = html_path.read_text()
    sections = ["Verdicts at a glance", "Problems", "Warnings", "Verdicts for AC-GATE", "Verdicts for Moderated DL",
                "Do the entities&#x27; lags differ at all?", "AC-GATE against the classical yardstick", "Figures",
                "Data", "Runs audited", "Provenance"]
    places = [page.index(s) for s in sections]
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
    assert "Generic error rates" in page and "of 500 negatives" in page  # the committed calibration of the rules
    assert "Against the Moderated DL, AC-GATE forecasts held-out data" in page
    names = re.findall(r'<figure id="figure-(\w+)"', page)
    assert names == ["kstar", "stratifier_rho", "kstar_stratifiers", "heldout", "neural_vs_classical", "recovery"]
    assert "40 entities kept, 0 dropped" in page and "2021..2024" in page  # the data: entities, the test window
    manifest = (runs / result.domain / "seed00" / "acgate" / "manifest.json").read_text()
    digest = re.search(r'"code_digest": "(\w+)"', manifest).group(1)
    assert digest in page and params.digest() in page and "0-2" in page


def test_the_page_is_self_contained(tiny_grid):
    page = tiny_grid[4].read_text()
    sources = re.findall(r'src="([^"]*)"', page)
    assert len(sources) == 6 and all(s.startswith("data:image/png;base64,") for s in sources)
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert all(href.startswith("#") for href in re.findall(r'href="([^"]*)"', page))  # only within the page


def test_the_markdown_twin_says_the_same_with_its_figures_beside_it(tiny_grid):
    result, _, _, _, html_path, md_path = tiny_grid
    text = md_path.read_text()
    assert md_path.name == MARKDOWN_NAME and html_path.name == HTML_NAME
    for heading in ("## Verdicts at a glance", "## Verdicts for AC-GATE", "## Figures", "## Data", "## Provenance"):
        assert heading in text
    figures = re.findall(r"!\[\w+\]\((report_figures/\w+\.png)\)", text)
    assert len(figures) == 6 and all((md_path.parent / f).read_bytes().startswith(b"\x89PNG") for f in figures)
    last = len({w.split(": ", 1)[1] for w in result.warnings()})
    assert f"**W{last}**" in text and f"**W{last + 1}**" not in text and "> **Warnings" in text


def test_user_strings_are_escaped_in_html_and_markdown(tiny_grid, tmp_path):
    result, params, runs, data, _, _ = tiny_grid
    evil = "<script>alert(1)</script> region_*01*"
    excluded = pd.DataFrame([{"seed": 0, "method": "acgate", "reason": evil}])
    html_path, md_path = write_audit_report(dataclasses.replace(result, problems=[evil], excluded=excluded), params,
                                            runs, data, tmp_path)
    page = html_path.read_text()
    assert "<script>" not in page and page.count(html.escape(evil)) == 2  # the problem, the table of runs left out
    assert r"\<script\>" in md_path.read_text() and r"region\_\*01\*" in md_path.read_text()

    small = Page("t")
    small.paragraph(Strong("supported"), " entity ", Code("a<b"), " & c_d")
    small.table(pd.DataFrame({"entity": ["<img src=x>"], "kstar": [1.5]}))
    shown = render_html(small)
    assert "&lt;img src=x&gt;" in shown and "<code>a&lt;b</code> &amp; c_d" in shown
    assert '<span class="v supported">supported</span>' in shown  # a verdict as a badge
    markdown, files = render_markdown(small)
    assert "**supported** entity `a<b` & c_d" in markdown and not files


def test_the_html_view_links_each_audit_report_first_and_shows_the_verdict_matrix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for output, text in {"runs/d/audit/report.html": "<html></html>",
                         "tables/verdict_matrix.csv": "domain,reference,L1 calibrated\nd<x>,acgate,supported\n",
                         "tables/verdict_matrix.md": "x"}.items():
        (tmp_path / output).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / output).write_text(text)
    made = {"runs/d/seed00/03_train.ipynb": {}, "runs/d/audit/04_audit.ipynb": {},
            "runs/report/05_report.ipynb": {"tables_dir": str(tmp_path / "tables"), "runs_dir": "runs"},
            # the studies and the calibration write into the same tables folder: the matrix is still shown once
            "runs/d/panel_matched/07_panel_matched.ipynb": {"tables_dir": str(tmp_path / "tables")},
            "runs/audit_calibration/06_audit_calibration.ipynb": {"tables_dir": str(tmp_path / "tables")}}
    for path, parameters in made.items():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
        nb.metadata["papermill"] = {"duration": 1.0, "parameters": parameters}
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, tmp_path / path)
    html_view(tmp_path / "runs" / "html" / "index.html", [Path(p) for p in sorted(made)])
    index = (tmp_path / "runs" / "html" / "index.html").read_text()
    report = index.index('href="../d/audit/report.html"')
    assert report < index.index("Verdict matrix") < index.index("03_train</a>")  # first, above the notebooks
    assert index.count("<h2>Verdict matrix</h2>") == 1
    assert "The grid in <code>runs</code>" in index and "<td>d&lt;x&gt;</td><td>acgate</td><td>supported</td>" in index
    assert 'href="../../tables/verdict_matrix.md"' in index
