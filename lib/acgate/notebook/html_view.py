"""The HTML view of executed notebooks (``python -m acgate.notebook html``): nbconvert pages beside
an index page that lists them by domain and seed in pipeline order with their run time, and links to the audit
reports, tables and figures they wrote, so a reader can browse what ran without starting Jupyter. A page newer than
its notebook is kept; ``jobs`` processes convert pages.
"""

from __future__ import annotations

import csv
import functools
import html
import multiprocessing
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import mistune

from acgate.layout import AUDIT_PAGE
from acgate.runs import atomic_write

if TYPE_CHECKING:
    import nbformat

# the notebooks in the order they run: a data domain's panel-matched study (07) before its audit, which reads it
STEPS = ("01_data_prep", "02_synthetic_dgp", "03_train", "07_panel_matched", "04_audit", "05_report",
         "06_audit_calibration")
PAGE_STYLE = (".jp-OutputArea-output,.jp-RenderedHTMLCommon,div.output_area{overflow-x:auto}"  # wide tables scroll
              ".jp-RenderedHTMLCommon table{display:block;overflow-x:auto;max-width:100%}"
              "nav.acgate{font-family:sans-serif;padding:8px 16px;border-bottom:1px solid #ddd}")
INDEX_STYLE = ("body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}"
               "td,th{padding:2px 12px;text-align:left;border-bottom:1px solid #ddd}"
               "figure{display:inline-block;margin:0 1em 1em 0}figure img{height:9em;border:1px solid #ddd}")


def _where(notebook: Path) -> tuple[str, str]:
    """(domain, seed folder or '') of an executed notebook from its place in the layout (README, "Layout")."""
    parent = notebook.parent
    if parent.name.startswith("seed"):
        return parent.parent.name, parent.name
    if parent.name in ("audit", "panel_matched"):
        return parent.parent.name, ""
    return parent.name, ""


def _step(stem: str) -> int:
    return STEPS.index(stem) if stem in STEPS else len(STEPS)


@functools.cache
def _exporter():
    """One nbconvert HTML exporter per process: building one loads its templates, a third of a page's time. Its
    streams are coalesced: a progress bar's frames (each a stream output ending in a carriage return; a training page
    held 95) show as the last one."""
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    return HTMLExporter(config=Config({"CoalesceStreamsPreprocessor": {"enabled": True}}))


def _write_html(path: Path, text: str) -> None:
    """Write a page atomically: a write that fails (a full disk) leaves no half page, which a later view would keep as
    newer than its notebook. Its OSError names the file (a failed write's own does not)."""
    try:
        atomic_write(path, lambda f: f.write(text))
    except OSError as err:
        if err.filename is not None:
            raise
        raise OSError(err.errno, err.strerror, str(path)) from err


def _write_page(nb: nbformat.NotebookNode, name: str, index: Path, page: Path) -> Path:
    """Write a notebook as an HTML page (nbconvert) whose output areas scroll sideways, with a link back to the
    index; returns the page."""
    body, _ = _exporter().from_notebook_node(nb, resources={"metadata": {"name": name}})
    back = html.escape(os.path.relpath(index, page.parent))
    body = body.replace("</head>", f"<style>{PAGE_STYLE}</style>\n</head>", 1)
    nav = f'<nav class="acgate"><a href="{back}">&larr; all notebooks</a></nav>'
    _write_html(page, re.sub(r"(<body[^>]*>)", rf"\1{nav}", body, count=1))
    return page


def _outputs(index: Path, notebooks: list[nbformat.NotebookNode]) -> str:
    """The index's links to the tables and figures the notebooks wrote (their ``tables_dir`` and ``figures_dir``
    parameters, relative to the working directory, the project root under the workflow)."""
    folders = dict.fromkeys(Path(nb.metadata.get("papermill", {}).get("parameters", {})[key]).resolve()
                            for nb in notebooks for key in ("tables_dir", "figures_dir")
                            if key in nb.metadata.get("papermill", {}).get("parameters", {}))
    tables = sorted({f.with_suffix("") for d in folders for f in d.glob("*.csv")})
    figures = sorted({f.with_suffix("") for d in folders for f in d.glob("*.png")})
    if not tables and not figures:
        return ""

    def link(path: Path, ext: str) -> str:
        return f'<a href="{html.escape(os.path.relpath(path.with_suffix(ext), index.parent))}">{ext[1:]}</a>'

    def shown_table(table: Path) -> str:  # a browser shows a .md file as plain text: link its rendered page
        page = _table_page(table.with_suffix(".md"), index)
        return f'<a href="{html.escape(os.path.relpath(page, index.parent))}">view</a>'

    rows = "\n".join(f"<tr><td>{html.escape(t.name)}</td><td>"
                     + " ".join([shown_table(t)] if t.with_suffix(".md").is_file() else [])
                     + " " + " ".join(link(t, e) for e in (".md", ".csv", ".tex") if t.with_suffix(e).is_file())
                     + "</td></tr>" for t in tables)
    shown = "\n".join(f'<figure><a href="{html.escape(os.path.relpath(f.with_suffix(".png"), index.parent))}">'
                      f'<img src="{html.escape(os.path.relpath(f.with_suffix(".png"), index.parent))}" '
                      f'alt="{html.escape(f.name)}"></a><figcaption>{html.escape(f.name)} '
                      + " ".join(link(f, e) for e in (".png", ".pdf") if f.with_suffix(e).is_file())
                      + "</figcaption></figure>" for f in figures)
    return (f"<h2>Tables</h2>\n<table><tr><th>table</th><th>files</th></tr>\n{rows}\n</table>\n"
            f"<h2>Figures</h2>\n{shown}\n")


# Markdown to HTML with any raw HTML in it escaped: a table's cells hold the user's column names and ids
MARKDOWN = mistune.create_markdown(escape=True, plugins=["table"])


def _table_page(markdown: Path, index: Path) -> Path:
    """A Markdown table rendered as an HTML page beside the index (``tables/<name>.html``), with a link back."""
    page = index.parent / "tables" / markdown.with_suffix(".html").name
    back = html.escape(os.path.relpath(index, page.parent))
    _write_html(page, f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(markdown.stem)}</title>"
                      f"<style>{INDEX_STYLE}</style></head><body><nav><a href=\"{back}\">&larr; index</a></nav>"
                      f"{MARKDOWN(markdown.read_text())}</body></html>\n")
    return page


def _audit_reports(index: Path, notebooks: list[Path], read: list[nbformat.NotebookNode]) -> str:
    """The top of the index: each domain's audit report (``report.html`` beside its executed ``04_audit``), and the
    verdict matrix of the grid that 05_report tabulated (its ``tables_dir``), naming that grid's runs folder."""
    links = [f'<li><a href="{html.escape(os.path.relpath(page, index.parent))}">{html.escape(_where(notebook)[0])}'
             "</a></li>" for notebook in map(Path, notebooks)
             if notebook.stem == "04_audit" and (page := notebook.parent / AUDIT_PAGE).is_file()]
    out = (f"<h2>Audit reports</h2>\n<p>One page per domain: the verdicts with their evidence, warnings and error "
           f"rates, the figures, the data and the provenance.</p>\n<ul>{''.join(links)}</ul>\n") if links else ""
    for notebook, nb in zip(map(Path, notebooks), read, strict=True):
        parameters = nb.metadata.get("papermill", {}).get("parameters", {})
        matrix = Path(parameters.get("tables_dir", "")).resolve() / "verdict_matrix.csv"
        # the report's: the calibration and the panel-matched studies write into the same tables folder
        if notebook.stem != "05_report" or "tables_dir" not in parameters or not matrix.is_file():
            continue
        with open(matrix, newline="") as f:
            head, *body = list(csv.reader(f)) or [[]]
        cells = "\n".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in body)
        files = " ".join(f'<a href="{html.escape(os.path.relpath(matrix.with_suffix(e), index.parent))}">{e[1:]}</a>'
                         for e in (".md", ".csv") if matrix.with_suffix(e).is_file())
        grid = Path(parameters.get("runs_dir", "?")).resolve()
        grid = grid.relative_to(Path.cwd().resolve()) if grid.is_relative_to(Path.cwd().resolve()) else grid
        out += (f"<h2>Verdict matrix</h2>\n<p>The grid in <code>{html.escape(str(grid))}</code>, as 05_report "
                f"tabulated it ({files}): the paper's rules beside the calibrated ones.</p>\n"
                "<div style='overflow-x:auto;font-size:0.85em'><table style='white-space:nowrap'><tr>"  # wide: scrolls
                + "".join(f"<th>{html.escape(h)}</th>" for h in head) + f"</tr>\n{cells}\n</table></div>\n")
    return out


def html_view(index: Path, notebooks: list[Path], jobs: int = 1) -> list[Path]:
    """Write each notebook as HTML under ``index``'s folder (mirroring its path; each page links back to the
    index) and the index page: the notebooks in pipeline order (:data:`STEPS`) by domain and seed, and links to
    the tables and figures they wrote. Pages are converted in ``jobs`` processes when more than one. Returns the pages
    written or refreshed."""
    import nbformat

    index = Path(index)
    rows, due, read = [], [], []
    for notebook in map(Path, notebooks):
        try:  # pages mirror the notebooks' paths below the working directory (else their absolute path)
            relative = notebook.resolve().relative_to(Path.cwd().resolve())
        except ValueError:
            relative = Path(*notebook.resolve().parts[1:])
        page = index.parent / relative.with_suffix(".html")
        nb = nbformat.read(notebook, as_version=4)
        read.append(nb)
        domain, seed = _where(notebook)
        if not page.is_file() or page.stat().st_mtime < notebook.stat().st_mtime:  # titled by step, domain, seed
            due.append((nb, " · ".join(filter(None, (notebook.stem, domain, seed))), index, page))
        seconds = nb.metadata.get("papermill", {}).get("duration")
        rows.append((domain, seed, notebook.stem, page.relative_to(index.parent).as_posix(), seconds, str(relative)))
    if jobs > 1 and len(due) > 1:  # spawned workers (started alike on every platform), an exporter each
        with ProcessPoolExecutor(min(jobs, len(due)), multiprocessing.get_context("spawn"),
                                 initializer=without_iri_grammar) as pool:
            # pages in chunks of about a quarter of a worker's share: few round trips, and an even finish
            written = list(pool.map(_write_page, *zip(*due, strict=True), chunksize=max(1, len(due) // (4 * jobs))))
    else:
        written = [_write_page(*page) for page in due]
    first = {d: min(_step(r[2]) for r in rows if r[0] == d) for d in {r[0] for r in rows}}  # a domain's first step
    rows.sort(key=lambda r: (first[r[0]], r[0], _step(r[2]), r[1]))
    sections = []
    for domain in dict.fromkeys(r[0] for r in rows):
        items = "\n".join(
            f'<tr><td>{html.escape(seed)}</td><td><a href="{html.escape(link)}">{html.escape(step)}</a></td>'
            f'<td>{"" if seconds is None else f"{seconds:.0f} s"}</td><td><code>{html.escape(source)}</code></td></tr>'
            for d, seed, step, link, seconds, source in rows if d == domain)
        sections.append(f"<h2>{html.escape(domain)}</h2>\n<table><tr><th>seed</th><th>notebook</th><th>run time</th>"
                        f"<th>executed copy</th></tr>\n{items}\n</table>")
    _write_html(index,
                f"<!doctype html><html><head><meta charset='utf-8'><title>Executed notebooks</title>"
                f"<style>{INDEX_STYLE}</style></head><body><h1>Executed notebooks</h1>"
                f"{_audit_reports(index, notebooks, read)}<p>{len(rows)} notebooks, "
                f"grouped by domain, in pipeline order.</p>\n{_outputs(index, read)}" + "\n".join(sections)
                + "\n</body></html>\n")
    return written


def without_iri_grammar() -> None:
    """nbformat imports jsonschema, which imports rfc3987_syntax when it is installed (JupyterLab's dependencies bring
    it) and builds its IRI grammar at import: about 2 s of every notebook job. nbformat validates notebooks without a
    format checker, so nothing here uses it; this process (and its page workers) do without it (the kernels never
    import it)."""
    sys.modules.setdefault("rfc3987_syntax", None)
