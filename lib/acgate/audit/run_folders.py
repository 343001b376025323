"""What the audit reads: the finished, current run folders of a domain (each checked against the
params and the panel it was trained on, those left out listed with the reason), and the processed panels and entity
information beside them. :mod:`acgate.runs` writes run folders; this module reads them while nobody writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from acgate.data import sources
from acgate.data.panel import SPLITS, Panel
from acgate.layout import RUN_FILES, method_dir, panel_dir, run_folders
from acgate.runs import mixed_training, reading


@dataclass
class Run:
    seed: int
    method: str
    metrics: dict
    lags: pd.DataFrame
    test: pd.DataFrame  # the test rows of predictions.csv: entity, time, y, y_hat


@dataclass
class EntityInfo:
    stratifiers: pd.DataFrame  # index: entity
    proxies: pd.DataFrame  # index: entity

    @classmethod
    def from_panel(cls, panel: Panel) -> EntityInfo:
        return cls(panel.stratifiers, pd.DataFrame(panel.P, index=panel.entities, columns=panel.proxy_names))


class RunRejected(ValueError):
    """A run folder the audit cannot use; the message says why."""


def _read_csv(path: Path, columns: list[str]) -> pd.DataFrame:
    try:
        frame = sources.read_csv_ids(path, ["entity"], written=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise RunRejected(f"{path.name} is unreadable ({type(err).__name__}: {str(err).strip()[:120]})") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise RunRejected(f"{path.name} lacks column(s) {', '.join(missing)}")
    return frame


def read_run(directory: Path, seed: int, method: str, params_hash: str, panel: Panel, digest: str = "") -> Run:
    """The run in ``directory`` when it is current and complete, else :class:`RunRejected` saying why: every
    artifact present, ``metrics.json`` parseable, trained under ``params_hash`` on ``panel`` (its digest, or
    ``digest`` where the run was given another order of its proxies: :func:`acgate.data.prep.training_digest`) and from
    the same training as ``manifest.json`` (their run id), ``lags.csv`` with one row per entity of the panel, and
    ``predictions.csv`` with as many rows per split as ``metrics.json`` counted. A run folder that another process is
    writing, or that changes while it is read, stops the audit (:class:`acgate.runs.RunFolderBusy`): left out, it
    would quietly weaken the verdicts of a run that is about to exist."""
    with reading(directory):
        return _read_run(Path(directory), seed, method, params_hash, panel, digest or panel.digest())


def _damaged(directory: Path, what: str) -> RunRejected:
    """A run whose files are damaged: the workflow sees its metrics.json and would not redo it, so the reason says
    how to have it retrained."""
    return RunRejected(f"{what}; delete {directory / 'metrics.json'} and run the grid again, which retrains the run")


def _read_run(directory: Path, seed: int, method: str, params_hash: str, panel: Panel, digest: str) -> Run:
    if not directory.is_dir():
        raise RunRejected("not trained (no run folder)")
    missing = [f for f in RUN_FILES if not (directory / f).is_file()]
    if missing:
        raise (_damaged(directory, f"{', '.join(missing)} missing (a damaged run)") if "metrics.json" not in missing
               else RunRejected(f"{', '.join(missing)} missing (unfinished: the workflow trains it)"))
    try:
        metrics = json.loads((directory / "metrics.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _damaged(directory, "metrics.json is not valid JSON (truncated?)") from None
    if metrics.get("params_hash") != params_hash:
        raise RunRejected(f"stale: trained under params hash {metrics.get('params_hash')}, the current params "
                          f"give {params_hash} (the workflow retrains it)")
    if metrics.get("panel_digest") != digest:
        raise RunRejected(f"stale: trained on a panel with digest {metrics.get('panel_digest')}, the panel now has "
                          f"{digest} (its data, its proxies' assignment to entities or its preparation changed; the "
                          "workflow retrains it)")
    mixed = mixed_training(directory, metrics)
    if mixed:
        raise RunRejected(f"{mixed} (the workflow retrains it)")
    lags = _read_csv(directory / "lags.csv", ["entity", "kstar", "kstar_kind"])
    absent = sorted(set(panel.entities) - set(lags.entity))
    if absent or len(lags) != panel.n_entities or lags.entity.duplicated().any():
        raise _damaged(directory, f"lags.csv has {len(lags)} rows for the panel's {panel.n_entities} entities"
                       + (f" (lacks {len(absent)}, e.g. '{absent[0]}')" if absent else ""))
    predictions = _read_csv(directory / "predictions.csv", ["entity", "time", "split", "y", "y_hat"])
    counts = predictions.split.value_counts()
    expected = {split: metrics.get(split, {}).get("n") for split in SPLITS}
    short = [f"{split} {counts.get(split, 0)} of {n}" for split, n in expected.items() if counts.get(split, 0) != n]
    if short:
        raise _damaged(directory, f"predictions.csv rows differ from metrics.json's counts ({'; '.join(short)})")
    unknown = sorted(set(predictions.entity) - set(panel.entities))
    if unknown:
        raise RunRejected(f"predictions.csv has entities the panel lacks, e.g. '{unknown[0]}'")
    return Run(seed, method, metrics, lags,
               predictions.loc[predictions.split == "test", ["entity", "time", "y", "y_hat"]])


def load_runs(runs_root: Path, domain: str, params_hash: str, seeds: list[int], methods: list[str],
              panels: dict[int, Panel | None], digests: dict[int, str] | None = None) -> tuple[list[Run], pd.DataFrame]:
    """The current, complete runs of the ``seeds`` and ``methods`` asked for (each seed's runs checked against
    ``digests``, where given, else its panel's digest: :func:`read_run`), and a table (seed, method, reason) of
    every run asked for that is not, and of every run folder found that was not asked for."""
    domain_dir = Path(runs_root) / domain
    if not domain_dir.is_dir():
        # a notebook opened with its defaults reads runs/: the grids of `make quick` or a profile are folders in it
        grids = sorted(str(p.parent) for p in Path(runs_root).glob(f"*/{domain}") if any(p.glob("seed*")))
        fix = (f"its runs are in {', '.join(grids)}: set runs_dir to that folder (and data_dir to its data folder)"
               if grids else f"train it first (notebooks/03_train.py, or the workflow: make paper "
                             f"CONFIG='domains=[{domain}]')")
        raise FileNotFoundError(f"no runs for domain '{domain}': {domain_dir} does not exist; {fix}")
    runs, excluded = [], []
    for seed in seeds:
        for method in methods:
            try:
                if panels.get(seed) is None:
                    raise RunRejected(f"no panel of seed {seed:02d} under the data folder's processed/{domain}/ to "
                                      "check it against (run 01_data_prep or 02_synthetic_dgp)")
                runs.append(read_run(method_dir(runs_root, domain, seed, method), seed, method, params_hash,
                                     panels[seed], (digests or {}).get(seed, "")))
            except RunRejected as why:
                excluded.append({"seed": seed, "method": method, "reason": str(why)})
    for seed, method, _ in run_folders(runs_root, domain):
        if seed not in seeds:
            excluded.append({"seed": seed, "method": method,
                             "reason": f"seed {NOT_ASKED} (seeds {seeds[0]}..{seeds[-1]})"})
        elif method not in methods:
            excluded.append({"seed": seed, "method": method, "reason": f"method {NOT_ASKED}"})
    excluded = pd.DataFrame(excluded, columns=EXCLUDED_COLUMNS)
    if not runs:
        reasons = "; ".join(f"seed {r.seed:02d} {r.method}: {r.reason}" for r in excluded.head(5).itertuples())
        raise FileNotFoundError(f"no current, complete run under {domain_dir} ({reasons})")
    return runs, excluded


EXCLUDED_COLUMNS = ["seed", "method", "reason"]
NOT_ASKED = "not asked for"  # a run folder outside the seeds and methods audited: listed, no warning


def load_panel(data_root: Path, domain: str, seed: int) -> Panel | None:
    """The panel a run was trained on (before any proxy shuffle): the per-seed synthetic panel
    (data/processed/<domain>/seed<NN>/) or the domain's panel (data/processed/<domain>/)."""
    for directory in (panel_dir(data_root, domain, seed), panel_dir(data_root, domain)):
        if (directory / "panel.json").is_file():
            return Panel.load(directory)
    return None


def load_entity_info(data_root: Path, domain: str, seed: int) -> EntityInfo | None:
    """Stratifiers and proxies of the panel a run was trained on."""
    panel = load_panel(data_root, domain, seed)
    return None if panel is None else EntityInfo.from_panel(panel)
