"""Tests of acgate.notebook.html_view: the HTML view of executed notebooks and its index page."""

import shutil
import subprocess
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from acgate.notebook.html_view import _exporter, _write_page, html_view


def index_of(root: Path, made: dict[str, dict]) -> str:
    """The HTML view's index page of executed notebooks written at ``made`` (path -> Papermill parameters) under
    ``root``."""
    for path, parameters in made.items():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
        nb.metadata["papermill"] = {"duration": 1.0, "parameters": parameters}
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, root / path)
    html_view(root / "runs" / "html" / "index.html", [Path(p) for p in sorted(made)])
    return (root / "runs" / "html" / "index.html").read_text()


def test_html_view_lists_pages_in_pipeline_order_links_outputs_and_scrolls_wide_tables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for output in ("tables/verdict_matrix.csv", "tables/verdict_matrix.md", "figures/evidence.png"):
        (tmp_path / output).parent.mkdir(exist_ok=True)
        (tmp_path / output).write_text("x")
    report_params = {"tables_dir": str(tmp_path / "tables"), "figures_dir": "figures"}
    made = {"data/processed/d/seed00/02_synthetic_dgp.ipynb": {}, "runs/d/seed00/03_train.ipynb": {},
            "runs/d/panel_matched/07_panel_matched.ipynb": {}, "runs/d/audit/04_audit.ipynb": {},
            "runs/report/05_report.ipynb": report_params}
    index = index_of(tmp_path, made)
    steps = [index.index(f"{step}</a>") for step in ("02_synthetic_dgp", "03_train", "07_panel_matched", "04_audit",
                                                     "05_report")]
    assert steps == sorted(steps)  # prep and DGP, training, the panel-matched study the audit reads, audit, report
    assert "<h2>panel_matched</h2>" not in index and index.count("<h2>d</h2>") == 1  # the study under its domain
    assert 'href="../../tables/verdict_matrix.md"' in index and 'href="../../tables/verdict_matrix.csv"' in index
    assert 'src="../../figures/evidence.png"' in index
    page = (tmp_path / "runs" / "html" / "runs" / "d" / "audit" / "04_audit.html").read_text()
    assert 'href="../../../index.html"' in page and "overflow-x:auto" in page


def test_html_pages_show_a_progress_bar_once_are_titled_by_domain_and_seed_and_render_markdown(tmp_path, monkeypatch):
    """A training page held 95 frames of its progress bars (a stream output each, ending in a carriage return), every
    page was titled only by its step, and an index link to a Markdown table showed its source text."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "t.csv").write_text("a\n1\n")
    (tmp_path / "tables" / "t.md").write_text("Caption.\n\n| a |\n|--:|\n| 1 |\n")
    frames = [nbformat.v4.new_output("stream", name="stdout", text=f"\racgate seed 3: {p:3d}%|") for p in range(95)]
    cell = nbformat.v4.new_code_cell("train()", outputs=frames)
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["papermill"] = {"duration": 1.0, "parameters": {"tables_dir": "tables"}}
    path = tmp_path / "runs" / "economics" / "seed03" / "03_train.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    html_view(tmp_path / "runs" / "html" / "index.html", [path])
    page = (tmp_path / "runs" / "html" / "runs" / "economics" / "seed03" / "03_train.html").read_text()
    assert page.count("acgate seed 3:") == 1 and " 94%|" in page
    assert "<title>03_train · economics · seed03</title>" in page
    index = (tmp_path / "runs" / "html" / "index.html").read_text()
    assert 'href="tables/t.html">view</a>' in index
    assert '<td style="text-align:right">1</td>' in (tmp_path / "runs" / "html" / "tables" / "t.html").read_text()


def test_html_pages_converted_in_several_processes_are_those_of_a_fresh_exporter_each(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # pages mirror the notebooks' paths below the working directory
    notebooks = []
    for i in range(5):  # each with metadata of its own, so that one page taking another's would show
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# notebook {i}"),
                                             nbformat.v4.new_code_cell(f"print({i})")])
        nb.metadata["language_info"] = {"name": "python", "version": f"3.{i}", "codemirror_mode": f"mode{i}"}
        nb.metadata["title"] = f"title {i}"
        notebooks.append(tmp_path / "runs" / "d" / f"seed{i:02d}" / "03_train.ipynb")
        notebooks[-1].parent.mkdir(parents=True)
        nbformat.write(nb, notebooks[-1])
    pages = {}
    for jobs in (2, 1):
        index = tmp_path / f"html{jobs}" / "index.html"
        written = html_view(index, notebooks, jobs=jobs)
        assert written == [index.parent / n.relative_to(tmp_path).with_suffix(".html") for n in notebooks]
        pages[jobs] = [page.read_text() for page in written]
    fresh = tmp_path / "fresh" / "index.html"  # the pages as one exporter per page makes them
    for path in notebooks:
        _exporter.cache_clear()
        _write_page(nbformat.read(path, as_version=4), path.stem, fresh,
                             fresh.parent / path.relative_to(tmp_path).with_suffix(".html"))
    expected = [(fresh.parent / n.relative_to(tmp_path).with_suffix(".html")).read_text() for n in notebooks]
    assert pages[2] == expected and pages[1] == expected
    for i, page in enumerate(expected):  # each page shows its own notebook's title, and no other's
        assert [f"title {j}" in page for j in range(5)] == [j == i for j in range(5)]


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
    index = index_of(tmp_path, made)
    report = index.index('href="../d/audit/report.html"')
    assert report < index.index("Verdict matrix") < index.index("03_train</a>")  # first, above the notebooks
    assert index.count("<h2>Verdict matrix</h2>") == 1
    assert "The grid in <code>runs</code>" in index and "<td>d&lt;x&gt;</td><td>acgate</td><td>supported</td>" in index
    assert 'href="../../tables/verdict_matrix.md"' in index


def test_a_table_page_shows_html_in_a_users_column_names_and_ids_as_text(tmp_path, monkeypatch):
    """A stratifier named gov<img src=x onerror=...> reaches tables/<domain>_l2.md as it is (Markdown is text); the
    HTML view renders it escaped, so no element of the user's making reaches the page."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "own_l2.csv").write_text("stratifier,rho\n")
    (tmp_path / "tables" / "own_l2.md").write_text("| stratifier | rho |\n|---|---|\n"
                                                   "| gov<img src=x onerror=alert(1)> | 0.5 |\n"
                                                   "| <script>alert(2)</script> | 0.1 |\n")
    index_of(tmp_path, {"runs/report/05_report.ipynb": {"tables_dir": str(tmp_path / "tables"),
                                                          "figures_dir": "figures"}})
    page = (tmp_path / "runs" / "html" / "tables" / "own_l2.html").read_text()
    assert "gov&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    assert "<img" not in page and "<script" not in page


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
RAN = '<img src=x onerror="document.body.dataset.ran=1"><script>document.body.dataset.ran=2</script>'


def rendered_dom(page: Path, profile: Path) -> str:
    """The page's DOM after a headless Chromium loaded it and ran whatever scripts it has."""
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert "<body" in done.stdout, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian: apt-get install chromium)")
def test_html_in_a_users_names_runs_no_script_in_a_real_browser(tmp_path, monkeypatch):
    """A column name and an id carrying an element with a handler and a script, on the HTML view's table page and on
    an audit page, loaded in headless Chromium: the body is left as it was (a page with the same markup unescaped,
    the control, shows that the check sees a script run)."""
    from acgate.report.page import Page, render_html

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "own_l2.csv").write_text("stratifier,rho\n")
    (tmp_path / "tables" / "own_l2.md").write_text(f"| stratifier | rho |\n|---|---|\n| gov{RAN} | 0.5 |\n")
    index_of(tmp_path, {"runs/report/05_report.ipynb": {"tables_dir": str(tmp_path / "tables"),
                                                          "figures_dir": "figures"}})
    report = Page(f"Audit report: own{RAN}")
    report.paragraph(f"entity {RAN}")
    report.table(pd.DataFrame({f"stratifier{RAN}": [f"id{RAN}"], "rho": [0.5]}))
    audit_page = tmp_path / "report.html"
    audit_page.write_text(render_html(report))
    control = tmp_path / "control.html"
    control.write_text(f"<!doctype html><html><body><p>{RAN}</p></body></html>")
    assert 'data-ran="' in rendered_dom(control, tmp_path / "profile")  # the check sees a script that runs
    for page in (tmp_path / "runs" / "html" / "tables" / "own_l2.html", audit_page):
        assert 'data-ran="' not in rendered_dom(page, tmp_path / "profile"), page
