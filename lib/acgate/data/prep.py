"""Data preparation: a long frame (entity, time, columns) -> a cleaned ``Panel`` and a report of what was kept.

Rules (docs/data.md), all driven by the params' ``data`` section:

1. the long frame must hold every named column, numeric, with one row per (entity, time);
2. the panel spans ``first_time..last_time`` in steps of 1 (time values that are all a multiple of a larger step
   apart, such as biennial years, are an error); an entity is dropped when the share of years where the target or a
   feature is missing exceeds ``max_missing_share`` (mostly empty);
3. features are interpolated linearly **between observed values only**; nothing is extrapolated past an entity's
   first or last observation: where a feature starts late or ends early, those cells take the nearest observed
   value and every target whose lag window reaches one of them is left out of the loss and the metrics
   (``feature_edges: leave_out_targets``), or the entity is dropped (``drop_entity``, the paper's rule);
4. targets are never filled: missing targets stay missing and are masked out of losses and metrics;
5. proxies, static features and stratifiers are summaries of **training-window history** (time < val_start):
   ``mean:col``, ``trend:col`` (OLS slope per time unit), ``first:col``, ``last:col``, or a plain ``col`` that is
   constant within each entity; an entity with no training-window value for one of them is dropped;
6. too few entities for an entity-label permutation test to reach p < alpha is an error;
7. a feature that is the target under another name, at the same time or shifted up to K steps either way, is an
   error (:func:`check_target_copies`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from acgate.config import Params, check_lag_fits
from acgate.data import sources
from acgate.data.dgp import load_or_simulate
from acgate.data.panel import Panel, PanelError
from acgate.layout import panel_dir
from acgate.runs import write_csv, write_json

SUMMARIES = ("mean", "trend", "first", "last")
KIND_NAMES = {"proxies": "proxy", "static": "static feature", "stratifiers": "stratifier", "truth": "true lag"}
LARGEST = float(np.sqrt(np.finfo(np.float32).max))  # panels are trained in float32: a value's square must fit
PROXY_SHUFFLE_SALT = 7_919  # seeds the proxy-shuffle domains' permutation together with the run seed
# a feature whose within-entity correlation with the shifted target reaches this, in levels and in changes, is a copy
# of it; the panels here reach 0.31 at most (energy's renewables share and its target in the same year; economics 0.21,
# the example panel 0.30)
COPY_CORRELATION = 0.999
# ... and a feature that matches a *later* target this closely leaks it, copy or not: a feature equal to next year's
# target plus 1 % noise (correlation 0.991) passed, and the moderated DL reached test R2 0.987. The panels here match
# a later target at 0.15 (economics), 0.06 (energy) and 0.30 (the example) at most
LEAK_CORRELATION = 0.95


class PrepError(ValueError):
    """The input breaks a data rule; the message names the file, column and entity."""


DROPPED_WARNING = 0.2  # prep warns when it drops more than this share of the entities that have the target


@dataclass
class Prepared:
    panel: Panel
    report: pd.DataFrame  # one row per entity seen: entity, kept, reason, targets_left_out
    coverage: pd.DataFrame  # time x {all entities, kept entities}: share with the target and every feature observed
    warning: str | None = None  # more than DROPPED_WARNING of the entities with the target dropped (also in meta)


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
    path = sources.csv_path(data.csv_file, root)
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
    """One statistic of a column's training-window history (index: time); NaN when it cannot be computed. A
    'constant' column must not vary within the entity (the caller checks)."""
    observed = history.dropna()
    if observed.empty:
        return np.nan
    if stat == "trend":
        return float(np.polyfit(observed.index.to_numpy(float), observed.to_numpy(), 1)[0]) if len(observed) > 1 \
            else np.nan
    return float({"mean": observed.mean(), "first": observed.iloc[0], "last": observed.iloc[-1],
                  "constant": observed.iloc[0]}[stat])


def min_entities(alpha: float) -> int:
    """Smallest N whose best two-sided permutation p (2 / N!) is below alpha."""
    n = 2
    while 2 / math.factorial(n) >= alpha:
        n += 1
    return n


@dataclass
class _Kept:
    """A kept entity's series over the panel's times and its training-window summaries."""
    features: np.ndarray  # (T, F), interpolated inside the observed range, the nearest observed value outside it
    target: np.ndarray  # (T,), NaN where missing or left out (masked, never filled)
    summaries: dict[tuple[str, str], float]  # (kind, summary name) -> value
    left_out: int = 0  # observed targets left out: their lag window reaches a feature cell outside its observed range


def prepare(frame: pd.DataFrame, params: Params, source: str) -> Prepared:
    """The panel of a long frame under the cleaning rules (docs/data.md): the time window and split checked; per
    entity, dropped (with the reason) when its target is never observed (with ``data.strict``, the default, that
    stops the run instead), when too many years lack the target or a feature, when a feature has gaps at the ends,
    or when a summary cannot be computed from the training window; the panel built from the entities kept."""
    data = params.data
    summaries = {"proxies": list(data.proxies), "static": list(data.static), "stratifiers": list(data.stratifiers),
                 "truth": [params.audit.true_lag] if params.audit.true_lag else []}
    raw_columns = list(dict.fromkeys([data.target, *data.features,
                                      *(parse_summary(s)[1] for specs in summaries.values() for s in specs)]))
    frame = _check_long(frame, raw_columns, source)
    _check_steps(frame, source)
    _check_window(frame, params, source)
    times = np.arange(data.first_time, data.last_time + 1)
    grid = pd.MultiIndex.from_product([sorted(frame.entity.unique()), times], names=["entity", "time"])
    wide = frame.set_index(["entity", "time"]).reindex(grid)
    report, kept = [], {}
    for entity, block in wide.groupby(level="entity", sort=False):
        reason, cleaned = _clean_entity(block.droplevel("entity"), params, summaries, source, entity)
        report.append({"entity": entity, "kept": cleaned is not None, "reason": reason or "kept",
                       "targets_left_out": cleaned.left_out if cleaned is not None else 0})
        if cleaned is not None:
            kept[entity] = cleaned
    _check_enough(kept, report, params.audit.alpha, source)
    check_target_copies(wide.loc[list(kept)], params, source)
    warning = dropped_warning(pd.DataFrame(report), params, source)
    complete = wide[[data.target, *data.features]].notna().all(axis=1)  # target and every feature observed
    coverage = pd.DataFrame({"all entities": complete.groupby(level="time").mean(),
                             "kept entities": complete.loc[list(kept)].groupby(level="time").mean()})
    try:
        panel = _build_panel(kept, summaries, times, params)
    except PanelError as err:  # a contract of the panel as a whole, e.g. a stratifier without spread
        raise PrepError(f"{source}: {err}") from None
    check_summary_leaks(panel, params, source)
    trained = panel.Y[:, panel.train_time_mask()]
    if np.isfinite(trained).any() and np.nanstd(trained) == 0:  # nothing to forecast; the report's figures divided by 0
        raise PrepError(f"{source}: target '{data.target}' is {float(np.nanmax(trained)):g} in every observed row of "
                        f"the training window (before {params.split.val_start}): there is nothing to forecast; check "
                        "that data.target names the column to forecast")
    _check_features_move(panel, params, source)
    panel.meta["prep"] = {"entities_seen": len(report), "entities_kept": len(kept),
                          "targets_left_out": int(sum(r["targets_left_out"] for r in report)), "warning": warning}
    return Prepared(panel=panel, report=pd.DataFrame(report), coverage=coverage, warning=warning)


def _check_features_move(panel: Panel, params: Params, source: str) -> None:
    """A PrepError naming each feature that does not change over time within any entity in the training window: the
    models read lags from a feature's changes over the steps (each entity's own level is its intercept's), so such a
    feature carries no lag, and the audit read it without a word."""
    x = panel.X[:, panel.train_time_mask()].astype(float)  # (N, T, F)
    seen = np.isfinite(x)
    low, high = np.where(seen, x, np.inf).min(axis=1), np.where(seen, x, -np.inf).max(axis=1)  # (N, F)
    for f in np.flatnonzero(~(high > low).any(axis=0)):
        name, values = params.data.features[f], x[..., f][seen[..., f]]
        how = (f"is {values[0]:g} in every observed row" if values.size and np.all(values == values[0])
               else "is constant within every entity (it differs only between entities)")
        raise PrepError(f"{source}: feature '{name}' {how} of the training window (before {params.split.val_start}): "
                        "the models read lags from a feature's changes over time, so it carries none; leave it out "
                        "of data.features, or check that it names the column meant")


def dropped_warning(report: pd.DataFrame, params: Params, source: str) -> str | None:
    """A warning when prep drops more than :data:`DROPPED_WARNING` of the entities whose target it sees at least once
    (an entity without the target is no loss), with the count of each reason and the setting behind it."""
    never = report.reason.str.startswith(f"target {params.data.target} never observed")
    considered = report[~never]
    dropped = considered[~considered.kept]
    if len(dropped) <= DROPPED_WARNING * len(considered):
        return None
    kinds = dropped.reason.str.replace(r"\d+\.\d+ > \d+(\.\d+)?", "over the limit", regex=True).value_counts()
    return (f"{source}: {len(dropped)} of the {len(considered)} entities with the target were dropped "
            f"({len(dropped) / len(considered):.0%}): " + "; ".join(f"{n} for {why}" for why, n in kinds.items())
            + f" (data.max_missing_share = {params.data.max_missing_share}, data.feature_edges = "
            f"{params.data.feature_edges}); each entity's reason is in entities.csv beside the panel")


def _check_steps(frame: pd.DataFrame, source: str) -> None:
    """The time values are consecutive whole numbers, as the panel's grid (first_time..last_time in steps of 1) takes
    them: data every other year would leave every entity without half its steps and drop it for its missing share,
    with no word of the step. The step is the gcd of the gaps between the times any row has, so a column observed
    only in some years (WGI before 2002) does not count."""
    observed = np.unique(frame.time)
    step = int(np.gcd.reduce(np.diff(observed))) if len(observed) > 1 else 1
    if step > 1:
        shown = ", ".join(map(str, observed[:4])) + (", ..." if len(observed) > 4 else "")
        raise PrepError(f"{source}: the time values ({shown}) are all {step} apart or a multiple of {step}, but the "
                        f"panel's time steps must be consecutive whole numbers (each entity would lack {step - 1} of "
                        f"every {step} steps, and be dropped for it). Renumber the time column as consecutive steps, "
                        f"e.g. (time - {observed[0]}) / {step}, and set data.first_time, data.last_time and the split "
                        "years in the same units")


def _check_window(frame: pd.DataFrame, params: Params, source: str) -> None:
    """The time window lies inside the data, leaves room for the first lag window, and holds the split in order."""
    data, split = params.data, params.split
    if not (frame.time.min() <= data.first_time and data.last_time <= frame.time.max()):
        raise PrepError(f"{source}: data.first_time..last_time = {data.first_time}..{data.last_time} is outside "
                        f"the data's time range {frame.time.min()}..{frame.time.max()}")
    check_lag_fits(params.model.max_lag, data.first_time, split.val_start, source)
    if not data.first_time < split.val_start < split.test_start <= data.last_time:
        raise PrepError(f"{source}: split years must satisfy {data.first_time} < val_start ({split.val_start}) < "
                        f"test_start ({split.test_start}) <= {data.last_time}")


def _clean_entity(block: pd.DataFrame, params: Params, summaries: dict[str, list[str]], source: str, entity: str
                  ) -> tuple[str, _Kept | None]:
    """One entity's rows over the panel's times (index: time): the reason it is dropped and None, or "" and what
    the panel keeps of it."""
    data = params.data
    if block[data.target].isna().all():
        reason = f"target {data.target} never observed in {data.first_time}..{data.last_time}"
        if data.strict:
            raise PrepError(f"{source}: entity '{entity}': {reason}")
        return reason, None
    missing = 1 - block[[data.target, *data.features]].notna().all(axis=1).mean()
    if missing > data.max_missing_share:
        return f"missing share {missing:.2f} > {data.max_missing_share} (years lacking the target or a feature)", None
    features = block[list(data.features)].interpolate(method="index", limit_area="inside")
    outside = features.isna().any(axis=1).to_numpy()  # (T,) a feature unobserved before its first or after its last
    if outside.any() and data.feature_edges == "drop_entity":
        return f"feature {features.columns[features.isna().any()][0]} missing at the start or end (no " \
               "extrapolation; data.feature_edges: leave_out_targets would keep the entity)", None
    target = block[data.target].to_numpy(dtype=float)
    max_lag = params.model.max_lag
    # a target at time t sees the features at t-K..t-1: one whose window reaches a filled cell is left out
    reaches = np.array([outside[max(0, t - max_lag):t].any() for t in range(len(target))])
    left_out = int((reaches & np.isfinite(target)).sum())
    target = np.where(reaches, np.nan, target)
    if left_out and not np.isfinite(target[max_lag:]).any():
        return f"no target left whose {max_lag} lagged years have every feature observed", None
    features = features.ffill().bfill()
    history = block.loc[block.index < params.split.val_start]
    values = {}
    for kind, spec in ((kind, spec) for kind, specs in summaries.items() for spec in specs):
        stat, column = parse_summary(spec)
        if stat == "constant" and history[column].dropna().nunique() > 1:
            raise PrepError(f"{source}: column '{column}' (a {KIND_NAMES[kind]} given without a statistic) varies "
                            f"within entity '{entity}'; use e.g. mean:{column}")
        values[(kind, summary_name(spec))] = _summarise(history[column], stat)
        if not np.isfinite(values[(kind, summary_name(spec))]):
            return f"no training-window value for {kind} '{spec}'", None
    return "", _Kept(features.to_numpy(), target, values, left_out)


def _check_enough(kept: dict, report: list[dict], alpha: float, source: str) -> None:
    """Enough entities survive for an entity-label permutation test to reach p < alpha."""
    need = min_entities(alpha)
    if len(kept) < need:
        raise PrepError(f"{source}: only {len(kept)} entities survive cleaning; an entity-label permutation test needs "
                        f"at least {need} to reach p < {alpha}. Drop reasons: "
                        + "; ".join(f"{r['entity']}: {r['reason']}" for r in report if not r["kept"])[:2000])


def _within_correlation(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """Pearson correlation of a and b (N, S), pooled over entities after each entity's series is standardised on the
    steps where both are observed (so that an entity's own offset and scale do not count), and the number of
    entities with at least three such steps and some spread in both; (NaN, 0) when none has."""
    both = np.isfinite(a) & np.isfinite(b)
    usable = both.sum(axis=1) >= 3
    a, b, both = np.where(both, a, np.nan)[usable], np.where(both, b, np.nan)[usable], both[usable]
    spread = (np.nanstd(a, axis=1) > 0) & (np.nanstd(b, axis=1) > 0)
    if not spread.any():
        return np.nan, 0
    a, b, both = a[spread], b[spread], both[spread]
    za = (a - np.nanmean(a, axis=1, keepdims=True)) / np.nanstd(a, axis=1, keepdims=True)
    zb = (b - np.nanmean(b, axis=1, keepdims=True)) / np.nanstd(b, axis=1, keepdims=True)
    return float(np.corrcoef(za[both], zb[both])[0, 1]), int(spread.sum())


def check_summary_leaks(panel: Panel, params: Params, source: str) -> None:
    """Stop when a proxy, static feature or stratifier (one value per entity) is the entities' mean target over the
    validation or the test window: a column built from held-out targets (a target encoding) lets every model see
    what it is scored on (it halved AC-GATE's test MSE without a word). Such a column matches the held-out means to
    :data:`LEAK_CORRELATION` or better across the entities, and matches them more closely than the training
    window's means (an entity's level that persists, as a country's income does, matches both alike)."""
    if panel.n_entities < 5:
        return
    splits = panel.target_split(0)
    means = {}
    for split in ("train", "val", "test"):
        seen = np.isfinite(panel.Y) & (splits == split)[None, :]
        count = seen.sum(axis=1)
        means[split] = np.where(count > 0, np.where(seen, panel.Y, 0.0).sum(axis=1) / np.maximum(count, 1), np.nan)
    columns = [("proxy", n, panel.P[:, i]) for i, n in enumerate(panel.proxy_names)]
    columns += [("static feature", n, panel.S[:, i]) for i, n in enumerate(panel.static_names)]
    columns += [("stratifier", n, panel.stratifiers[n].to_numpy(dtype=float)) for n in panel.stratifiers.columns]
    for kind, name, values in columns:
        fit = {split: _entity_correlation(values, mean) for split, mean in means.items()}
        for split, window in (("val", "validation"), ("test", "test")):
            if abs(fit[split]) >= LEAK_CORRELATION and abs(fit[split]) > abs(fit["train"]):
                raise PrepError(f"{source}: {kind} '{name}' is the entities' mean target over the {window} window "
                                f"(correlation {fit[split]:.4f} across entities; with the training window's means "
                                f"{fit['train']:.4f}): a column made from held-out targets lets the models see what "
                                f"they are scored on. Drop it, or compute it from the training window only (before "
                                f"{params.split.val_start})")


def _entity_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's correlation of two per-entity vectors over the entities where both are finite (0 where undefined)."""
    both = np.isfinite(a) & np.isfinite(b)
    if both.sum() < 3 or np.std(a[both]) == 0 or np.std(b[both]) == 0:
        return 0.0
    return float(np.corrcoef(a[both], b[both])[0, 1])


def check_target_copies(wide: pd.DataFrame, params: Params, source: str) -> None:
    """Stop when a feature is the target under another name, at the same time or shifted by s = -K..K steps
    (the feature at t is the target at t+s), over the training window of the entities in ``wide`` (index: entity,
    time on the panel's grid). The models see features at lags 1..K: with s >= 1 they would see the very targets
    they predict (a leak: test R2 near 1, k* near s), with s <= 0 the target's own past, and the lag weights would
    describe its persistence instead of its response to the features. A copy matches the shifted target within every
    entity in levels and in changes from one time to the next; two series that merely trend together match in
    levels only, so both must reach :data:`COPY_CORRELATION` (in absolute value: a sign flip is a copy too), or, for
    a later target (s >= 1), :data:`LEAK_CORRELATION`: near enough to leak it. The target's own column listed among
    the features is how a user asks for its past on purpose, and is not checked."""
    data, max_lag = params.data, params.model.max_lag
    train_steps = params.split.val_start - data.first_time
    series = {c: wide[c].unstack("time").to_numpy(dtype=float)[:, :train_steps]  # (N, training steps)
              for c in dict.fromkeys([data.target, *data.features])}
    target = series[data.target]
    worst = (0.0, "", 0, 0)  # correlation, feature, shift, entities of the strongest match past its threshold
    for feature in (f for f in data.features if f != data.target):
        for shift in range(-max_lag, max_lag + 1):
            if train_steps - abs(shift) < 3:
                continue
            x = series[feature][:, max(-shift, 0):train_steps - max(shift, 0)]  # (N, S): times t
            y = target[:, max(shift, 0):train_steps + min(shift, 0)]  # (N, S): times t + shift
            levels, entities = _within_correlation(x, y)
            changes, _ = _within_correlation(np.diff(x, axis=1), np.diff(y, axis=1))
            match = min(abs(levels), abs(changes))
            if match >= (LEAK_CORRELATION if shift >= 1 else COPY_CORRELATION) and match > worst[0]:
                worst = (match, feature, shift, entities)
    match, feature, shift, entities = worst
    if not feature:
        return
    when = "t" if shift == 0 else f"t{shift:+d}"
    found = (f"{source}: feature '{feature}' at time t equals target '{data.target}' at time {when} (correlation "
             f"{match:.4f} within entities, in levels and in changes, over {entities} entities, training window "
             f"{data.first_time}..{params.split.val_start - 1})")
    if shift >= 1:
        raise PrepError(f"{found}: the models see features at lags 1..{max_lag}, so they would see the very targets "
                        f"they predict (a leak: test R2 near 1, k* near {shift}). Drop '{feature}' from data.features "
                        f"(or, if it is a predictor dated {shift} step(s) too early, re-date it so that its value at "
                        "t is what was known at t)")
    raise PrepError(f"{found}: the models see features at lags 1..{max_lag}, so this is the target's own past under "
                    "another name, and the lag weights would describe the target's persistence, not its response to "
                    f"the features. Drop '{feature}' from data.features; to give the models the target's own past on "
                    f"purpose, list the target column '{data.target}' itself in data.features")


def _build_panel(kept: dict[str, _Kept], summaries: dict[str, list[str]], times: np.ndarray, params: Params
                 ) -> Panel:
    """The panel of the kept entities: sequences, targets, and the summaries as proxies, static features,
    stratifiers and (where given) the true lag."""
    entities = list(kept)

    def names(kind: str) -> list[str]:
        return [summary_name(s) for s in summaries[kind]]

    def matrix(kind: str) -> np.ndarray:
        return np.array([[kept[e].summaries[(kind, n)] for n in names(kind)] for e in entities]).reshape(
            len(entities), len(names(kind)))

    return Panel(entities=np.array(entities), times=times,
                 X=np.stack([kept[e].features for e in entities]).astype(np.float32),
                 Y=np.stack([kept[e].target for e in entities]).astype(np.float32),
                 P=matrix("proxies").astype(np.float32), S=matrix("static").astype(np.float32),
                 feature_names=list(params.data.features), proxy_names=names("proxies"),
                 static_names=names("static"), val_start=params.split.val_start, test_start=params.split.test_start,
                 stratifiers=pd.DataFrame(matrix("stratifiers"), index=pd.Index(entities, name="entity"),
                                          columns=names("stratifiers")),
                 truth={"kstar_true": matrix("truth")[:, 0]} if summaries["truth"] else {})


def save(prepared: Prepared, directory: Path, manifest: dict) -> None:
    """The panel, the per-entity report and a manifest, under data/processed/<domain>/."""
    prepared.panel.save(directory)
    write_csv(Path(directory) / "entities.csv", prepared.report, index=False)
    write_json(Path(directory) / "manifest.json", manifest)


def prepared_panel(params: Params, data_root: Path) -> Panel:
    """A data domain's processed panel (from 01_data_prep), or a FileNotFoundError that names the folder and how to
    make it."""
    directory = panel_dir(data_root, params.domain)
    if not (directory / "panel.json").is_file():
        raise FileNotFoundError(f"no processed panel for domain '{params.domain}' in {directory}; run "
                                "notebooks/01_data_prep.py with the same profile_file and data_dir (a notebook with a "
                                "profile or a runs_dir of its own keeps its panels in <runs_dir>/data; data_dir='data' "
                                f"reads the paper's), or the workflow: make paper CONFIG='domains=[{params.domain}]'")
    return Panel.load(directory)


def panel_for_training(params: Params, seed: int, data_root: Path) -> Panel:
    """The panel a run trains on: the synthetic draw of ``seed``, or the domain's processed panel (from
    01_data_prep) with, for proxy-shuffle domains, this seed's permutation applied and recorded in ``panel.meta``."""
    if params.synthetic is not None:
        return load_or_simulate(params, seed, data_root)
    return as_trained(prepared_panel(params, data_root), params, seed)


def training_digest(panel: Panel, params: Params, seed: int) -> str:
    """The panel digest a current run of ``seed`` records, from its domain's ``panel`` as saved (a synthetic seed's,
    or the processed panel): that of :func:`panel_for_training`'s panel, whose proxies a proxy-shuffle domain
    permutes per seed."""
    return as_trained(panel, params, seed).digest()


def as_trained(panel: Panel, params: Params, seed: int) -> Panel:
    """``panel`` (its domain's processed panel, as saved) as a run of ``seed`` is given it: for a proxy-shuffle
    domain, with this seed's permutation of the proxies applied and recorded in ``panel.meta``."""
    if params.synthetic is None and params.data.proxy_shuffle:
        panel, permutation = panel.with_shuffled_proxies(seed, PROXY_SHUFFLE_SALT)
        panel.meta["proxy_permutation"] = [str(e) for e in panel.entities[permutation]]
        panel.meta["proxy_permutation_note"] = "entity i received the proxies of the i-th entity listed here"
    return panel
