"""Writing run artifacts safely (atomic writes, leftovers of killed writes, one writer per run folder), reading them
while nobody writes them, which finished run is current, and provenance: the code version, package versions and
machine every manifest records. Where artifacts live is ``acgate.layout``; what each one holds is docs/audit.md,
"Run artifacts"."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from acgate.layout import RUN_FILES

PACKAGES = ("acgate", "torch", "numpy", "pandas", "scipy", "papermill", "jupytext", "matplotlib", "seaborn")


def atomic_write(path: Path, write: Callable[[IO], Any], binary: bool = False) -> None:
    """Call ``write(file)`` on a temporary file beside ``path``, then rename it into place, with the permissions an
    ordinary new file gets (0666 less the umask; a temporary file starts private)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_interrupted_writes(directory: Path) -> None:
    """Delete the temporary files that :func:`atomic_write` leaves in ``directory`` when the process is killed
    (SIGKILL, power loss) between creating and renaming one."""
    for tmp in Path(directory).glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


class RunFolderBusy(RuntimeError):
    """Another process is writing a run folder, or changed it while it was read; the message names the folder, the
    writer where it is known, and says to run again once that process has finished."""


# a reader holds a run folder's lock for the moment its check takes: a writer that meets one waits this long first
READER_GRACE_SECONDS = 2.0


def lock_file(directory: Path) -> Path:
    """The lock of run folder ``directory``: beside it (``seed<NN>/.<method>.lock``), so that taking it creates no
    run folder, and a folder holding only a lock does not look like an unfinished run. It holds the pid of the
    last process that took it (read only while the lock is held, so never a stale one)."""
    directory = Path(directory)
    return directory.parent / f".{directory.name}.lock"


@contextmanager
def writing(directory: Path) -> Iterator[None]:
    """Hold run folder ``directory``'s lock while the body writes it, so that two processes (the workflow's training
    job and a notebook retraining the same seed) never write one folder at once: the second stops with
    :class:`RunFolderBusy` naming the folder and the first one's pid. The lock is an ``flock``, which the system
    releases when its holder ends, however it ends: a killed run leaves nothing to clean up."""
    path = lock_file(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as lock:
        deadline = time.monotonic() + READER_GRACE_SECONDS
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RunFolderBusy(
                        f"{directory} is being written by another process ({_holder(lock)}): a notebook retraining "
                        "this run while the workflow trains it, or the other way round; two processes must not write "
                        "one run folder at once. Let that process finish (or stop it), then run this again") from None
                time.sleep(0.05)
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} on {platform.node()}\n")
        lock.flush()
        yield


def writer(directory: Path) -> str | None:
    """Who is writing run folder ``directory`` now ("pid N on host"), or None when nobody is. Takes nothing a reader
    could leave behind: the lock is only tested (shared, for an instant), never created."""
    try:
        lock = open(lock_file(directory))
    except OSError:  # no lock file: nobody has written this folder under a lock
        return None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(lock)
        return None  # closing the file releases the shared lock


def _holder(lock: IO) -> str:
    lock.seek(0)
    return lock.read().strip() or "pid unknown"


@contextmanager
def reading(directory: Path) -> Iterator[None]:
    """Read run folder ``directory`` in the body, with a clear error instead of a half-read run: a folder another
    process is writing (its lock is held) is not read at all, and a file of it that disappears while the body runs
    (listed, then gone: a retraining deletes ``metrics.json`` first) stops the read; both raise
    :class:`RunFolderBusy` naming the folder and saying to run again when the writer has finished."""
    directory = Path(directory)
    holder = writer(directory)
    if holder:
        raise RunFolderBusy(f"{directory} is being written by another process ({holder}), e.g. a notebook "
                            "retraining this run while the workflow runs; run this again when it has finished")
    try:
        yield
    except FileNotFoundError as err:
        gone, holder = Path(err.filename).name if err.filename else "a file", writer(directory)
        why = (f"while another process ({holder}) writes this run folder" if holder else
               "since the run folder was listed: another process probably rewrote or removed it")
        raise RunFolderBusy(f"{directory}: {gone} has disappeared {why}, e.g. a notebook retraining this run while the "
                            "workflow runs; run this again when it has finished") from err


def _umask() -> int:
    mask = os.umask(0)  # reading the umask means setting it: put it straight back
    os.umask(mask)
    return mask


# a text cell a spreadsheet would take for a formula (OWASP's list: =, +, -, @, tab, carriage return)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(text: str) -> str:
    """``text`` as a CSV cell a spreadsheet opens as text: with a leading ' where it starts like a formula (a user's
    id such as =HYPERLINK(...) would otherwise run as one), or with a ' already (so that the guard can be told from
    the text); :func:`spreadsheet_text` takes it off again."""
    return "'" + text if text.startswith((*FORMULA_STARTS, "'")) else text


def spreadsheet_text(text: str) -> str:
    """The text :func:`spreadsheet_safe` was given."""
    return text[1:] if text.startswith("'") else text


def write_csv(path: Path, frame: Any, **to_csv: Any) -> None:
    """``frame`` (a pandas DataFrame) as a CSV at ``path``, written atomically, every text cell, column name and
    index label made :func:`spreadsheet_safe`: the project's CSVs carry the user's ids and column names, and a
    spreadsheet may open any of them. ``acgate.data.sources.read_csv_ids`` reads them back as they were."""
    def safe(value: Any) -> Any:
        return spreadsheet_safe(value) if isinstance(value, str) else value

    guarded = frame.rename(columns=safe, index=safe)
    for column in guarded.select_dtypes(exclude="number").columns:
        guarded[column] = guarded[column].map(safe)
    atomic_write(path, lambda f: guarded.to_csv(f, **to_csv))


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, lambda f: json.dump(obj, f, indent=2, sort_keys=True, default=_jsonable))


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")


def current_metrics(directory: Path, params_hash: str, panel_digest: str) -> dict | None:
    """metrics.json of the finished run in ``directory`` when it has every artifact, was trained under
    ``params_hash`` (the same data, split, model and training settings) on a panel with ``panel_digest``, and is
    from the training that wrote the other files (:func:`mixed_training`), else None."""
    directory = Path(directory)
    if not all((directory / name).is_file() for name in RUN_FILES):
        return None
    try:
        metrics = json.loads((directory / "metrics.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):  # a damaged file: the run is not finished, so it is retrained
        return None
    current = metrics.get("params_hash") == params_hash and metrics.get("panel_digest") == panel_digest
    return metrics if current and mixed_training(directory, metrics) is None else None


def mixed_training(directory: Path, metrics: dict) -> str | None:
    """Why ``metrics.json`` (read as ``metrics``) and ``manifest.json`` in ``directory`` are not from one training,
    or None when they are: both record the training's ``run_id`` (runs written before it have it in neither). They
    differ when a workflow job failed after retraining the run: Snakemake then puts back the ``metrics.json`` it had
    backed up before the job, beside the new predictions, lags and manifest."""
    try:
        recorded = json.loads((Path(directory) / "manifest.json").read_text()).get("run_id")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return "manifest.json is not a valid JSON object (truncated?)"
    if recorded != metrics.get("run_id"):
        return (f"metrics.json (run_id {metrics.get('run_id')}) is not from the training that wrote the other files "
                f"(manifest.json: run_id {recorded}); a failed job restored an older metrics.json")
    return None


SOURCE_PATHS = ("lib", "notebooks", "params", "pyproject.toml")  # what makes a run's code differ from a commit


def git_sha(start: Path | None = None) -> str:
    """HEAD of the checkout holding ``start`` (default: this package), '+dirty' when its code, notebooks or
    params differ from that commit (changed or new files; regenerated outputs such as tables/ do not count).
    One ``git status`` call gives both (every run's manifest asks: the audit calibration's runs alone are some
    1650 a grid)."""
    where = Path(start or __file__).resolve().parent
    try:
        # no optional locks: the index is not refreshed on disk, so concurrent runs and the user's own git commands
        # do not meet on index.lock; no ahead/behind count against the upstream branch (not needed)
        status = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain=v2", "--branch",
                                 "--no-ahead-behind", "--",
                                 *(f":(top){path}" for path in SOURCE_PATHS)],
                                cwd=where, capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    sha = next((line.split()[2] for line in status if line.startswith("# branch.oid ")), "(initial)")
    if sha == "(initial)":  # no commit yet
        return "unknown"
    return sha + ("+dirty" if any(not line.startswith("#") for line in status) else "")


@functools.cache
def code_digest(start: Path | None = None) -> str:
    """Short sha256 of the code a run executes: the sources (.py and .yaml files) of the package holding ``start``
    (default: this package) and, in a checkout, the notebooks beside it; read once per process (its code is what it
    imported). Unlike :func:`git_sha`, whose '+dirty' stays the same from one edit to the next, it changes with
    every edit."""
    package = Path(start or __file__).resolve().parent
    root = package.parents[1]
    files = sorted([*package.rglob("*.py"), *package.rglob("*.yaml"), *(root / "notebooks").glob("*.py")])
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def code_versions(manifests: list[dict]) -> str | None:
    """None when every manifest in ``manifests`` records one code digest, else a sentence naming each digest, its
    git SHA and its number of runs: runs made by different code are not one experiment."""
    groups: dict[str, list[dict]] = {}
    for record in manifests:
        groups.setdefault(record.get("code_digest", "not recorded"), []).append(record)
    if len(groups) < 2:
        return None
    parts = [f"{digest} ({len(records)} runs, git {', '.join(sorted({r.get('git_sha', '?') for r in records}))})"
             for digest, records in sorted(groups.items(), key=lambda item: -len(item[1]))]
    return (f"these runs were made by {len(groups)} different versions of the code (code digest: "
            f"{'; '.join(parts)}); to compare like with like, retrain them under one version (retrain=true)")


def package_versions() -> dict[str, str]:
    """The installed versions of :data:`PACKAGES`, read once per process (its code is what it imported)."""
    return dict(_installed_versions())


@functools.cache
def _installed_versions() -> tuple[tuple[str, str], ...]:
    found = []
    for name in PACKAGES:
        try:
            found.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            found.append((name, "not installed"))
    return tuple(found)


def machine() -> dict:
    """The machine a run used: CPU model, cores, memory, host name and platform, what decides its float32 kernels
    (``kernels``: see :func:`cpu_kernels`), and its load average over the last 1, 5 and 15 minutes (None where the
    system gives none): a time measured on a loaded machine is not an idle one's."""
    cpu, memory = platform.processor() or platform.machine(), None
    try:
        info = Path("/proc/cpuinfo").read_text()
        cpu = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name"))
        kib = next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal"))
        memory = round(int(kib) / 2**20, 1)
    except (OSError, StopIteration):
        pass
    try:
        load = [round(value, 2) for value in os.getloadavg()]
    except OSError:
        load = None
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": memory, "host": platform.node(),
            "platform": platform.platform(), "kernels": cpu_kernels(), "load_average": load}


# the variables with which a user can lower the instruction set PyTorch, oneDNN and MKL dispatch to
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
                    "MKL_CBWR")


def cpu_kernels() -> dict:
    """What decides which float32 CPU kernels run, and so the last bits of a result: the CPU vendor, its vector
    instruction sets (the ``avx*``, ``fma`` and ``amx*`` flags), the level PyTorch dispatches to, and any of
    ``KERNEL_VARIABLES`` that is set. The CPU's name does not: one model name covers AVX2-only and AVX-512 machines."""
    import torch  # here only: data preparation uses this module without loading PyTorch

    vendor, flags = platform.machine(), []
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
        vendor = next(line.split(":", 1)[1].strip() for line in info if line.startswith("vendor_id"))
        flags = next(line.split(":", 1)[1].split() for line in info if line.startswith("flags"))
    except (OSError, StopIteration):
        pass
    return {"vendor": vendor, "vector_isa": sorted(f for f in flags if f.startswith(("avx", "fma", "amx"))),
            "torch_dispatch": torch.backends.cpu.get_cpu_capability(),
            "variables": {name: os.environ[name] for name in KERNEL_VARIABLES if name in os.environ}}


def manifest(params: dict, seed: int, device: str, **extra: Any) -> dict:
    """Provenance of one run: parameters, seed, code version, packages, machine and device."""
    return {
        "params": params,
        "seed": seed,
        "git_sha": git_sha(),
        "code_digest": code_digest(),
        "packages": package_versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.node(),
        "device": device,
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        **extra,
    }
