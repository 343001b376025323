"""Data preparation: a long frame (entity, time, columns) -> a cleaned ``Panel`` and a report of what was kept.

Rules (docs/data.md), all driven by the params' ``data`` section:

1. the long frame must hold every named column, numeric, with one row per (entity, time);
2. the panel spans ``first_time..last_time``; an entity is dropped when the share of years where the target or a
   feature is missing exceeds ``max_missing_share``;
3. features are interpolated linearly **between observed values only**; nothing is extrapolated past an entity's
   first or last observation: an entity whose features still have gaps at the ends is dropped;
4. targets are never filled: missing targets stay missing and are masked out of losses and metrics;
5. proxies, static features and stratifiers are summaries of **training-window history** (time < val_start):
   ``mean:col``, ``trend:col`` (OLS slope per time unit), ``first:col``, ``last:col``, or a plain ``col`` that is
   constant within each entity; an entity with no training-window value for one of them is dropped;
6. too few entities for an entity-label permutation test to reach p < alpha is an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from acgate import sources
from acgate.config import Params, check_lag_fits
from acgate.dgp import load_or_simulate
from acgate.panel import Panel
from acgate.runs import atomic_write, write_json

SUMMARIES = ("mean", "trend", "first", "last")
KIND_NAMES = {"proxies": "proxy", "static": "static feature", "stratifiers": "stratifier", "truth": "true lag"}
LARGEST = float(np.sqrt(np.finfo(np.float32).max))  # panels are trained in float32: a value's square must fit
PROXY_SHUFFLE_SALT = 7_919  # seeds the proxy-shuffle domains' permutation together with the run seed


class PrepError(ValueError):
    """The input breaks a data rule; the message names the file, column and entity."""


@dataclass
class Prepared:
    panel: Panel
    report: pd.DataFrame  # one row per entity seen: entity, kept, reason
    coverage: pd.DataFrame  # time x {all entities, kept entities}: share with the target and every feature observed


def parse_summary(spec: str) -> tuple[str, str]:
    """'mean:hc' -> ('mean', 'hc'); a plain 'hc' -> ('constant', 'hc')."""
    stat, _, column = spec.partition(":")
    if not column:
        return "constant", stat
    if stat not in SUMMARIES:
        raise PrepError(f"summary '{spec}': unknown statistic '{stat}'; use one of {', '.join(SUMMARIES)} or a plain "
                        "column that is constant within each entity")
    return stat, column


def summary_name(spec: str) -> str:
    stat, column = parse_summary(spec)
    return column if stat == "constant" else f"{stat}_{column}"


def load_long(params: Params, root: Path) -> tuple[pd.DataFrame, str]:
    """The domain's long frame and a name for its source (for error messages)."""
    data = params.data
    directory = sources.raw_dir(root)
    if data.loader == "pwt":
        return sources.load_pwt(directory), f"PWT in {directory}"
    if data.loader == "owid_wgi":
        return sources.load_owid_wgi(directory), f"OWID + WGI in {directory}"
    path = Path(root) / data.csv_file
    return sources.load_csv(path, data.entity_column, data.time_column), str(path)


def _check_long(frame: pd.DataFrame, columns: list[str], source: str) -> pd.DataFrame:
    sources.require_columns(frame, columns, source)
    duplicated = frame.duplicated(["entity", "time"], keep=False)
    if duplicated.any():
        row = frame[duplicated].iloc[0]
        raise PrepError(f"{source}: {duplicated.sum()} duplicated (entity, time) rows, e.g. entity '{row.entity}' "
                        f"at time {row.time}; keep one row per entity and time")
    frame = frame[["entity", "time", *columns]].copy()
    for column in columns:
        numeric = pd.to_numeric(frame[column], errors="coerce")
        bad = numeric.isna() & frame[column].notna()
        if bad.any():
            row = frame[bad].iloc[0]
            raise PrepError(f"{source}: column '{column}' has a non-numeric value {row[column]!r} for entity "
                            f"'{row.entity}' at time {row.time}")
        huge = ~np.isfinite(numeric.fillna(0)) | (numeric.abs() > LARGEST)
        if huge.any():
            row = frame[huge].iloc[0]
            raise PrepError(f"{source}: column '{column}' has the value {numeric[huge].iloc[0]:g} for entity "
                            f"'{row.entity}' at time {row.time}: infinite, or beyond the range the models compute "
                            f"in (|x| <= {LARGEST:.3g}, so that its square fits in float32); correct or rescale it, "
                            "or leave the cell empty to mark it missing")
        frame[column] = numeric.astype(float)
    return frame


def _summarise(history: pd.DataFrame, stat: str) -> float:
    """One statistic of a column's training-window history (index: time); NaN when it cannot be computed."""
    observed = history.dropna()
    if observed.empty:
        return np.nan
    if stat == "mean":
        return float(observed.mean())
    if stat == "first":
        return float(observed.iloc[0])
    if stat == "last":
        return float(observed.iloc[-1])
    if stat == "trend":
        return float(np.polyfit(observed.index.to_numpy(float), observed.to_numpy(), 1)[0]) if len(observed) > 1 \
            else np.nan
    if observed.nunique() > 1:
        return math.inf  # a 'constant' column that varies: flagged by the caller
    return float(observed.iloc[0])


def min_entities(alpha: float) -> int:
    """Smallest N whose best two-sided permutation p (2 / N!) is below alpha."""
    n = 2
    while 2 / math.factorial(n) >= alpha:
        n += 1
    return n


def prepare(frame: pd.DataFrame, params: Params, source: str) -> Prepared:
    data, split = params.data, params.split
    summaries = {"proxies": list(data.proxies), "static": list(data.static), "stratifiers": list(data.stratifiers),
                 "truth": [params.audit.true_lag] if params.audit.true_lag else []}
    raw_columns = list(dict.fromkeys([data.target, *data.features,
                                      *(parse_summary(s)[1] for specs in summaries.values() for s in specs)]))
    frame = _check_long(frame, raw_columns, source)
    times = np.arange(data.first_time, data.last_time + 1)
    if not (frame.time.min() <= data.first_time and data.last_time <= frame.time.max()):
        raise PrepError(f"{source}: data.first_time..last_time = {data.first_time}..{data.last_time} is outside "
                        f"the data's time range {frame.time.min()}..{frame.time.max()}")
    check_lag_fits(params.model.max_lag, data.first_time, split.val_start, source)
    if not data.first_time < split.val_start < split.test_start <= data.last_time:
        raise PrepError(f"{source}: split years must satisfy {data.first_time} < val_start ({split.val_start}) < "
                        f"test_start ({split.test_start}) <= {data.last_time}")

    entities = sorted(frame.entity.unique())
    grid = pd.MultiIndex.from_product([entities, times], names=["entity", "time"])
    wide = frame.set_index(["entity", "time"]).reindex(grid)
    report, kept, rows = [], [], {}
    sequential = [data.target, *data.features]
    train_times = times[times < split.val_start]
    for entity in entities:
        block = wide.loc[entity]
        observed = block[sequential].notna().all(axis=1)
        missing = 1 - observed.mean()
        if block[data.target].isna().all():
            reason = f"target {data.target} never observed in {data.first_time}..{data.last_time}"
            if data.strict:
                raise PrepError(f"{source}: entity '{entity}': {reason}")
        elif missing > data.max_missing_share:
            reason = (f"missing share {missing:.2f} > {data.max_missing_share} (years lacking the target or a "
                      "feature)")
        else:
            features = block[list(data.features)].interpolate(method="index", limit_area="inside")
            if features.isna().any().any():
                column = features.columns[features.isna().any()][0]
                reason = f"feature {column} missing at the start or end (no extrapolation)"
            else:
                reason = ""
                values = {}
                history = block.loc[train_times]
                for kind, specs in summaries.items():
                    for spec in specs:
                        stat, column = parse_summary(spec)
                        value = _summarise(history[column], stat)
                        if value == math.inf:
                            raise PrepError(f"{source}: column '{column}' (a {KIND_NAMES[kind]} given without a "
                                            f"statistic) varies within entity '{entity}'; use e.g. mean:{column}")
                        if not np.isfinite(value):
                            reason = f"no training-window value for {kind} '{spec}'"
                            break
                        values[(kind, summary_name(spec))] = value
                    if reason:
                        break
                if not reason:
                    rows[entity] = (features.to_numpy(), block[data.target].to_numpy(), values)
        report.append({"entity": entity, "kept": reason == "", "reason": reason or "kept"})
        if reason == "":
            kept.append(entity)

    need = min_entities(params.audit.alpha)
    if len(kept) < need:
        raise PrepError(f"{source}: only {len(kept)} entities survive cleaning; an entity-label permutation test needs "
                        f"at least {need} to reach p < {params.audit.alpha}. Drop reasons: "
                        + "; ".join(f"{r['entity']}: {r['reason']}" for r in report if not r["kept"])[:2000])

    def summary_matrix(kind: str) -> np.ndarray:
        names = [summary_name(s) for s in summaries[kind]]
        return np.array([[rows[e][2][(kind, n)] for n in names] for e in kept]).reshape(len(kept), len(names))

    stratifiers = pd.DataFrame(summary_matrix("stratifiers"), index=pd.Index(kept, name="entity"),
                               columns=[summary_name(s) for s in summaries["stratifiers"]])
    panel = Panel(entities=np.array(kept), times=times,
                  X=np.stack([rows[e][0] for e in kept]).astype(np.float32),
                  Y=np.stack([rows[e][1] for e in kept]).astype(np.float32),
                  P=summary_matrix("proxies").astype(np.float32), S=summary_matrix("static").astype(np.float32),
                  feature_names=list(data.features), proxy_names=[summary_name(s) for s in summaries["proxies"]],
                  static_names=[summary_name(s) for s in summaries["static"]], val_start=split.val_start,
                  test_start=split.test_start, stratifiers=stratifiers,
                  truth={"kstar_true": summary_matrix("truth")[:, 0]} if summaries["truth"] else {})
    complete = wide[sequential].notna().all(axis=1)  # target and every feature observed
    coverage = pd.DataFrame({"all entities": complete.groupby(level="time").mean(),
                             "kept entities": complete.loc[kept].groupby(level="time").mean()})
    return Prepared(panel=panel, report=pd.DataFrame(report), coverage=coverage)


def save(prepared: Prepared, directory: Path, manifest: dict) -> None:
    """The panel, the per-entity report and a manifest, under data/processed/<domain>/."""
    prepared.panel.save(directory)
    atomic_write(Path(directory) / "entities.csv", lambda f: prepared.report.to_csv(f, index=False))
    write_json(Path(directory) / "manifest.json", manifest)


def panel_for_training(params: Params, seed: int, data_root: Path) -> Panel:
    """The panel a run trains on: the synthetic draw of ``seed``, or the domain's processed panel (from
    01_data_prep) with, for proxy-shuffle domains, this seed's permutation applied and recorded in ``panel.meta``."""
    if params.synthetic is not None:
        return load_or_simulate(params, seed, data_root)
    directory = Path(data_root) / "processed" / params.domain
    if not (directory / "panel.json").is_file():
        raise FileNotFoundError(f"no processed panel for domain '{params.domain}' in {directory}; run "
                                f"notebooks/01_data_prep.py, or the workflow: "
                                f"make paper CONFIG='domains=[{params.domain}]'")
    panel = Panel.load(directory)
    if params.data.proxy_shuffle:
        panel, permutation = panel.with_shuffled_proxies(seed, PROXY_SHUFFLE_SALT)
        panel.meta["proxy_permutation"] = [str(e) for e in panel.entities[permutation]]
        panel.meta["proxy_permutation_note"] = "entity i received the proxies of the i-th entity listed here"
    return panel
