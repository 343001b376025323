"""Where everything lives on disk, the one place that spells it out:

    <root>/                                  the project root (params/ and pyproject.toml)
    <data>/processed/<domain>/               a real domain's panel (01_data_prep): PREPARED_FILES
    <data>/processed/<domain>/seed<NN>/      a synthetic domain's panel of one seed (02_synthetic_dgp): DRAWN_FILES
    <runs>/<domain>/seed<NN>/<method>/       one run (03_train): RUN_FILES, metrics.json last
    <runs>/<domain>/audit/                   a domain's audit (04_audit)
    <runs>/<domain>/panel_matched/           a data domain's panel-matched error rates (07_panel_matched)

``<data>`` is ``data`` and ``<runs>`` is ``runs`` for the paper's grid; notebooks and the workflow take them as
parameters, and with a profile they default to folders of the profile's own (:func:`grid_folders`). A run is
finished when its ``metrics.json`` exists: it is written last, so an interrupted run leaves none and is redone by
the next batch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

RUN_FILES = ("metrics.json", "lags.csv", "predictions.csv", "history.csv", "manifest.json")  # what every run writes
PANEL_DATA_FILES = ("panel.npz", "stratifiers.csv")  # a saved panel's data (Panel.save); panel.json has their sha256
PANEL_FILES = (*PANEL_DATA_FILES, "panel.json")  # what every saved panel holds
PREPARED_FILES = (*PANEL_FILES, "entities.csv", "manifest.json")  # a real domain's panel folder (prep.save)
DRAWN_FILES = (*PANEL_FILES, "dgp_settings.json")  # a synthetic seed's panel folder (dgp.load_or_simulate)
AUDIT_PAGE, AUDIT_MARKDOWN = "report.html", "report.md"  # a domain's audit report, in its audit folder
# beside a table measured with the paper's AC-GATE, the folder of the same table for AC-GATE without the gate's memory
# (model.gate_memory: false): tables/gate_memory_off/audit_calibration.*, tables/reach/gate_memory_off/
MEMORY_OFF = "gate_memory_off"
# the committed tables of the checkout this package runs from (the calibration and reach map an own panel's audit reads)
REPOSITORY_TABLES = Path(__file__).resolve().parents[2] / "tables"


def project_root(start: Path | None = None) -> Path:
    """The project root: ``$ACGATE_ROOT`` when set, else the nearest folder at or above ``start`` (default:
    the working directory) holding ``params/`` and ``pyproject.toml``, so notebooks run from the root or
    from ``notebooks/`` alike."""
    if os.environ.get("ACGATE_ROOT"):
        return Path(os.environ["ACGATE_ROOT"]).resolve()
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "params").is_dir() and (folder / "pyproject.toml").is_file():
            return folder
    raise FileNotFoundError(f"no project root (a folder with params/ and pyproject.toml) at or above {here}: run "
                            "from inside the project, or set ACGATE_ROOT to its folder (e.g. ACGATE_ROOT=/path/to/"
                            "acgate, for a notebook executed elsewhere)")


def shown(path: Path | str, base: Path | None = None) -> str:
    """``path`` as a page, a table or a notebook's output shows it: relative to the project root when it lies inside,
    else relative to the checkout this package runs from (its committed tables), else relative to ``base`` (e.g. the
    folder of an audit run outside any project) when inside that, else as given. What people share (a report page
    sent by e-mail, an executed notebook) then names no folder of the machine."""
    path = Path(path)
    try:
        bases = [project_root()]
    except FileNotFoundError:
        bases = []
    for folder in [*bases, REPOSITORY_TABLES.parent, *([Path(base).resolve()] if base is not None else [])]:
        try:
            return str(path.resolve().relative_to(folder))
        except ValueError:
            continue
    return str(path)


def grid_folders(profiles: list[str], runs_dir: str = "", data_dir: str = "", tables_dir: str = "",
                 figures_dir: str = "") -> dict[str, str]:
    """The folders of a grid, or of a notebook run by hand, relative to the project root unless given absolute. The
    paper's grid (no profile) uses runs/, data/, tables/ and figures/. With profiles (overlay files, e.g.
    params/smoke.yaml) the runs go to runs/<their names joined by +>/, and any runs folder other than runs/ keeps the
    panels, tables and figures inside it (<runs>/data, ...), so that a grid or notebook with a profile never redraws
    the paper's panels or retrains its runs. A folder given (non-empty) is kept as given, ``~`` expanded to the home
    folder."""
    names = [Path(profile).stem for profile in profiles if profile]
    runs = os.path.expanduser(runs_dir) or (f"runs/{'+'.join(names)}" if names else "runs")
    own = Path(runs) != Path("runs")
    given = {"data_dir": os.path.expanduser(data_dir), "tables_dir": os.path.expanduser(tables_dir),
             "figures_dir": os.path.expanduser(figures_dir)}
    return {"runs_dir": runs} | {key: value or (f"{runs}/{key[:-4]}" if own else key[:-4]) for key, value in
                                 given.items()}


def panel_dir(data_root: Path, domain: str, seed: int | None = None) -> Path:
    """The processed panel of a real domain (``seed`` None) or of one seed of a synthetic domain."""
    directory = Path(data_root) / "processed" / domain
    return directory if seed is None else directory / seed_folder(seed)


def seed_folder(seed: int) -> str:
    return f"seed{seed:02d}"


def seed_of(folder: Path) -> int:
    """The seed of a ``seed<NN>`` folder."""
    return int(Path(folder).name.removeprefix("seed"))


def method_dir(runs_root: Path, domain: str, seed: int, method: str) -> Path:
    return Path(runs_root) / domain / seed_folder(seed) / method


def audit_dir(runs_root: Path, domain: str) -> Path:
    return Path(runs_root) / domain / "audit"


def panel_matched_dir(runs_root: Path, domain: str) -> Path:
    return Path(runs_root) / domain / "panel_matched"


def run_folders(runs_root: Path, domain: str) -> Iterator[tuple[int, str, Path]]:
    """(seed, method, folder) of every run folder of ``domain``, finished or not, in seed and method order (folders
    not named like a seed and a method are not runs)."""
    for folder in sorted((Path(runs_root) / domain).glob("seed*/*/")):
        if re.fullmatch(r"seed\d+", folder.parent.name) and folder.name.isidentifier():
            yield seed_of(folder.parent), folder.name, folder


def is_finished(directory: Path) -> bool:
    return (Path(directory) / "metrics.json").is_file()
