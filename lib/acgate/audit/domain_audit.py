"""The layered lag audit (paper section V, Algorithm 1) of one domain, from its run folders
(:mod:`acgate.audit.run_folders`), and the audit's tables.

    result = audit_domain(params, runs_root="runs", data_root="data")
    result.write("runs/<domain>/audit")

Layers, per seed and method:

- L0 forecast: test MSE, MAE, R2 (pooled, and the paper's per-time cross-sectional R2), every method and persistence
  scored on the same test rows; the reference's held-out loss against every other method's, over seeds and over
  entities (``heldout.csv``);
- L1 degeneracy guard: sd_i(k*) against the paper's epsilon and against a practical threshold; seeds at or
  below epsilon are degenerate and skip L2;
- L2 stratifier alignment: Spearman(k*, stratifier) with an entity-label permutation null,
  p = (1 + #{|rho_b| >= |rho|}) / (B + 1); across seeds mean |rho|, median rho, share of p < alpha,
  Fisher-combined p, sign consistency, and a permutation test on the seed-mean k* where every seed has the
  same entities; stratifiers that duplicate a proxy are flagged circular (one proxy at a time, and jointly); the
  alignment against lag-free k* (random functions of the proxies); the seed-to-seed agreement of k*;
- L3 (synthetic): MAE and Spearman of k* against the lag centre and against the DGP mean lag.

Across methods: paired Wilcoxon tests of seed-level metrics against each reference (AC-GATE, and the classical
moderated distributed lag where it ran) on the seeds both have, and the verdicts of the paper's rules and of the
calibrated rules (:mod:`acgate.audit.verdicts`) for each reference; AC-GATE against the moderated distributed lag
head to head (:mod:`acgate.audit.head_to_head`).
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from acgate import statistics
from acgate.audit import lag_tests, verdicts
from acgate.audit.head_to_head import CLASSICAL, comparison_verdict, neural_vs_classical
from acgate.audit.run_folders import (
    EXCLUDED_COLUMNS,
    NOT_ASKED,
    EntityInfo,
    Run,
    load_entity_info,
    load_panel,
    load_runs,
)
from acgate.config import AuditConfig, Params
from acgate.data import prep, sources
from acgate.data.panel import Panel
from acgate.models.baselines import persistence
from acgate.models.metrics import TRUTHS, forecast_metrics, l3_recovery
from acgate.runs import write_csv, write_json

WILCOXON_COLUMNS = ["metric", "method", "reference", "n_pairs", "nonzero_pairs", "mean_diff", "median_diff",
                    "hodges_lehmann", "W", "p", "note"]


def kstar_with_stratifiers(kstar_by_entity: pd.DataFrame, data_root: Path, domain: str, shared: bool) -> pd.DataFrame:
    """One method's k* per entity (rows of ``kstar_by_entity``) beside the stratifiers of the panel each seed trained
    on: every entity of every seed (each seed of a synthetic panel draws new entities, under the same names), or,
    where the seeds share their entities (``shared``, the audit's :attr:`AuditResult.shared_entities`: a real
    panel), the seed-mean k* and stratifiers per entity."""
    frames = []
    for seed, rows in kstar_by_entity.groupby("seed"):
        info = load_entity_info(data_root, domain, seed)
        if info is not None:
            frames.append(rows.set_index("entity").join(info.stratifiers, how="inner"))
    if not frames:
        return pd.DataFrame()
    points = pd.concat(frames)
    return points.groupby(level=0).mean(numeric_only=True) if shared else points


def over_seeds(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Per method (in order of appearance): the number of seeds and each column's "mean (sd)" over seeds, as text."""
    grouped = frame.groupby("method", sort=False)
    out = pd.DataFrame({"seeds": grouped.seed.nunique()})
    for column in columns:
        out[column] = grouped[column].agg(lambda v: f"{v.mean():.4f} ({v.std():.4f})")
    return out


def shares_entities(panels: dict[int, Panel]) -> bool:
    """True when every seed has the same entities and the same targets (a real panel, trained with several seeds),
    so seeds are not independent draws and only training randomness differs between them."""
    found = list(panels.values())
    return len(found) > 1 and all(np.array_equal(p.entities, found[0].entities)
                                  and np.array_equal(p.Y, found[0].Y, equal_nan=True) for p in found[1:])


def scored_rows(runs: list[Run], panels: dict[int, Panel], max_lag: int) -> pd.DataFrame:
    """The test rows every method of a seed (and persistence, y_hat_t = y_{t-1}) predicts, so that all are scored
    on the same targets: seed, method, entity, time, y, y_hat."""
    frames = [r.test.assign(seed=r.seed, method=r.method) for r in runs]
    frames += [persistence(panel, max_lag).query("split == 'test'").assign(seed=seed, method="persistence")
               for seed, panel in panels.items()]
    rows = pd.concat(frames, ignore_index=True)[["seed", "method", "entity", "time", "y", "y_hat"]]
    rows = rows[np.isfinite(rows.y_hat) & np.isfinite(rows.y)]
    present = rows.groupby(["seed", "entity", "time"]).method.transform("nunique")
    return rows[present == rows.seed.map(rows.groupby("seed").method.nunique())].reset_index(drop=True)


FAILED_FACTOR = 10.0  # a run this many times worse than the target's own yardsticks ...
FAILED_GAP = 100.0  # ... and this many times worse than the best method of its seed learnt nothing


def failed_runs(scored: pd.DataFrame) -> pd.DataFrame:
    """The runs (seed, method, reason: :data:`EXCLUDED_COLUMNS`) that learnt nothing. On the test rows every method is
    scored on, a run's test MSE is above :data:`FAILED_FACTOR` times the larger of persistence's MSE, the target's
    variance (the MSE of its test mean) and a hundredth of its mean square (the floor of a constant target), and
    above :data:`FAILED_GAP` times the best MSE of the seed's other methods, where there are any. A target that is
    zero throughout has no scale to compare with: nothing is called failed there. Such a run (a learning rate far
    too large, a diverged optimiser) is evidence for or against nothing, and a verdict that read it would mislead."""
    loss = scored.assign(loss=(scored.y_hat - scored.y) ** 2)
    rows = []
    for seed, g in loss.groupby("seed"):
        mse = g.groupby("method").loss.mean()
        target = g.drop_duplicates(["entity", "time"]).y
        yardstick = max(float(mse.get("persistence", 0.0)), float(target.var(ddof=0)), 0.01 * float(np.mean(target**2)))
        methods = mse.drop("persistence", errors="ignore")
        for method, value in methods.items():
            best = methods.drop(method).min() if len(methods) > 1 else np.inf
            if yardstick > 0 and not (value <= FAILED_FACTOR * yardstick or value <= FAILED_GAP * best):
                rows.append({"seed": seed, "method": method, "reason": (
                    f"learnt nothing: test MSE {value:.3g}, against {float(mse.get('persistence', np.nan)):.3g} for "
                    f"persistence and the target's variance {float(target.var(ddof=0)):.3g}; training probably "
                    "diverged (check train.lr and the run's history.csv), so the run is not audited")})
    return pd.DataFrame(rows, columns=EXCLUDED_COLUMNS)


def heldout_comparisons(scored: pd.DataFrame, cfg: AuditConfig) -> pd.DataFrame:
    """The reference's test loss against every other method's on the same rows: the difference of squared errors
    (comparator - reference, positive when the reference is better) tested one-sided both ways, over seeds (paired
    Wilcoxon of per-seed MSE) and over entities (block bootstrap of the seed-averaged per-entity MSE difference),
    with Holm-adjusted p over the comparators of the larger of the two. Where the difference is the same in every
    seed (two deterministic fits on one shared panel) the seed p is NaN (not applicable) and the entity p stands
    alone."""
    loss = scored.assign(loss=(scored.y_hat - scored.y) ** 2)
    by_seed = loss.groupby(["method", "seed"]).loss.mean().unstack("seed")
    by_entity = loss.groupby(["method", "seed", "entity"]).loss.mean()
    rows = []
    if cfg.reference in by_seed.index:
        for comparator in by_seed.index.drop(cfg.reference):
            seed_diff = (by_seed.loc[comparator] - by_seed.loc[cfg.reference]).dropna().to_numpy()
            entity_diff = (by_entity.loc[comparator] - by_entity.loc[cfg.reference]).dropna().groupby("entity").mean()
            rng = np.random.default_rng([cfg.permutation_seed, zlib.crc32(comparator.encode())])
            entity_better, entity_worse = statistics.entity_bootstrap(entity_diff.to_numpy(), cfg.bootstrap, rng)
            # two deterministic fits on one panel (the classical models on a real panel) differ by the same amount in
            # every seed: the seeds replicate nothing, and only the entities carry uncertainty
            replicated = not statistics.unreplicated(seed_diff)
            seed_better = statistics.wilcoxon_greater(seed_diff) if replicated else np.nan
            seed_worse = statistics.wilcoxon_greater(-seed_diff) if replicated else np.nan
            rows.append({"reference": cfg.reference, "comparator": comparator, "seeds": len(seed_diff),
                         "nonzero_pairs": int(np.sum(seed_diff != 0)), "entities": len(entity_diff),
                         "mean_loss_diff": seed_diff.mean(), "hodges_lehmann": statistics.hodges_lehmann(seed_diff),
                         "p_seed_better": seed_better, "p_seed_worse": seed_worse,
                         "p_entity_better": entity_better, "p_entity_worse": entity_worse,
                         "p_better": np.nanmax([seed_better, entity_better]),
                         "p_worse": np.nanmax([seed_worse, entity_worse])})
    table = pd.DataFrame(rows, columns=HELDOUT_COLUMNS[:-2])
    for side in ("better", "worse"):
        table[f"holm_{side}"] = table.comparator.map(statistics.holm(dict(zip(table.comparator, table[f"p_{side}"],
                                                                              strict=True))))
    return table


HELDOUT_COLUMNS = ["reference", "comparator", "seeds", "nonzero_pairs", "entities", "mean_loss_diff", "hodges_lehmann",
                   "p_seed_better", "p_seed_worse", "p_entity_better", "p_entity_worse", "p_better", "p_worse",
                   "holm_better", "holm_worse"]


def seed_agreement_table(runs: list[Run], shared: bool) -> pd.DataFrame:
    """Per method: how far the k* ordering of entities agrees between seeds (Spearman of every seed pair). Only
    where seeds share entities; otherwise every seed is a fresh draw and its own replication."""
    rows = []
    for method in dict.fromkeys(r.method for r in runs):
        if shared:
            kstar = pd.concat({r.seed: r.lags.set_index("entity").kstar for r in runs if r.method == method}, axis=1)
            rows.append({"method": method, "applicable": True, **statistics.seed_agreement(kstar)})
        else:
            rows.append({"method": method, "applicable": False, **statistics.seed_agreement(pd.DataFrame())})
    return pd.DataFrame(rows)


@dataclass
class AuditResult:
    domain: str
    config: AuditConfig
    l0: pd.DataFrame
    l1: pd.DataFrame
    l2: pd.DataFrame
    l2_summary: pd.DataFrame
    l3: pd.DataFrame
    wilcoxon: pd.DataFrame
    heldout: pd.DataFrame
    seed_agreement: pd.DataFrame
    kstar_by_entity: pd.DataFrame
    neural_vs_classical: pd.DataFrame  # AC-GATE against the moderated distributed lag (empty unless both ran)
    lag_tests: pd.DataFrame  # the in-sample GLS lag tests, one row per panel (see lag_tests)
    verdicts: dict  # the calibrated verdicts of config.reference
    verdicts_paper: dict  # the paper rules' verdicts of config.reference
    verdicts_by_reference: dict = field(default_factory=dict)  # reference -> {"calibrated": ..., "paper": ...}
    neural_vs_classical_verdict: dict = field(default_factory=dict)  # see comparison_verdict
    lags_differ: dict = field(default_factory=dict)  # verdicts.lags_differ_verdict: a cell apart from the layers
    error_rates: dict = field(default_factory=dict)  # a data domain's panel-matched rates (panel_matched.read_rates)
    excluded: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=EXCLUDED_COLUMNS))
    kind: str = "synthetic"  # Params.kind: "synthetic", "data" or "proxy_shuffle" (from the params, not the name)
    shared_entities: bool = False
    problems: list[str] = field(default_factory=list)
    request: dict = field(default_factory=dict)  # what was asked for (audit_request)
    gate_memory: bool = True  # AC-GATE's model.gate_memory: which calibration and reach map describe its verdicts

    def write(self, directory: Path) -> None:
        """The audit outputs (tables as CSV, verdicts.json), each written atomically."""
        for name in AUDIT_TABLES:
            frame = getattr(self, name)
            write_csv(Path(directory) / f"{name}.csv", frame, index=False)
        write_json(Path(directory) / "verdicts.json",
                   {"domain": self.domain, "kind": self.kind, "rules_version": verdicts.RULES_VERSIONS,
                    "reference": self.config.reference,
                    "verdicts": self.verdicts, "verdicts_paper": self.verdicts_paper,
                    "verdicts_by_reference": self.verdicts_by_reference,
                    "neural_vs_classical": self.neural_vs_classical_verdict, "lags_differ": self.lags_differ,
                    "error_rates": self.error_rates,
                    "shared_entities": self.shared_entities,
                    "problems": self.problems, "excluded_runs": self.excluded.to_dict("records"),
                    "audit": dataclasses.asdict(self.config), "request": self.request,
                    "gate_memory": self.gate_memory})

    def warning_places(self) -> dict[str, dict[tuple[str, str], list[str]]]:
        """Every warning the verdicts carry (both rule sets, every reference), once, in order of appearance: its text
        -> (reference, rule) -> the layers it applies to (a run left out warns every layer of both references)."""
        places: dict[str, dict[tuple[str, str], list[str]]] = {}
        for reference, found in self.verdicts_by_reference.items():
            for rule in ("calibrated", "paper"):
                for layer, cell in found[rule].items():
                    for warning in cell.get("warnings", []):
                        places.setdefault(warning, {}).setdefault((reference, rule), []).append(layer)
        return places

    def warnings(self) -> list[str]:
        """Every warning the verdicts carry, once, each saying where it applies ("acgate L0, L1 (calibrated rule);
        moderated_dl L1 (paper rule): ...")."""
        return ["; ".join(f"{reference} {', '.join(layers)} ({rule} rule)" for (reference, rule), layers in
                          where.items()) + f": {text}" for text, where in self.warning_places().items()]


def audit_request(params: Params, seeds: int = 0, methods: list[str] | tuple[str, ...] = ()) -> dict:
    """What an audit of :func:`audit_domain` is of: the params (their digest), the audit settings (which the digest
    leaves out, those added later only where they differ from the value they were added with), the seeds and the
    methods asked for."""
    return {"params_digest": params.digest(), "audit": json.loads(json.dumps(params.recorded("audit"))),
            "seeds": seeds or params.n_seeds, "methods": sorted(methods or params.methods)}


def other_request(directory: Path, asked: dict) -> str | None:
    """How the audit in ``directory`` was asked for otherwise than ``asked`` (:func:`audit_request`), in words, or
    None where it was asked for alike, or no audit (or one that does not say) is there: an audit that another one
    would replace without a word."""
    path = Path(directory) / "verdicts.json"
    try:
        made = json.loads(path.read_text()).get("request") if path.is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, AttributeError):
        return None
    if not isinstance(made, dict) or made == asked:
        return None
    differences = []
    for key, value in asked.items():
        before = made.get(key)
        if key == "audit" and isinstance(before, dict):  # the settings that differ, each by its name
            differences += [f"audit.{name} {before.get(name)} there, {setting} here" for name, setting in value.items()
                            if before.get(name) != setting]
        elif before != value:
            differences.append(f"{key} {before} there, {value} here")
    return "; ".join(differences)


AUDIT_TABLES = ("l0", "l1", "l2", "l2_summary", "l3", "wilcoxon", "heldout", "seed_agreement", "kstar_by_entity",
                "neural_vs_classical", "lag_tests")


def read_audit(directory: Path) -> AuditResult:
    """An audit written by :meth:`AuditResult.write`, read back."""
    directory = Path(directory)
    meta = json.loads((directory / "verdicts.json").read_text())

    def table(name: str) -> pd.DataFrame:
        try:
            return sources.read_csv_ids(directory / f"{name}.csv", ["entity"], written=True)
        except (pd.errors.EmptyDataError, FileNotFoundError):  # empty, or from before the table existed
            return pd.DataFrame()

    audit: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in meta["audit"].items()}
    return AuditResult(meta["domain"], AuditConfig(**audit), **{name: table(name) for name in AUDIT_TABLES},
                       verdicts=meta["verdicts"], verdicts_paper=meta["verdicts_paper"],
                       verdicts_by_reference=meta.get("verdicts_by_reference") or {  # an audit from before the
                           audit["reference"]: {"calibrated": meta["verdicts"], "paper": meta["verdicts_paper"]}},
                       neural_vs_classical_verdict=meta.get("neural_vs_classical", {}),
                       lags_differ=meta.get("lags_differ", {}), error_rates=meta.get("error_rates", {}),
                       excluded=pd.DataFrame(meta["excluded_runs"], columns=EXCLUDED_COLUMNS), kind=meta["kind"],
                       shared_entities=meta["shared_entities"], problems=meta["problems"],
                       request=meta.get("request", {}), gate_memory=meta.get("gate_memory", True))


def _l2_rows(runs: list[Run], l1: pd.DataFrame, info: dict[int, EntityInfo], cfg: AuditConfig) -> pd.DataFrame:
    rows: list[dict] = []
    references: dict[str, np.ndarray] = {}
    references_seed = None
    degenerate = l1.set_index(["seed", "method"]).degenerate_paper
    for run in runs:
        entity_info = info[run.seed]
        # the methods of a seed share their lag-free references (statistics.lag_free_p); the runs come seed by seed,
        # so only the current seed's are kept
        if run.seed != references_seed:
            references, references_seed = {}, run.seed
        for j, name in enumerate(entity_info.stratifiers.columns):
            row = {"seed": run.seed, "method": run.method, "kstar_kind": run.lags.kstar_kind.iloc[0],
                   "stratifier": name, "rho": np.nan, "p_perm": np.nan, "lag_free_median_abs_rho": np.nan,
                   "lag_free_p": np.nan, "n_entities": 0, "permutations": cfg.permutations, "skipped": ""}
            if degenerate[(run.seed, run.method)]:
                row["skipped"] = f"L1 degenerate (sd of k* <= epsilon = {cfg.epsilon:g})"
            else:
                kstar, values, proxies = _aligned(run.lags.set_index("entity").kstar, entity_info, name)
                rng = np.random.default_rng([cfg.permutation_seed, run.seed, j])
                row["rho"], row["p_perm"] = statistics.permutation_spearman(kstar, values, cfg.permutations, rng)
                row["lag_free_median_abs_rho"], row["lag_free_p"] = statistics.lag_free_p(
                    kstar, values, proxies, cfg.permutations, rng, references)
                row["n_entities"] = len(kstar)
            rows.append(row)
    return pd.DataFrame(rows)


def _aligned(kstar: pd.Series, entity_info: EntityInfo, stratifier: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """k* (n,), one stratifier (n,) and the proxies (n, M) of the n entities that have all of them."""
    values = entity_info.stratifiers[stratifier].dropna()
    entities = kstar.dropna().index.intersection(values.index).intersection(entity_info.proxies.dropna().index)
    return (kstar.loc[entities].to_numpy(), values.loc[entities].to_numpy(),
            entity_info.proxies.loc[entities].to_numpy())


def _proxy_overlap(info: dict[int, EntityInfo]) -> dict[str, tuple[float, str, float]]:
    """For each stratifier over seeds: the largest |Spearman| with any one proxy and that proxy's name (the paper
    rule's circularity), and the largest rank multiple correlation with all proxies jointly (the calibrated one)."""
    overlap: dict[str, tuple[float, str, float]] = {}
    for entity_info in info.values():
        for name in entity_info.stratifiers.columns:
            _, values, proxies = _aligned(entity_info.stratifiers[name], entity_info, name)
            best, closest, joint = overlap.get(name, (-1.0, "", -1.0))
            for m, proxy in enumerate(entity_info.proxies.columns):
                rho = 1.0 if name == proxy else abs(statistics.spearman(values, proxies[:, m]))
                if rho > best:
                    best, closest = float(rho), proxy
            joint = max(joint, 1.0 if name in entity_info.proxies.columns else
                        statistics.rank_multiple_correlation(values, proxies))
            overlap[name] = (best, closest, joint)
    return overlap


def _seed_pooled(runs: list[Run], l2: pd.DataFrame, info: dict[int, EntityInfo], method: str,
                 stratifier: str, cfg: AuditConfig) -> dict:
    """Permutation and lag-free tests of the seed-mean k* per entity; only meaningful when every seed has the same
    entities and stratifier values (real panels), since seeds are not independent draws of entities."""
    out = {"pooled_rho": np.nan, "pooled_p": np.nan, "pooled_lag_free_p": np.nan,
           "pooled_lag_free_median_abs_rho": np.nan, "pooled_note": ""}
    tested = set(l2.loc[(l2.method == method) & (l2.stratifier == stratifier) & l2.rho.notna(), "seed"])
    frames = [info[r.seed].stratifiers[stratifier] for r in runs if r.method == method and r.seed in tested]
    if len(frames) < 2:
        return {**out, "pooled_note": "fewer than two tested seeds"}
    if not all(f.equals(frames[0]) for f in frames[1:]):
        return {**out, "pooled_note": "n/a: entities or stratifier values differ across seeds"}
    kstar = pd.concat([r.lags.set_index("entity").kstar for r in runs if r.method == method and r.seed in tested],
                      axis=1).mean(axis=1)
    kstar, values, proxies = _aligned(kstar, info[min(tested)], stratifier)
    rng = np.random.default_rng([cfg.permutation_seed, 10_000])
    out["pooled_rho"], out["pooled_p"] = statistics.permutation_spearman(kstar, values, cfg.permutations, rng)
    out["pooled_lag_free_median_abs_rho"], out["pooled_lag_free_p"] = statistics.lag_free_p(
        kstar, values, proxies, cfg.permutations, rng)
    return out


def _l2_summary(runs, l2, info, proxy_names: set[str], cfg: AuditConfig, shared: bool) -> pd.DataFrame:
    overlap = _proxy_overlap(info)
    rows = []
    for (method, stratifier), g in l2.groupby(["method", "stratifier"], sort=False):
        tested = g[g.rho.notna()]
        signs = np.sign(tested.rho)
        pooled = _seed_pooled(runs, l2, info, method, stratifier, cfg)
        proxy_rho, closest, joint = overlap.get(stratifier, (np.nan, "", np.nan))
        fisher_p = statistics.fisher_combined(tested.p_perm)
        row = {
            "method": method, "kstar_kind": g.kstar_kind.iloc[0], "stratifier": stratifier,
            "circular": bool(stratifier in proxy_names or proxy_rho >= cfg.circular_threshold),
            "max_abs_spearman_with_proxy": proxy_rho, "closest_proxy": closest,
            "proxy_r_joint": joint,
            "circular_joint": bool(stratifier in proxy_names or joint >= cfg.circular_threshold),
            "seeds_tested": len(tested), "seeds_skipped": int((g.skipped != "").sum()),
            "mean_abs_rho": tested.rho.abs().mean(), "median_rho": tested.rho.median(),
            "share_p_below_alpha": (tested.p_perm < cfg.alpha).mean() if len(tested) else np.nan,
            "fisher_p": fisher_p, "fisher_valid": not shared,
            "sign_consistency": max((signs > 0).mean(), (signs < 0).mean()) if len(tested) else np.nan,
            **pooled,
            "lag_free_median_abs_rho": tested.lag_free_median_abs_rho.median(),
            # the calibrated rule's tests: on the seed-mean k* where seeds share entities, else Fisher over seeds
            "alignment_rho": pooled["pooled_rho"] if shared else tested.rho.median(),
            "alignment_p": pooled["pooled_p"] if shared else fisher_p,
            "lag_free_p": pooled["pooled_lag_free_p"] if shared else statistics.fisher_combined(tested.lag_free_p),
            "alignment_lag_free_median": (pooled["pooled_lag_free_median_abs_rho"] if shared
                                          else tested.lag_free_median_abs_rho.median()),
        }
        rows.append(row)
    summary = pd.DataFrame(rows)
    # the calibrated L2 needs both: k* aligned with the stratifier beyond chance, and beyond what the proxies give any
    # k* (NaN, no lag-free reference, passes nothing)
    summary["beyond_proxies_p"] = np.maximum(summary.alignment_p, summary.lag_free_p)
    summary["p_holm"] = np.nan
    for _, g in summary[~summary.circular_joint].groupby("method"):
        adjusted = statistics.holm(dict(zip(g.index, g.beyond_proxies_p, strict=True)))
        summary.loc[list(adjusted), "p_holm"] = list(adjusted.values())
    return summary


def _wilcoxon(l0: pd.DataFrame, l3: pd.DataFrame, reference: str) -> pd.DataFrame:
    per_seed = l0.set_index(["method", "seed"])[["mse", "r2_by_time"]].rename(
        columns={"mse": "test_mse", "r2_by_time": "test_r2_by_time"})
    if not l3.empty:
        per_seed = per_seed.join(l3.set_index(["method", "seed"])[["mae_lag_centre"]].rename(
            columns={"mae_lag_centre": "kstar_mae_lag_centre"}))
    methods = per_seed.index.get_level_values("method").unique()
    rows: list[dict] = []
    if reference not in methods:
        return pd.DataFrame(rows, columns=WILCOXON_COLUMNS)
    for metric in per_seed.columns:
        ref = per_seed.loc[reference, metric]
        for method in methods.drop(reference):
            row = statistics.paired_wilcoxon(per_seed.loc[method, metric], ref)
            if row["n_pairs"]:  # e.g. persistence has no k*
                rows.append({"metric": metric, "method": method, "reference": reference, **row})
    return pd.DataFrame(rows, columns=WILCOXON_COLUMNS)


def audit_domain(params: Params, runs_root: Path, data_root: Path, seeds: int = 0,
                 methods: list[str] | tuple[str, ...] = ()) -> AuditResult:
    """Run L0-L3, the paired tests and both sets of verdicts on the runs of seeds 0..``seeds``-1 (0: the params'
    ``n_seeds``) and ``methods`` (empty: the params' list) in ``runs/<domain>/``. Only runs that are current (trained
    under these params) and complete are audited; the others are listed in ``excluded`` with the reason."""
    cfg = params.audit
    unknown = [m for m in methods if m not in params.methods]
    if unknown:
        raise ValueError(f"method(s) {', '.join(unknown)} not in the params of domain '{params.domain}' "
                         f"({', '.join(params.methods)})")
    seed_list = list(range(seeds or params.n_seeds))
    panels = {seed: load_panel(data_root, params.domain, seed) for seed in seed_list}
    digests = {seed: prep.training_digest(panel, params, seed) for seed, panel in panels.items() if panel is not None}
    runs, excluded = load_runs(runs_root, params.domain, params.digest(), seed_list, list(methods or params.methods),
                               panels, digests)
    panels = {seed: panels[seed] for seed in sorted({r.seed for r in runs})}
    shared = shares_entities(panels)
    scored = scored_rows(runs, panels, params.model.max_lag)
    failed = failed_runs(scored)
    if len(failed):
        dropped = set(zip(failed.seed, failed.method, strict=True))
        runs = [r for r in runs if (r.seed, r.method) not in dropped]
        excluded = pd.concat([excluded, failed], ignore_index=True)
        scored = scored_rows(runs, panels, params.model.max_lag)
    l0 = pd.DataFrame([{"seed": seed, "method": method, **forecast_metrics(g.y.to_numpy(), g.y_hat.to_numpy(),
                                                                           g.time.to_numpy())}
                       for (seed, method), g in scored.groupby(["seed", "method"], sort=False)])
    tests, fitted = lag_tests.of_domain(panels, runs, params, shared)
    l1 = _l1(runs, cfg)
    info = {seed: EntityInfo.from_panel(panel) for seed, panel in panels.items()}
    proxy_names = {p for e in info.values() for p in e.proxies.columns}
    # L2 stratifies the runs' k*, and the GLS fit's where a classical reference ran (its calibrated L2 reads it)
    stratified = runs + fitted if {r.method for r in runs} & set(CLASSICAL) else runs
    l2 = _l2_rows(stratified, pd.concat([l1, _l1(fitted, cfg)], ignore_index=True), info, cfg)
    l2_summary = _l2_summary(stratified, l2, info, proxy_names, cfg, shared) if not l2.empty else pd.DataFrame()
    l3 = _l3(runs)
    audited = {r.method for r in runs}
    references = [r for r in dict.fromkeys((cfg.reference, *verdicts.REFERENCES)) if r == cfg.reference or r in audited]
    wilcoxon = pd.concat([_wilcoxon(l0, l3, r) for r in references], ignore_index=True)
    heldout = pd.concat([heldout_comparisons(scored, reference_config(cfg, r)) for r in references],
                        ignore_index=True)
    agreement = seed_agreement_table(runs, shared)
    columns = ["entity", "seed", "method", "kstar", "kstar_kind", "kstar_true"]
    kstar_by_entity = pd.concat([r.lags.reindex(columns=columns).assign(seed=r.seed, method=r.method)
                                 for r in runs], ignore_index=True)[columns]
    comparison = neural_vs_classical(heldout, l3, cfg)
    result = AuditResult(
        params.domain, cfg, l0, l1, l2, l2_summary, l3, wilcoxon, heldout, agreement, kstar_by_entity, comparison,
        tests, verdicts={}, verdicts_paper={},
        neural_vs_classical_verdict=comparison_verdict(comparison, cfg), excluded=excluded, kind=params.kind,
        shared_entities=shared, problems=_problems(runs, excluded, panels) + too_good_to_be_true(l0, params.kind),
        request=audit_request(params, seeds, methods), gate_memory=params.model.gate_memory)
    result.verdicts_by_reference = judge(result, cfg, references)
    result.verdicts = result.verdicts_by_reference[cfg.reference]["calibrated"]
    result.verdicts_paper = result.verdicts_by_reference[cfg.reference]["paper"]
    result.lags_differ = verdicts.lags_differ_verdict(cfg, result.lag_tests)
    return result


def reference_config(cfg: AuditConfig, reference: str) -> AuditConfig:
    """The audit settings under which ``reference`` is judged: ``cfg`` for ``audit.reference``, whose
    heterogeneity_comparators it names; the other reference takes its own family's twins."""
    return cfg if reference == cfg.reference else dataclasses.replace(cfg, reference=reference,
                                                                      heterogeneity_comparators=())


def judge(result: AuditResult, cfg: AuditConfig, references: list[str] | None = None) -> dict:
    """Both rule sets' verdicts for each reference (default: those ``result`` has) from its tables, under ``cfg``
    (the calibration judges the same audit again with audit.practical_sd at zero)."""
    references = references or list(result.verdicts_by_reference)
    tested = not result.l2.empty
    out = {}
    for reference in references:
        if result.l1.empty or not (result.l1.method == reference).any():  # none trained, or every one left out
            absent = {layer: verdicts.cell("not claimed", "a verdict needs audited runs of the reference",
                                           f"no runs of {reference} were audited (excluded_runs in verdicts.json "
                                           "says why)") for layer in verdicts.LAYERS}
            out[reference] = {"calibrated": _with_exclusions(absent, result.excluded), "paper": absent}
            continue
        c = reference_config(cfg, reference)
        # one panel for every seed (or one seed): the entities replicate a pair of seedless fits in L3
        one_panel = result.shared_entities or result.l1.seed.nunique() == 1
        entities = result.kstar_by_entity if one_panel else None
        cells = verdicts.calibrated_verdicts(c, result.l1, result.heldout, result.seed_agreement, result.l2_summary,
                                             result.l3, result.wilcoxon, tested, result.shared_entities,
                                             result.lag_tests, entities)
        out[reference] = {"calibrated": _with_exclusions(cells, result.excluded),
                          "paper": verdicts.paper_verdicts(c, result.l1, result.l2_summary, result.l3,
                                                           result.wilcoxon, tested)}
    return out


def _problems(runs: list[Run], excluded: pd.DataFrame, panels: dict[int, Panel]) -> list[str]:
    """What a reader of the verdicts must know: entities data preparation dropped (more than a fifth of those with
    the target), runs left out, and methods audited on different seeds."""
    problems = list(dict.fromkeys(p.meta["prep"]["warning"] for p in panels.values()
                                  if p.meta.get("prep", {}).get("warning")))
    if len(excluded):
        problems.append(f"{len(excluded)} run(s) left out of the audit: " + "; ".join(
            f"seed {r.seed:02d} {r.method}: {r.reason}" for r in excluded.itertuples()))
    by_method = {m: sorted(r.seed for r in runs if r.method == m) for m in dict.fromkeys(r.method for r in runs)}
    if len({tuple(s) for s in by_method.values()}) > 1:
        problems.append("methods have different seeds (" + "; ".join(f"{m}: {s}" for m, s in by_method.items())
                        + "); paired tests use the seeds both methods have")
    return problems


# a real panel forecast this well is a target leaked into a feature until shown otherwise; the repository's audits reach
# 0.943 on real panels (energy's Grouped ARDL, persistence 0.970), 0.948 on their panel-matched surrogates and 0.88 on
# simulated panels
IMPLAUSIBLE_R2 = 0.99


def too_good_to_be_true(l0: pd.DataFrame, kind: str) -> list[str]:
    """A problem (in a list, empty when none is due) naming the methods whose pooled test R2, mean over seeds, is
    above :data:`IMPLAUSIBLE_R2` and above persistence's on a real panel (``kind`` "data" or "proxy_shuffle"; a
    simulated panel is left alone, as its noise is the user's choice). Preparation stops a feature that copies the
    target at a shift of up to K steps; this catches, whatever the model, what that cannot see: a feature computed
    from the target, such as a sum or a moving average that includes it."""
    if kind == "synthetic" or l0.empty:
        return []
    r2 = l0.groupby("method", sort=False).r2_pooled.mean()
    floor = r2.get("persistence", np.nan)
    # a method no better than persistence learnt nothing it should not know; without a persistence score (NaN: a
    # target without spread in the test window) R2 alone decides
    suspects = r2[(r2 > IMPLAUSIBLE_R2) & ~(r2 <= floor) & (r2.index != "persistence")]
    if suspects.empty:
        return []
    named = ", ".join(f"{method} {value:.4f}" for method, value in suspects.items())
    return [f"implausibly good forecasts of real data: pooled test R2 {named} (mean over seeds; persistence "
            f"{floor:.4f}). A feature probably holds the target, e.g. a value computed from it or recorded after it; "
            "check data.features (prep already stops one that copies the target at a shift of up to model.max_lag "
            "steps), drop the culprit and rerun 01_data_prep and training. The verdicts of this audit are no "
            "evidence until then; if the target truly is this predictable from the features' past, disregard this"]


def _l1(runs: list[Run], cfg: AuditConfig) -> pd.DataFrame:
    """L1: the spread of k* across entities per seed and method, against the paper's epsilon and the practical sd;
    and the share of entities whose largest lag weight sits on the window's last lag K (lags that may reach past
    the window; NaN without a lag profile)."""
    l1 = pd.DataFrame([{"seed": r.seed, "method": r.method, "kstar_kind": r.lags.kstar_kind.iloc[0],
                        "kstar_sd": float(r.lags.kstar.std(ddof=0)), "share_at_window_edge": _at_edge(r.lags)}
                       for r in runs])
    l1["degenerate_paper"] = l1.kstar_sd <= cfg.epsilon
    l1["degenerate_practical"] = l1.kstar_sd <= cfg.practical_sd
    return l1


def _at_edge(lags: pd.DataFrame) -> float:
    """Share of entities whose lag profile omega_1..omega_K (K >= 2) is largest at lag K; NaN without one."""
    omega = lags.filter(regex=r"^omega_\d+$").to_numpy(dtype=float)
    usable = np.isfinite(omega).all(axis=1) & (omega.sum(axis=1) > 0) if omega.size else np.zeros(0, bool)
    if omega.shape[1] < 2 or not usable.any():
        return float("nan")
    return float(np.mean(np.argmax(omega[usable], axis=1) == omega.shape[1] - 1))


def _l3(runs: list[Run]) -> pd.DataFrame:
    """L3: MAE and Spearman of k* against each known truth, per seed and method (panels with a true lag only)."""
    return pd.DataFrame([{"seed": r.seed, "method": r.method,
                          **{f"{stat}_{truth}": value for truth, column in TRUTHS.items() if column in r.lags
                             for stat, value in l3_recovery(r.lags.kstar.to_numpy(),
                                                            r.lags[column].to_numpy()).items()}}
                         for r in runs if "kstar_true" in r.lags and r.lags.kstar_true.notna().any()])


def _with_exclusions(cells: dict, excluded: pd.DataFrame) -> dict:
    """Verdict cells with a warning when runs that were asked for could not be audited."""
    asked = excluded[~excluded.reason.str.contains(NOT_ASKED)]
    if asked.empty:
        return cells
    warning = (f"{len(asked)} run(s) asked for were left out (not trained, stale or incomplete: see excluded_runs "
               "in verdicts.json); the verdicts rest on the others")
    return {layer: {**cell, "warnings": [*cell.get("warnings", []), warning]} for layer, cell in cells.items()}
