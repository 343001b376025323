"""The layered lag audit (paper section V, Algorithm 1) over the run artifacts of one domain.

    result = audit_domain(params, runs_root="runs", data_root="data")
    result.write("runs/<domain>/audit")

Layers, per seed and method:

- L0 forecast: test MSE, MAE, R2 (pooled, and the paper's per-time cross-sectional R2);
- L1 degeneracy guard: sd_i(k*) against the paper's epsilon and against a practical threshold; seeds at or
  below epsilon are degenerate and skip L2;
- L2 stratifier alignment: Spearman(k*, stratifier) with an entity-label permutation null,
  p = (1 + #{|rho_b| >= |rho|}) / (B + 1); across seeds mean |rho|, median rho, share of p < alpha,
  Fisher-combined p, sign consistency, and a permutation test on the seed-mean k* where every seed has the
  same entities; stratifiers that duplicate a proxy are flagged circular;
- L3 (synthetic): MAE and Spearman of k* against the lag centre and against the DGP mean lag.

Across methods: paired Wilcoxon tests of seed-level metrics against the reference method (AC-GATE) on the
seeds both have, and the verdict matrix with the rule behind each cell.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from acgate.baselines import persistence
from acgate.config import AuditConfig, Params
from acgate.panel import Panel
from acgate.runs import atomic_write, write_json

VERDICTS = ("supported", "not certified", "ruled out", "not claimed")
WILCOXON_COLUMNS = ["metric", "method", "reference", "n_pairs", "mean_diff", "median_diff", "W", "p", "note"]


# --- statistics


def forecast_metrics(y: np.ndarray, y_hat: np.ndarray, time: np.ndarray) -> dict[str, float]:
    """L0 metrics of observed targets y (n,) against predictions y_hat (n,), with each row's time (n,).

    ``r2_pooled`` is 1 - SSE/SST over all rows; ``r2_by_time`` is the paper's cross-sectional R2,
    computed across entities at each time value and averaged over time values (times with fewer
    than two entities or no spread are skipped).
    """
    err = y_hat - y
    sst = np.sum((y - y.mean()) ** 2)
    per_time = []
    for t in np.unique(time):
        sel = time == t
        sst_t = np.sum((y[sel] - y[sel].mean()) ** 2)
        if sel.sum() >= 2 and sst_t > 0:
            per_time.append(1 - np.sum(err[sel] ** 2) / sst_t)
    return {
        "mse": float(np.mean(err**2)),
        "mae": float(np.mean(np.abs(err))),
        "r2_pooled": float(1 - np.sum(err**2) / sst) if sst > 0 else float("nan"),
        "r2_by_time": float(np.mean(per_time)) if per_time else float("nan"),
        "n": int(len(y)),
    }


def l3_recovery(kstar: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """L3: MAE and Spearman rho of learned k* (N,) against a true lag (N,).

    Spearman is undefined (NaN) when k* does not vary across entities (a collapsed gate ranks nothing; the
    paper prints 0 for such rows) or when the truth does not (the null scenario). Entities whose (diagnostic) k* is
    undefined, e.g. no single lag matters under occlusion, are left out.
    """
    defined = np.isfinite(kstar)
    kstar, truth = kstar[defined], truth[defined]
    if len(kstar) < 2:
        return {"mae": float("nan"), "spearman": float("nan")}
    mae = float(np.mean(np.abs(kstar - truth)))
    rho = float("nan") if np.ptp(kstar) == 0 or np.ptp(truth) == 0 else float(stats.spearmanr(kstar, truth).statistic)
    return {"mae": mae, "spearman": rho}


def _centred_ranks(values: np.ndarray) -> np.ndarray:
    r = stats.rankdata(values)
    r = r - r.mean()
    return r / np.sqrt(np.sum(r**2))


def permutation_spearman(kstar: np.ndarray, stratifier: np.ndarray, permutations: int,
                         rng: np.random.Generator) -> tuple[float, float]:
    """Spearman rho of k* (N,) and a stratifier (N,), and its entity-label permutation p-value
    p = (1 + #{b : |rho_b| >= |rho|}) / (B + 1), with the stratifier's labels shuffled B times.
    Both are NaN when either variable is constant."""
    if np.ptp(kstar) == 0 or np.ptp(stratifier) == 0:
        return float("nan"), float("nan")
    k, s = _centred_ranks(kstar), _centred_ranks(stratifier)  # Spearman = Pearson of (average) ranks
    rho = float(k @ s)
    shuffled = rng.permuted(np.broadcast_to(s, (permutations, len(s))), axis=1)  # (B, N)
    null = shuffled @ k
    exceed = int(np.sum(np.abs(null) >= abs(rho) - 1e-12))  # tolerance: ties in |rho| count as exceeding
    return rho, (1 + exceed) / (permutations + 1)


def fisher_combined(pvalues: np.ndarray) -> float:
    """Fisher's combination of independent p-values (scipy); NaN when there are none."""
    pvalues = np.asarray(pvalues, dtype=float)
    pvalues = pvalues[np.isfinite(pvalues)]
    return float(stats.combine_pvalues(pvalues, method="fisher").pvalue) if len(pvalues) else float("nan")


def paired_wilcoxon(values: pd.Series, reference: pd.Series) -> dict:
    """Two-sided paired Wilcoxon signed-rank test (scipy) of ``values - reference`` over the seeds (index)
    both have. W is scipy's statistic, min(W+, W-); differences are method minus reference."""
    both = pd.concat({"m": values, "r": reference}, axis=1).dropna()
    diff = both.m - both.r
    row = {"n_pairs": len(both), "mean_diff": diff.mean() if len(both) else np.nan,
           "median_diff": diff.median() if len(both) else np.nan, "W": np.nan, "p": np.nan, "note": ""}
    if len(both) == 0:
        row["note"] = "no common seeds"
    elif (diff == 0).all():
        row["note"] = "identical on every seed"
    else:
        test = stats.wilcoxon(both.m, both.r)
        row.update(W=float(test.statistic), p=float(test.pvalue))
    return row


# --- loading the artifacts of a domain


@dataclass
class Run:
    seed: int
    method: str
    metrics: dict
    lags: pd.DataFrame


@dataclass
class EntityInfo:
    stratifiers: pd.DataFrame  # index: entity
    proxies: pd.DataFrame  # index: entity

    @classmethod
    def from_panel(cls, panel: Panel) -> EntityInfo:
        return cls(panel.stratifiers, pd.DataFrame(panel.P, index=panel.entities, columns=panel.proxy_names))


def load_runs(runs_root: Path, domain: str) -> tuple[list[Run], list[str]]:
    """Every finished run of ``domain``, and a message for each incomplete one."""
    domain_dir = Path(runs_root) / domain
    if not domain_dir.is_dir():
        raise FileNotFoundError(f"no runs for domain '{domain}': {domain_dir} does not exist; train it first "
                                f"(notebooks/03_train.py, or the workflow: make paper CONFIG='domains=[{domain}]')")
    runs, problems = [], []
    for method_dir in sorted(domain_dir.glob("seed*/*/")):
        if not method_dir.name.isidentifier() or method_dir.parent.name == "audit":
            continue
        missing = [f for f in ("metrics.json", "lags.csv") if not (method_dir / f).is_file()]
        if missing:
            problems.append(f"{method_dir}: {', '.join(missing)} missing (run unfinished?); skipped")
            continue
        seed = int(method_dir.parent.name.removeprefix("seed"))
        runs.append(Run(seed, method_dir.name, json.loads((method_dir / "metrics.json").read_text()),
                        pd.read_csv(method_dir / "lags.csv", dtype={"entity": str})))
    if not runs:
        raise FileNotFoundError(f"no finished run under {domain_dir}" + "".join(f"; {p}" for p in problems))
    seeds = {m: sorted(r.seed for r in runs if r.method == m) for m in dict.fromkeys(r.method for r in runs)}
    if len({tuple(s) for s in seeds.values()}) > 1:
        problems.append("methods have different seeds (" + "; ".join(f"{m}: {s}" for m, s in seeds.items())
                        + "); paired tests use the seeds both methods have")
    return runs, problems


def load_panel(data_root: Path, domain: str, seed: int) -> Panel | None:
    """The panel a run was trained on (before any proxy shuffle): the per-seed synthetic panel
    (data/processed/<domain>/seed<NN>/) or the domain's panel (data/processed/<domain>/)."""
    processed = Path(data_root) / "processed" / domain
    for directory in (processed / f"seed{seed:02d}", processed):
        if (directory / "panel.json").is_file():
            return Panel.load(directory)
    return None


def load_entity_info(data_root: Path, domain: str, seed: int) -> EntityInfo | None:
    """Stratifiers and proxies of the panel a run was trained on."""
    panel = load_panel(data_root, domain, seed)
    return None if panel is None else EntityInfo.from_panel(panel)


def persistence_l0(panel: Panel, max_lag: int) -> dict[str, float]:
    """L0 test metrics of persistence (y_hat_t = y_{t-1}), the floor of any forecasting claim."""
    preds = persistence(panel, max_lag)
    test = preds[preds.split == "test"]
    return forecast_metrics(test.y.to_numpy(), test.y_hat.to_numpy(), test.time.to_numpy())


# --- the audit


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
    kstar_by_entity: pd.DataFrame
    verdicts: dict
    problems: list[str] = field(default_factory=list)

    def write(self, directory: Path) -> None:
        """The audit outputs of DESIGN section 4, each written atomically."""
        for name in AUDIT_TABLES:
            frame = getattr(self, name)
            atomic_write(Path(directory) / f"{name}.csv", lambda f, frame=frame: frame.to_csv(f, index=False))
        write_json(Path(directory) / "verdicts.json", {"domain": self.domain, "verdicts": self.verdicts,
                                                        "problems": self.problems, "audit": vars(self.config)})


AUDIT_TABLES = ("l0", "l1", "l2", "l2_summary", "l3", "wilcoxon", "kstar_by_entity")


def read_audit(directory: Path) -> AuditResult:
    """An audit written by :meth:`AuditResult.write`, read back."""
    directory = Path(directory)
    meta = json.loads((directory / "verdicts.json").read_text())

    def table(name: str) -> pd.DataFrame:
        try:
            return pd.read_csv(directory / f"{name}.csv", dtype={"entity": str})
        except pd.errors.EmptyDataError:
            return pd.DataFrame()

    return AuditResult(meta["domain"], AuditConfig(**meta["audit"]), *(table(n) for n in AUDIT_TABLES[:-1]),
                       kstar_by_entity=table("kstar_by_entity"), verdicts=meta["verdicts"], problems=meta["problems"])


def _l2_rows(runs: list[Run], l1: pd.DataFrame, info: dict[int, EntityInfo | None], cfg: AuditConfig) -> pd.DataFrame:
    rows = []
    degenerate = l1.set_index(["seed", "method"]).degenerate_paper
    for run in runs:
        entity_info = info.get(run.seed)
        if entity_info is None:
            continue
        for j, name in enumerate(entity_info.stratifiers.columns):
            row = {"seed": run.seed, "method": run.method, "kstar_kind": run.lags.kstar_kind.iloc[0],
                   "stratifier": name, "rho": np.nan, "p_perm": np.nan, "n_entities": 0,
                   "permutations": cfg.permutations, "skipped": ""}
            if degenerate[(run.seed, run.method)]:
                row["skipped"] = f"L1 degenerate (sd of k* <= epsilon = {cfg.epsilon:g})"
            else:
                joined = run.lags.set_index("entity")[["kstar"]].join(entity_info.stratifiers[[name]], how="inner")
                joined = joined.dropna()
                rng = np.random.default_rng([cfg.permutation_seed, run.seed, j])
                row["rho"], row["p_perm"] = permutation_spearman(joined.kstar.to_numpy(), joined[name].to_numpy(),
                                                                 cfg.permutations, rng)
                row["n_entities"] = len(joined)
            rows.append(row)
    return pd.DataFrame(rows)


def _proxy_overlap(info: dict[int, EntityInfo | None]) -> dict[str, tuple[float, str]]:
    """For each stratifier, the largest |Spearman| with any proxy over seeds, and that proxy's name."""
    overlap: dict[str, tuple[float, str]] = {}
    for entity_info in info.values():
        if entity_info is None:
            continue
        for name in entity_info.stratifiers.columns:
            for proxy in entity_info.proxies.columns:
                joined = pd.concat([entity_info.stratifiers[name], entity_info.proxies[proxy]], axis=1,
                                   join="inner").dropna()
                rho = 1.0 if name == proxy else abs(stats.spearmanr(joined.iloc[:, 0], joined.iloc[:, 1]).statistic)
                if rho > overlap.get(name, (-1.0, ""))[0]:
                    overlap[name] = (float(rho), proxy)
    return overlap


def _seed_pooled(runs: list[Run], l2: pd.DataFrame, info: dict[int, EntityInfo | None], method: str,
                 stratifier: str, cfg: AuditConfig) -> tuple[float, float, str]:
    """Permutation test of the seed-mean k* per entity; only meaningful when every seed has the same entities
    and stratifier values (real panels), since seeds are not independent draws of entities."""
    tested = set(l2.loc[(l2.method == method) & (l2.stratifier == stratifier) & l2.rho.notna(), "seed"])
    frames = [info[r.seed].stratifiers[stratifier] for r in runs if r.method == method and r.seed in tested]
    if len(frames) < 2:
        return np.nan, np.nan, "fewer than two tested seeds"
    if not all(f.equals(frames[0]) for f in frames[1:]):
        return np.nan, np.nan, "n/a: entities or stratifier values differ across seeds"
    kstar = pd.concat([r.lags.set_index("entity").kstar for r in runs if r.method == method and r.seed in tested],
                      axis=1).mean(axis=1)
    joined = kstar.to_frame("kstar").join(frames[0], how="inner").dropna()
    rng = np.random.default_rng([cfg.permutation_seed, 10_000])
    rho, p = permutation_spearman(joined.kstar.to_numpy(), joined[stratifier].to_numpy(), cfg.permutations, rng)
    return rho, p, ""


def _l2_summary(runs, l2, info, proxy_names: set[str], cfg: AuditConfig) -> pd.DataFrame:
    overlap = _proxy_overlap(info)
    rows = []
    for (method, stratifier), g in l2.groupby(["method", "stratifier"], sort=False):
        tested = g[g.rho.notna()]
        signs = np.sign(tested.rho)
        pooled_rho, pooled_p, pooled_note = _seed_pooled(runs, l2, info, method, stratifier, cfg)
        proxy_rho, closest = overlap.get(stratifier, (np.nan, ""))
        rows.append({
            "method": method, "kstar_kind": g.kstar_kind.iloc[0], "stratifier": stratifier,
            "circular": bool(stratifier in proxy_names or proxy_rho >= cfg.circular_threshold),
            "max_abs_spearman_with_proxy": proxy_rho, "closest_proxy": closest,
            "seeds_tested": len(tested), "seeds_skipped": int((g.skipped != "").sum()),
            "mean_abs_rho": tested.rho.abs().mean(), "median_rho": tested.rho.median(),
            "share_p_below_alpha": (tested.p_perm < cfg.alpha).mean() if len(tested) else np.nan,
            "fisher_p": fisher_combined(tested.p_perm),
            "sign_consistency": max((signs > 0).mean(), (signs < 0).mean()) if len(tested) else np.nan,
            "pooled_rho": pooled_rho, "pooled_p": pooled_p, "pooled_note": pooled_note,
        })
    return pd.DataFrame(rows)


def _wilcoxon(l0: pd.DataFrame, l3: pd.DataFrame, reference: str) -> pd.DataFrame:
    per_seed = l0.set_index(["method", "seed"])[["mse", "r2_by_time"]].rename(
        columns={"mse": "test_mse", "r2_by_time": "test_r2_by_time"})
    if not l3.empty:
        per_seed = per_seed.join(l3.set_index(["method", "seed"])[["mae_lag_centre"]].rename(
            columns={"mae_lag_centre": "kstar_mae_lag_centre"}))
    methods = per_seed.index.get_level_values("method").unique()
    rows = []
    if reference not in methods:
        return pd.DataFrame(rows, columns=WILCOXON_COLUMNS)
    for metric in per_seed.columns:
        ref = per_seed.loc[reference, metric]
        for method in methods.drop(reference):
            row = paired_wilcoxon(per_seed.loc[method, metric], ref)
            if row["n_pairs"]:  # e.g. persistence has no k*
                rows.append({"metric": metric, "method": method, "reference": reference, **row})
    return pd.DataFrame(rows, columns=WILCOXON_COLUMNS)


def audit_domain(params: Params, runs_root: Path, data_root: Path) -> AuditResult:
    """Run L0-L3, the paired tests and the verdicts on ``runs/<domain>/``; incomplete runs are reported in
    ``problems`` and left out, and the audit of what is complete still runs."""
    cfg = params.audit
    runs, problems = load_runs(runs_root, params.domain)
    seeds = sorted({r.seed for r in runs})
    panels = {seed: load_panel(data_root, params.domain, seed) for seed in seeds}
    test = [{"seed": r.seed, "method": r.method, **r.metrics["test"]} for r in runs]
    test += [{"seed": seed, "method": "persistence", **persistence_l0(panel, params.model.max_lag)}
             for seed, panel in panels.items() if panel is not None]
    l0 = pd.DataFrame(test)
    l1 = pd.DataFrame([{"seed": r.seed, "method": r.method, "kstar_kind": r.lags.kstar_kind.iloc[0],
                        "kstar_sd": float(r.lags.kstar.std(ddof=0))} for r in runs])
    l1["degenerate_paper"] = l1.kstar_sd <= cfg.epsilon
    l1["degenerate_practical"] = l1.kstar_sd <= cfg.practical_sd

    info = {seed: None if panel is None else EntityInfo.from_panel(panel) for seed, panel in panels.items()}
    for seed, entity_info in info.items():
        if entity_info is None:
            problems.append(f"seed {seed:02d}: no panel under {Path(data_root) / 'processed' / params.domain}; "
                            "L2 skipped for this seed")
    proxy_names = {p for e in info.values() if e is not None for p in e.proxies.columns}
    l2 = _l2_rows(runs, l1, info, cfg)
    l2_summary = _l2_summary(runs, l2, info, proxy_names, cfg) if not l2.empty else pd.DataFrame()

    l3 = pd.DataFrame([{"seed": r.seed, "method": r.method,
                        **{f"{stat}_{truth}": value for truth in ("lag_centre", "dgp_mean_lag")
                           for stat, value in l3_recovery(r.lags.kstar.to_numpy(),
                                                          r.lags[{"lag_centre": "kstar_true"}.get(truth, truth)]
                                                          .to_numpy()).items()}}
                       for r in runs if "kstar_true" in r.lags])
    wilcoxon = _wilcoxon(l0, l3, cfg.reference)
    columns = ["entity", "seed", "method", "kstar", "kstar_kind", "kstar_true"]
    kstar_by_entity = pd.concat([r.lags.reindex(columns=columns).assign(seed=r.seed, method=r.method)
                                 for r in runs], ignore_index=True)[columns]
    verdicts = decide(cfg, l1, l2_summary, l3, wilcoxon, has_stratifiers=not l2.empty)
    return AuditResult(params.domain, cfg, l0, l1, l2, l2_summary, l3, wilcoxon, kstar_by_entity, verdicts, problems)


# --- verdicts


def _cell(verdict: str, rule: str, evidence: str) -> dict:
    assert verdict in VERDICTS
    return {"verdict": verdict, "rule": rule, "evidence": evidence}


def decide(cfg: AuditConfig, l1: pd.DataFrame, l2_summary: pd.DataFrame, l3: pd.DataFrame,
           wilcoxon: pd.DataFrame, has_stratifiers: bool) -> dict:
    """The L0-L3 verdicts for the reference method, each with the rule that produced it."""
    ref, a = cfg.reference, cfg.alpha
    out = {}

    rule = (f"supported: {ref}'s test MSE is lower than every other method's with paired Wilcoxon p < {a}; "
            f"ruled out: some method's test MSE is lower than {ref}'s with p < {a}; else not certified")
    mse = wilcoxon[wilcoxon.metric == "test_mse"]
    if mse.empty:
        out["L0"] = _cell("not certified", rule, "no other method to compare with")
    else:
        better = mse[(mse.p < a) & (mse.mean_diff < 0)]
        worse = mse[(mse.p < a) & (mse.mean_diff > 0)]
        evidence = "; ".join(f"{r.method}: diff {r.mean_diff:+.4g}, p {r.p:.2g}" for r in mse.itertuples())
        verdict = ("ruled out" if len(better) else "supported" if len(worse) == len(mse) else "not certified")
        out["L0"] = _cell(verdict, rule, evidence)

    mine = l1[l1.method == ref]
    rule = (f"supported: sd_i(k*) > {cfg.practical_sd} (practical) in at least {cfg.l1_min_share:.0%} of seeds; "
            f"ruled out: sd_i(k*) <= epsilon = {cfg.epsilon:g} in every seed; else not certified")
    if mine.empty:
        out["L1"] = _cell("not claimed", rule, f"no runs of {ref}")
    else:
        share = (~mine.degenerate_practical).mean()
        evidence = (f"mean sd(k*) {mine.kstar_sd.mean():.3f}; non-degenerate seeds: {share:.0%} practical, "
                    f"{(~mine.degenerate_paper).mean():.0%} with the paper's epsilon")
        verdict = ("ruled out" if mine.degenerate_paper.all() else
                   "supported" if share >= cfg.l1_min_share else "not certified")
        out["L1"] = _cell(verdict, rule, evidence)

    rule = (f"supported: for some non-circular stratifier, Fisher p < {a}, at least half the seeds with permutation "
            f"p < {a}, and (where every seed has the same entities) seed-pooled p < {a}; ruled out: every seed "
            "L1-degenerate; else not certified")
    summary = l2_summary[l2_summary.method == ref] if not l2_summary.empty else l2_summary
    if not has_stratifiers:
        out["L2"] = _cell("not claimed", rule, "no stratifiers")
    elif summary.empty or summary.seeds_tested.sum() == 0:
        out["L2"] = _cell("ruled out", rule, "every seed L1-degenerate: nothing to stratify")
    else:
        passes = summary[(summary.fisher_p < a) & (summary.share_p_below_alpha >= 0.5)
                         & ~(summary.pooled_p >= a)]  # pooled p NaN (not applicable) does not block
        clean = passes[~passes.circular]
        evidence = "; ".join(f"{r.stratifier}{' (circular)' if r.circular else ''}: mean|rho| {r.mean_abs_rho:.3f}, "
                             f"share p<{a} {r.share_p_below_alpha:.2f}, Fisher p {r.fisher_p:.2g}"
                             for r in summary.itertuples())
        if len(passes) and clean.empty:
            evidence += "; only circular stratifiers pass"
        out["L2"] = _cell("supported" if len(clean) else "not certified", rule, evidence)

    rule = (f"supported: mean Spearman(k*, lag centre) >= {cfg.l3_min_spearman} and k* MAE lower than each "
            f"collapsed ablation's with paired Wilcoxon p < {a}; ruled out: mean Spearman < 0.2; else not certified "
            "(also when Spearman is undefined because k* or the truth is constant)")
    mine = l3[l3.method == ref] if not l3.empty else l3
    if mine.empty:
        out["L3"] = _cell("not claimed", rule, "no ground truth")
    else:
        rho = mine.spearman_lag_centre.mean()
        collapsed = wilcoxon[(wilcoxon.metric == "kstar_mae_lag_centre")
                             & wilcoxon.method.isin(["no_ac_encoder", "uniform_lag"])]
        beats = bool(((collapsed.p < a) & (collapsed.mean_diff > 0)).all())
        evidence = (f"mean Spearman {rho:.3f}, mean MAE {mine.mae_lag_centre.mean():.3f}; "
                    + ("; ".join(f"{r.method} MAE diff {r.mean_diff:+.3f}, p {r.p:.2g}" for r in collapsed.itertuples())
                       or "no collapsed ablation to compare with"))
        verdict = ("not certified" if np.isnan(rho) else "ruled out" if rho < 0.2 else
                   "supported" if rho >= cfg.l3_min_spearman and beats else "not certified")
        out["L3"] = _cell(verdict, rule, evidence)
    return out


def verdict_matrix(results: list[AuditResult]) -> pd.DataFrame:
    """Domains x layers: the verdict of each cell (rules and evidence are in each result's verdicts)."""
    return pd.DataFrame({r.domain: {layer: cell["verdict"] for layer, cell in r.verdicts.items()}
                         for r in results}).T.rename_axis("domain")


def proxy_shuffle_comparison(original: AuditResult, shuffled: AuditResult, method: str = "acgate") -> pd.DataFrame:
    """A domain and its proxy-shuffled twin side by side, per stratifier: mean |rho| and its drop, share of seeds
    with p < alpha, Fisher p, mean sd(k*) and mean test R2 (per-time)."""
    rows = []
    for label, result in (("original", original), ("proxy shuffle", shuffled)):
        summary = result.l2_summary[result.l2_summary.method == method]
        r2 = result.l0.loc[result.l0.method == method, "r2_by_time"].mean()
        sd = result.l1.loc[result.l1.method == method, "kstar_sd"].mean()
        for r in summary.itertuples():
            rows.append({"domain": result.domain, "run": label, "stratifier": r.stratifier,
                         "mean_abs_rho": r.mean_abs_rho, "share_p_below_alpha": r.share_p_below_alpha,
                         "fisher_p": r.fisher_p, "kstar_sd": sd, "test_r2_by_time": r2})
    table = pd.DataFrame(rows)
    if not table.empty:
        base = table[table.run == "original"].set_index("stratifier").mean_abs_rho
        table["mean_abs_rho_drop"] = table.stratifier.map(base) - table.mean_abs_rho
    return table
