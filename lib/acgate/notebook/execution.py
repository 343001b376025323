"""Headless execution of the notebooks (``python -m acgate.notebook run``, see
:mod:`acgate.notebook`): Jupytext turns the percent-format notebook into an ``.ipynb`` and Papermill executes it in
a kernel of its own, one ``key=value`` per notebook parameter. The executed copy appears at the output path only
when every cell ran; the notebook's output streams into ``<output>.log`` while it runs, its progress lines
(``[<method> seed <n>] ...``; the calibrations' replicates), its ``WARNING:`` and ``PROBLEM:`` lines and, every
:data:`BAR_EVERY` seconds, the state of a training progress bar also to the terminal, and after :data:`HEARTBEAT`
seconds without any of those, the cell it is running (so no step is silent for long); a failed run leaves its partly
executed copy beside it as ``.<name>.partial.ipynb``. Several seeds run in one kernel whose namespace is cleared
between runs (:func:`execute_notebooks`), so that a kernel's start and imports are not paid per seed.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from acgate.layout import shown

# Jupytext, nbformat and Papermill are imported where they are used: they bring jsonschema, whose optional IRI
# checker takes seconds to import (html_view.without_iri_grammar), and a notebook's kernel needs none of them.

# each notebook process does its numerical work on one thread, so N parallel jobs use N cores
SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}

# progress lines: training's "[acgate seed 3] epoch 25/200 ...", the calibrations' "[calibration 4/19] ...",
# "[panel-matched 4/19] ..." and "[panel-matched stacked 2/12] ..."; and what a user must not miss: "WARNING: ..." and
# "PROBLEM: ..."
PROGRESS = re.compile(r"^\s*(\[(\w+ seed \d+|(calibration|panel-matched( stacked)?) \d+/\d+)\]|WARNING:|PROBLEM:)")
BAR = re.compile(r"^\s*\w+ seed \d+:\s+\d+%\|")  # its progress bar: "acgate seed 3:  45%|####5  | 90/200 [...]"
BAR_EVERY = 5.0  # seconds between two echoes of a progress bar
CELL = re.compile(r"^Executing Cell (\d+)")  # Papermill's line as a cell starts
HEARTBEAT = 15.0  # seconds without a line on the terminal after which a running notebook says which cell it is in


def where(output: Path) -> str:
    """How a notebook's progress lines name it: the last two folders of its output ("economics/seed03",
    "economics/panel_matched"), never the file system's root."""
    return "/".join(output.resolve().parent.parts[1:][-2:])


class _Progress(logging.Handler):
    """Echoes the progress lines of a notebook's output to the terminal, prefixed with where the notebook runs, the
    state of its progress bar every :data:`BAR_EVERY` seconds, and, after :data:`HEARTBEAT` seconds without a line
    there, which of its ``cells`` it is running (an audit or a report computing for a minute said nothing before)."""

    def __init__(self, terminal: int, where: str, name: str, cells: int):
        super().__init__()
        self.stream = os.fdopen(os.dup(terminal), "w", buffering=1)
        self.where, self.name, self.cells = where, name, cells
        self.start = self.last_bar = self.last_line = time.monotonic()
        self.cell = 0
        self.writing, self.done = threading.Lock(), threading.Event()  # (logging.Handler has a self.lock of its own)
        self.beat = threading.Thread(target=self._beat, daemon=True)
        self.beat.start()

    def _write(self, line: str) -> None:
        with self.writing:
            self.stream.write(f"{self.where}: {line}\n")
            self.last_line = time.monotonic()

    def emit(self, record: logging.LogRecord) -> None:
        for line in re.split(r"[\r\n]", record.getMessage()):
            if started := CELL.match(line):
                self.cell = int(started[1])
            bar_due = BAR.match(line) and time.monotonic() - self.last_bar >= BAR_EVERY
            if bar_due:
                self.last_bar = time.monotonic()
            if PROGRESS.match(line) or bar_due:
                self._write(line.strip())

    def _beat(self) -> None:
        while not self.done.wait(min(1.0, HEARTBEAT)):
            now = time.monotonic()
            if now - self.last_line >= HEARTBEAT:
                self._write(f"{self.name}: running cell {self.cell} of {self.cells} ({now - self.start:.0f} s so far)")

    def close(self) -> None:
        self.done.set()
        self.beat.join()
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
    import nbformat

    # Papermill numbers every cell, and adds one for the parameters it injects
    cells = len(nbformat.read(source, as_version=4).cells) + bool(parameters)
    progress = _Progress(terminal, where(output), notebook.name, cells)
    logger.addHandler(handler)
    logger.addHandler(progress)
    start = time.perf_counter()
    try:
        papermill.execute_notebook(source, partial, parameters=parameters, cwd=str(cwd), log_output=True,
                                   progress_bar=False, km=kernel)
    except Exception as err:
        with open(log, "a") as sink:  # the failing cell's traceback, as Papermill reports it
            sink.write(f"\n{type(err).__name__}: {err}\n")
        name, value = getattr(err, "ename", type(err).__name__), getattr(err, "evalue", err)  # Papermill's, or Python's
        cause = f"{name}: {value}"
        elsewhere = "" if log == kernel_log else f"\n  the kernel's own output (crashes below Python): {kernel_log}"
        raise RuntimeError(f"{notebook.name} failed: {cause}\n  parameters: {parameters}\n  log: {log}\n"
                           f"  partly executed notebook: {partial}{elsewhere}") from err
    finally:
        _close_clients(kernel)
        for attached in (handler, progress):
            logger.removeHandler(attached)
            attached.close()
    _record_paths(partial, notebook, output)
    os.replace(partial, output)
    return time.perf_counter() - start


def _record_paths(executed: Path, notebook: Path, output: Path) -> None:
    """Papermill's record in the ``executed`` notebook names its temporary input and output files by their absolute
    paths; it gets the notebook's source and its final place instead, relative to the project root (an executed
    notebook, shared or rendered as a page, names no folder of the machine)."""
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    record = nb.metadata.get("papermill", {})
    record.update(input_path=shown(notebook), output_path=shown(output))
    nbformat.write(nb, executed)
