"""Running the notebooks: the project root, a domain's params file, headless execution and an HTML view.

    python -m acgate.notebook run notebooks/03_train.py runs/synthetic_linear/seed00/03_train.ipynb \\
        domain=synthetic_linear seed=0 'methods=[acgate, tft]'
    python -m acgate.notebook run notebooks/03_train.py 'runs/synthetic_linear/seed{seed:02d}/03_train.ipynb' \\
        domain=synthetic_linear --seeds 0 1 2 3
    python -m acgate.notebook html runs/html/index.html runs/*/seed*/03_train.ipynb ... --jobs 2

``run`` turns the percent-format notebook into an ``.ipynb`` with Jupytext and executes it with Papermill, one
``key=value`` per notebook parameter (values are parsed as YAML). This is what every rule of the workflow
(``workflow/Snakefile``) runs. The executed copy appears at the output path only when every cell ran; the
notebook's output streams into ``<output>.log`` while it runs (``tail -f`` it to follow a long step), its progress
lines (``[<method> seed <n>] ...``: a method's start and end; the calibration's replicates), its ``WARNING:`` and
``PROBLEM:`` lines and, every
:data:`BAR_EVERY` seconds, the state of a training progress bar also to the terminal, and a failed run leaves its
partly executed copy beside it as ``.<name>.partial.ipynb`` for inspection.
With ``--seeds``, the notebook runs once per seed, each into its own executed copy and log, in one kernel whose
namespace is cleared between runs (:func:`execute_notebooks`): the workflow's training and DGP jobs take several
seeds each, so that a kernel's start and imports are not paid per seed.

``html`` converts executed notebooks to HTML (nbconvert) beside an index page that lists them by domain and
seed in pipeline order with their run time, and links to the tables and figures they wrote, so a reader can browse
what ran without starting Jupyter. A page newer than its notebook is kept; ``--jobs N`` converts pages in N processes.
"""

from __future__ import annotations

import argparse
import csv
import functools
import html
import logging
import multiprocessing
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from acgate.config import Params, load_params
from acgate.layout import project_root
from acgate.runs import atomic_write

if TYPE_CHECKING:
    import nbformat

# Jupytext, nbformat, Papermill and nbconvert are imported where they are used: every notebook imports this module
# (for resolve), and they bring jsonschema, whose optional IRI checker takes seconds to import (see main).

# each notebook process does its numerical work on one thread, so N parallel jobs use N cores
SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def resolve(domain: str, params_file: str = "", profile_file: str = "") -> tuple[Params, Path]:
    """Load ``params/<domain>.yaml`` (or ``params_file``) with an optional overlay; paths relative to the root."""
    root = project_root()
    path = root / (params_file or f"params/{domain}.yaml")
    params = load_params(path, root / profile_file if profile_file else None)
    if params.domain != domain:
        raise ValueError(f"{path} is for domain '{params.domain}', but the notebook was asked for '{domain}'")
    return params, root


# progress lines: training's "[acgate seed 3] epoch 25/200 ...", the calibrations' "[calibration 4/19] ..." and
# "[panel-matched 4/19] ..."; and what a user must not miss: "WARNING: ..." and "PROBLEM: ..."
PROGRESS = re.compile(r"^\s*(\[(\w+ seed \d+|(calibration|panel-matched) \d+/\d+)\]|WARNING:|PROBLEM:)")
BAR = re.compile(r"^\s*\w+ seed \d+:\s+\d+%\|")  # its progress bar: "acgate seed 3:  45%|####5  | 90/200 [...]"
BAR_EVERY = 5.0  # seconds between two echoes of a progress bar


class _Progress(logging.Handler):
    """Echoes the progress lines of a notebook's output to the terminal, prefixed with where the notebook runs, and
    the state of its progress bar every :data:`BAR_EVERY` seconds."""

    def __init__(self, terminal: int, where: str):
        super().__init__()
        self.stream, self.where = os.fdopen(os.dup(terminal), "w", buffering=1), where
        self.last_bar = time.monotonic()

    def emit(self, record: logging.LogRecord) -> None:
        for line in re.split(r"[\r\n]", record.getMessage()):
            bar_due = BAR.match(line) and time.monotonic() - self.last_bar >= BAR_EVERY
            if bar_due:
                self.last_bar = time.monotonic()
            if PROGRESS.match(line) or bar_due:
                self.stream.write(f"{self.where}: {line.strip()}\n")

    def close(self) -> None:
        self.stream.close()
        super().close()


@contextmanager
def _kernel_process(log: Path):
    """While the block runs, a kernel started from this process inherits ``SINGLE_THREAD`` in its environment and
    writes its own standard output and error (start-up messages, anything below Python) into ``log``; both are
    restored afterwards. Yields the terminal's standard error (a duplicate descriptor, valid inside the block)."""
    saved_env = {key: os.environ.get(key) for key in SINGLE_THREAD}
    os.environ.update(SINGLE_THREAD)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = [os.dup(1), os.dup(2)]
    with open(log, "a") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
    try:
        yield saved_fds[1]
    finally:
        for fd, saved in zip((1, 2), saved_fds, strict=True):
            os.dup2(saved, fd)
            os.close(saved)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# Run in the kernel between two notebooks that share it (silently: no output, no execution count): closes the figures,
# clears the namespace (%reset -f), makes warnings shown once per place show again, and numbers the next cells from 1
RESET = """\
import sys as _sys
if "matplotlib.pyplot" in _sys.modules:
    _sys.modules["matplotlib.pyplot"].close("all")
import warnings as _warnings
with _warnings.catch_warnings():  # entering and leaving it makes every module's record of shown warnings stale
    pass
get_ipython().run_line_magic("reset", "-f")
get_ipython().execution_count = 1
"""


def _start_kernel(kernel_name: str, cwd: Path, sockets: Path):
    """A Jupyter kernel for several notebooks in turn, started as nbclient starts one (IPython history in memory);
    the manager keeps the clients Papermill opens on it, so that they can be closed (:func:`_close_clients`).

    On POSIX systems the kernel talks to this process over Unix sockets in ``sockets`` (an empty folder of the
    caller's), not over TCP: Jupyter picks a kernel's TCP ports as free, releases them and has the kernel bind
    them moments later, and when many kernels start at once (the workflow's jobs on 16 cores) another process can
    take one in between; the kernel then dies at its start ("Kernel died before replying to kernel_info")."""
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync

    class Kernel(AsyncKernelManager):
        def client(self, **kwargs):
            client = super().client(**kwargs)
            self.clients.append(client)
            return client

    transport = {"transport": "ipc", "connection_file": str(sockets / "kernel.json")} if os.name == "posix" else {}
    kernel = Kernel(kernel_name=kernel_name, **transport)
    kernel.clients = []
    run_sync(kernel.start_kernel)(cwd=str(cwd), extra_arguments=["--HistoryManager.hist_file=:memory:"])
    return kernel


def _close_clients(kernel) -> None:
    while kernel.clients:
        kernel.clients.pop().stop_channels()


def _reset(kernel, before: Path, kernel_log: Path) -> None:
    """Clear what a notebook left in the kernel (:data:`RESET`) before the next one (``before``) runs."""
    from jupyter_core.utils import run_sync

    client = kernel.client()
    client.start_channels()
    try:
        reply = run_sync(client.execute_interactive)(RESET, silent=True, store_history=False, timeout=60)
    except TimeoutError:
        reply = {"content": {"status": "error", "evalue": "no reply within 60 s"}}
    finally:
        _close_clients(kernel)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"clearing the kernel before {before} failed: {reply['content'].get('evalue')}\n"
                           f"  the kernel's own output: {kernel_log}")


def execute_notebook(notebook: Path, output: Path, parameters: dict, cwd: Path | None = None) -> float:
    """Convert a percent-format notebook with Jupytext and execute it with Papermill into ``output`` (working
    directory ``cwd``, default the notebook's folder); returns the wall seconds. The executed copy appears only
    when the run succeeded; the log is kept either way."""
    return execute_notebooks(notebook, [(output, parameters)], cwd)[0]


def execute_notebooks(notebook: Path, runs: list[tuple[Path, dict]], cwd: Path | None = None) -> list[float]:
    """Execute ``notebook`` once per ``(output, parameters)`` of ``runs``, in turn, as :func:`execute_notebook` does,
    in one kernel: a kernel's start and its imports are paid once, not per run. Between two runs the kernel's
    namespace is cleared (:data:`RESET`), so each notebook sees only what it defines, as in a fresh kernel; the
    tests check that a run's artifacts and outputs are those of a fresh kernel. Returns
    each run's wall seconds. A failure stops the runs after it (each completed one keeps its executed copy). The
    kernel's own standard output and error (start-up messages, anything below Python) go to the first run's log.

    The kernel is stopped at once when the last cell has run: everything a notebook writes is on disk by then,
    and a graceful stop would wait seconds for the interpreter of a process that has imported PyTorch to wind
    down."""
    import jupytext
    import papermill
    from jupyter_core.utils import run_sync

    notebook = Path(notebook)
    runs = [(Path(output), parameters) for output, parameters in runs]
    for output, _ in runs:
        output.parent.mkdir(parents=True, exist_ok=True)
    first = runs[0][0]
    source = first.with_name(f".{first.stem}.input.ipynb")
    kernel_log = first.with_suffix(".log")  # the first run's log also takes the kernel's own output
    document = jupytext.read(notebook)
    jupytext.write(document, source)
    cwd = Path(cwd or notebook.parent)
    logger = logging.getLogger("papermill")
    level = logger.level
    logger.setLevel(logging.INFO)
    seconds = []
    try:
        kernel_log.write_text("")
        with _kernel_process(kernel_log) as terminal, tempfile.TemporaryDirectory(prefix="acgate-kernel-") as sockets:
            kernel = _start_kernel(document.metadata.get("kernelspec", {}).get("name", "python3"), cwd, Path(sockets))
            try:
                for i, (output, parameters) in enumerate(runs):
                    if i:
                        _reset(kernel, output, kernel_log)
                    # (the first log is emptied before the kernel starts, which writes into it)
                    seconds.append(_execute(papermill, kernel, notebook, source, output, parameters, cwd, terminal,
                                             kernel_log))
            finally:
                _close_clients(kernel)
                run_sync(kernel.shutdown_kernel)(now=True)
    finally:
        logger.setLevel(level)
        source.unlink(missing_ok=True)
    return seconds


def _execute(papermill, kernel, notebook: Path, source: Path, output: Path, parameters: dict, cwd: Path,
             terminal: int, kernel_log: Path) -> float:
    """One run of :func:`execute_notebooks` (``notebook`` converted to ``source``) on a started kernel: its log
    (emptied first unless it is ``kernel_log``, which the kernel's own output goes to), its progress lines to
    ``terminal``, the partly executed copy kept on failure."""
    partial = output.with_name(f".{output.stem}.partial.ipynb")
    partial.unlink(missing_ok=True)  # from an earlier failed or killed run
    log = output.with_suffix(".log")
    if log != kernel_log:
        log.write_text("")
    logger = logging.getLogger("papermill")
    handler = logging.FileHandler(log)
    handler.setFormatter(logging.Formatter("%(message)s"))
    progress = _Progress(terminal, "/".join(output.resolve().parts[-3:-1]))
    logger.addHandler(handler)
    logger.addHandler(progress)
    start = time.perf_counter()
    try:
        papermill.execute_notebook(source, partial, parameters=parameters, cwd=str(cwd), log_output=True,
                                   progress_bar=False, km=kernel)
    except Exception as err:
        with open(log, "a") as sink:  # the failing cell's traceback, as Papermill reports it
            sink.write(f"\n{type(err).__name__}: {err}\n")
        cause = f"{err.ename}: {err.evalue}" if hasattr(err, "ename") else f"{type(err).__name__}: {err}"
        elsewhere = "" if log == kernel_log else f"\n  the kernel's own output (crashes below Python): {kernel_log}"
        raise RuntimeError(f"{notebook.name} failed: {cause}\n  parameters: {parameters}\n  log: {log}\n"
                           f"  partly executed notebook: {partial}{elsewhere}") from err
    finally:
        _close_clients(kernel)
        for attached in (handler, progress):
            logger.removeHandler(attached)
            attached.close()
    os.replace(partial, output)
    return time.perf_counter() - start


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


def _table_page(markdown: Path, index: Path) -> Path:
    """A Markdown table rendered as an HTML page beside the index (``tables/<name>.html``), with a link back."""
    import mistune

    page = index.parent / "tables" / markdown.with_suffix(".html").name
    back = html.escape(os.path.relpath(index, page.parent))
    _write_html(page, f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(markdown.stem)}</title>"
                      f"<style>{INDEX_STYLE}</style></head><body><nav><a href=\"{back}\">&larr; index</a></nav>"
                      f"{mistune.html(markdown.read_text())}</body></html>\n")
    return page


def _audit_reports(index: Path, notebooks: list[Path], read: list[nbformat.NotebookNode]) -> str:
    """The top of the index: each domain's audit report (``report.html`` beside its executed ``04_audit``), and the
    verdict matrix of the grid that 05_report tabulated (its ``tables_dir``), naming that grid's runs folder."""
    links = [f'<li><a href="{html.escape(os.path.relpath(page, index.parent))}">{html.escape(_where(notebook)[0])}'
             "</a></li>" for notebook in map(Path, notebooks)
             if notebook.stem == "04_audit" and (page := notebook.parent / "report.html").is_file()]
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
                                 initializer=_without_iri_grammar) as pool:
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


def _parameter(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    try:
        return key, yaml.safe_load(value) if value else ""
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", err)
        raise argparse.ArgumentTypeError(f"parameter {key}: {value!r} is not valid YAML ({problem}); a list is "
                                         "written like 'methods=[acgate, tft]'") from None


def _without_iri_grammar() -> None:
    """nbformat imports jsonschema, which imports rfc3987_syntax when it is installed (JupyterLab's dependencies bring
    it) and builds its IRI grammar at import: about 2 s of every notebook job. nbformat validates notebooks without a
    format checker, so nothing here uses it; this process (and its page workers) do without it (the kernels never
    import it)."""
    sys.modules.setdefault("rfc3987_syntax", None)


def main(argv: list[str] | None = None) -> None:
    _without_iri_grammar()
    parser = argparse.ArgumentParser(prog="python -m acgate.notebook", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute one notebook with Papermill")
    run.add_argument("notebook", type=Path, help="percent-format notebook, e.g. notebooks/03_train.py")
    run.add_argument("output", help="where the executed .ipynb goes; with --seeds, a pattern with {seed} "
                     "(e.g. runs/synthetic_linear/seed{seed:02d}/03_train.ipynb)")
    run.add_argument("parameters", nargs="*", type=_parameter, help="notebook parameters as key=value (YAML)")
    run.add_argument("--seeds", nargs="+", type=int, metavar="SEED",
                     help="run the notebook once per seed (parameter seed=SEED), in turn, in one kernel")
    view = sub.add_parser("html", help="HTML pages of executed notebooks and an index page")
    view.add_argument("index", type=Path, help="the index page, e.g. runs/html/index.html")
    view.add_argument("notebooks", nargs="+", type=Path, help="executed .ipynb files")
    view.add_argument("--jobs", type=int, default=1, help="processes converting pages (default 1)")
    args = parser.parse_args(argv)
    if args.command == "html":
        try:
            written = html_view(args.index, args.notebooks, args.jobs)
        except OSError as err:  # to the terminal: the workflow's log of this step may be what cannot be written
            raise SystemExit(f"the HTML view {args.index} failed: {err}\n  the executed notebooks are complete: fix "
                             "what it names (a full disk: make room) and rerun, which makes only the view "
                             "again") from None
        print(f"{args.index}: {len(args.notebooks)} notebooks, {len(written)} pages written", flush=True)
        return
    parameters = dict(args.parameters)
    if args.seeds is None:
        runs = [(Path(args.output), parameters)]
    elif "{seed" not in args.output or "seed" in parameters:
        parser.error(f"with --seeds, the output must be a pattern with {{seed}} (got {args.output!r}) and seed=... "
                     "must not be given as a parameter")
    else:
        runs = [(Path(args.output.format(seed=seed)), {**parameters, "seed": seed}) for seed in args.seeds]
    try:
        seconds = execute_notebooks(args.notebook, runs)
    except RuntimeError as err:
        raise SystemExit(str(err)) from None
    for (output, _), took in zip(runs, seconds, strict=False):
        print(f"{output} ({took:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
