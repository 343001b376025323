"""The paper's tables and figures, regenerated from the run artifacts and the audits (notebook 05_report).

Every table is a DataFrame of numbers (means and standard deviations in separate ``<x>_mean`` / ``<x>_sd``
columns) written as CSV for machines and as LaTeX and Markdown for readers, where each pair becomes one
"mean (sd)" cell. :data:`TABLES` lists them with the paper table each one regenerates; :data:`FIGURES` the
figures. :func:`reproduction` puts every number the paper reports (``paper_numbers.yaml``) next to ours.
"""

from __future__ import annotations

import json
import math
import textwrap
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
import yaml

from acgate import audit as audit_lib
from acgate.config import GATE_METHODS, METHODS
from acgate.runs import atomic_write, git_sha, machine, method_dir, package_versions
from acgate.sources import read_csv_ids
from acgate.statistics import format_p
from acgate.verdicts import LAYERS

LABELS = {"acgate": "AC-GATE", "no_recon_reg": "No-Recon-Reg", "no_ac_encoder": "No-AC-Encoder",
          "uniform_lag": "Uniform-Lag", "plain_lstm": "Plain LSTM", "tft": "TFT", "ganet": "GA-Net",
          "grouped_ardl": "Grouped ARDL", "persistence": "persistence", "shuffled_proxies": "Shuffled-Proxy Gate"}
P_COLUMNS = ("p", "fisher_p", "pooled_p", "fisher_p_min", "fisher_p_max", "p_seed_better", "p_entity_better",
             "holm_better", "holm_worse", "pooled_lag_free_p", "p_holm")
RESAMPLED_P = {"pooled_p": "permutations", "pooled_lag_free_p": "permutations", "p_entity_better": "bootstrap"}
UNDEFINED = "undefined"  # Spearman of a constant k* (or truth)

# readable names of the variables the paper's panels summarise; any other name reads with its underscores as spaces
VARIABLES = {"hc": "human capital", "log_gdp_per_worker": "log GDP per worker", "rl": "rule of law",
             "log_capital_per_worker": "log capital per worker", "ge": "government effectiveness",
             "rq": "regulatory quality", "log_gdp_per_capita": "log GDP per capita", "latent_z": "latent moderator z",
             "log_emp_hours": "log hours worked", "log_emp": "log employment", "log_rgdpna": "log real GDP",
             "log_ck": "log capital stock"}
SUMMARIES = {"mean": "mean", "trend": "trend of", "first": "first", "last": "last"}  # prep's prefixes
HEADERS = {  # readable column headers of the Markdown and LaTeX tables (the CSV keeps the column names)
    "kstar_kind": "k* kind", "test_mse": "test MSE", "mae_lag_centre": "k* MAE (lag centre)",
    "spearman_lag_centre": "Spearman (lag centre)", "mae_dgp_mean_lag": "k* MAE (DGP mean lag)",
    "spearman_dgp_mean_lag": "Spearman (DGP mean lag)", "kstar_sd": "sd(k*)", "median_seconds": "median seconds",
    "test_r2_by_time": "test R² (per year)", "test_r2_pooled": "test R² (pooled)", "omega_entropy": "ω entropy",
    "max_abs_spearman_with_proxy": "max |ρ| with a proxy", "mean_abs_rho": "mean |ρ|", "median_rho": "median ρ",
    "share_p_below_alpha": "share p < α", "fisher_p": "Fisher p", "fisher_p_min": "Fisher p min",
    "fisher_p_max": "Fisher p max", "pooled_rho": "pooled ρ", "proxy_r_joint": "proxy R (joint)",
    "pooled_lag_free_p": "lag-free p", "p_holm": "Holm p", "n_pairs": "pairs", "mean_abs_rho_drop": "drop in mean |ρ|",
    "p_seed_better": "p over seeds", "p_entity_better": "p over entities", "holm_better": "Holm p better",
    "holm_worse": "Holm p worse", "kstar_seed_agreement": "seed agreement of k*", "bootstrap": "bootstrap draws",
    "ac_encoder": "AC encoder", "ci_low": "95 % CI low", "ci_high": "95 % CI high",
    "mean_loss_diff": "mean loss difference", "mean_diff": "mean difference", "median_diff": "median difference",
}


def paper_numbers() -> dict:
    """The figures the paper reports (``lib/acgate/paper_numbers.yaml``)."""
    return yaml.safe_load(resources.files("acgate").joinpath("paper_numbers.yaml").read_text())


def readable(name: str) -> str:
    """A reader's label for a method, domain, stratifier or proxy id: the paper's method names, known variables
    from :data:`VARIABLES` ("mean_hc": "mean human capital"), any other id with its underscores as spaces, so a
    user's own names read as written."""
    if name in LABELS:
        return LABELS[name]
    if name.endswith("_proxy_shuffle"):
        return f"{readable(name.removesuffix('_proxy_shuffle'))} (proxy shuffle)"
    summary, _, column = name.partition("_")
    if summary in SUMMARIES and column:
        return f"{SUMMARIES[summary]} {VARIABLES.get(column, column.replace('_', ' '))}"
    return VARIABLES.get(name, name.replace("_", " "))


def header(column: str) -> str:
    """A table column's readable header (:data:`HEADERS`; "parameters_<domain>": "parameters, <domain>")."""
    if column.startswith("parameters_"):
        return f"parameters, {readable(column.removeprefix('parameters_'))}"
    return HEADERS.get(column, column.replace("_", " "))


def paper_domains(paper: dict | None = None) -> set[str]:
    """The domains the paper reports: its synthetic scenarios, its real panels and their proxy-shuffle twins."""
    paper = paper or paper_numbers()
    return ({f"synthetic_{s}" for s in paper["synthetic"]} | set(paper["real"])
            | {f"{d}_proxy_shuffle" for d in paper["real"]})


def of_kind(results: dict[str, audit_lib.AuditResult], kind: str) -> list[str]:
    """The audited domains of one kind ("synthetic", "data" or "proxy_shuffle"), from their params."""
    return [d for d, r in results.items() if r.kind == kind]


# --- reading the runs and audits


def metrics_row(metrics_file: Path) -> dict:
    """One run's metrics.json flattened to the columns the tables summarise."""
    m = json.loads(Path(metrics_file).read_text())
    row = {"test_mse": m["test"]["mse"], "test_r2_by_time": m["test"]["r2_by_time"],
           "test_r2_pooled": m["test"]["r2_pooled"], "kstar_sd": m["lags"]["kstar_sd"],
           "omega_entropy": m["lags"]["omega_entropy"], "gate_sensitivity": m["lags"]["gate_sensitivity"],
           "kstar_kind": m["lags"]["kstar_kind"], "epochs_run": m["epochs_run"], "seconds": m["seconds"]}
    for truth, l3 in m.get("l3", {}).items():
        row[f"mae_{truth}"], row[f"spearman_{truth}"] = l3["mae"], l3["spearman"]
    return row


def collect(runs_root: Path, result: audit_lib.AuditResult) -> pd.DataFrame:
    """One row per (seed, method) run that the audit ``result`` took (current and complete): the flattened
    metrics.json."""
    return pd.DataFrame([{"domain": result.domain, "seed": seed, "method": method,
                          **metrics_row(method_dir(runs_root, result.domain, seed, method) / "metrics.json")}
                         for seed, method in result.l1[["seed", "method"]].itertuples(index=False)])


def audits(runs_root: Path, domains: list[str]) -> dict[str, audit_lib.AuditResult]:
    """The written audits of ``domains`` (those without one are left out)."""
    found = {d: Path(runs_root) / d / "audit" for d in domains}
    return {d: audit_lib.read_audit(a) for d, a in found.items() if (a / "verdicts.json").is_file()}


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in the paper's method order (unknown methods last)."""
    order = {m: i for i, m in enumerate((*METHODS, "persistence"))}
    return frame.sort_values("method", key=lambda s: s.map(order).fillna(len(order)), kind="stable")


def _mean_sd(frame: pd.DataFrame, by: list[str], columns: list[str]) -> pd.DataFrame:
    grouped = frame.groupby(by, sort=False)[columns]
    out = grouped.mean().add_suffix("_mean").join(grouped.std(ddof=1).add_suffix("_sd"))
    return out[[f"{c}_{s}" for c in columns for s in ("mean", "sd")]].reset_index()


# --- the tables


def synthetic_summary(runs_root: Path, results: dict[str, audit_lib.AuditResult]) -> pd.DataFrame:
    """L0/L3 per synthetic domain and method over seeds (paper table app_synth_summary): test MSE, k* MAE and
    Spearman against the lag centre and against the DGP's mean lag, sd of k*."""
    frames = []
    domains = of_kind(results, "synthetic")
    for domain in domains:
        runs = collect(runs_root, results[domain])
        if runs.empty:
            continue
        columns = ["test_mse", "mae_lag_centre", "spearman_lag_centre", "mae_dgp_mean_lag", "spearman_dgp_mean_lag",
                   "kstar_sd"]
        table = _mean_sd(runs, ["method"], columns)
        seeds = runs.groupby("method", sort=False).agg(seeds=("seed", "size"), kstar_kind=("kstar_kind", "first"),
                                                        median_seconds=("seconds", "median"))
        frames.append(table.merge(seeds.reset_index(), on="method").assign(domain=domain))
    if not frames:
        return pd.DataFrame()
    table = _ordered(pd.concat(frames, ignore_index=True))
    table = table.sort_values("domain", key=lambda d: d.map(domains.index), kind="stable")  # then by domain
    first = ["domain", "method", "seeds", "kstar_kind"]
    return table[first + [c for c in table.columns if c not in first]].reset_index(drop=True)


def real_summary(runs_root: Path, audit: audit_lib.AuditResult) -> pd.DataFrame:
    """L0/L1 of a real domain (paper tables app_econ_compact / app_energy_compact): test R2 by time (the
    paper's) and pooled, mean sd(k*) across entities, omega entropy and gate sensitivity; the persistence
    forecast as the floor."""
    runs = collect(runs_root, audit)
    if runs.empty:
        return pd.DataFrame()
    table = _mean_sd(runs, ["method"], ["test_r2_by_time", "test_r2_pooled"])
    extra = runs.groupby("method", sort=False).agg(
        seeds=("seed", "size"), kstar_kind=("kstar_kind", "first"), kstar_sd=("kstar_sd", "mean"),
        omega_entropy=("omega_entropy", "mean"), gate_sensitivity=("gate_sensitivity", "mean"))
    table = table.merge(extra.reset_index(), on="method")
    floor = audit.l0[audit.l0.method == "persistence"]
    if not floor.empty:  # the same panel in every seed: one value
        table = pd.concat([table, pd.DataFrame([{
            "method": "persistence", "seeds": len(floor), "test_r2_by_time_mean": floor.r2_by_time.iloc[0],
            "test_r2_pooled_mean": floor.r2_pooled.iloc[0]}])], ignore_index=True)
    first = ["method", "seeds", "kstar_kind"]
    table = _ordered(table)
    return table[first + [c for c in table.columns if c not in first]].reset_index(drop=True)


def l2_table(audit: audit_lib.AuditResult) -> pd.DataFrame:
    """L2 of a real domain (paper tables app_econ_l2_full / app_energy_l2_full): the methods with a structural
    k* and at least one non-degenerate seed, every stratifier."""
    s = audit.l2_summary
    if s.empty:
        return s
    s = s[(s.kstar_kind == "structural") & (s.seeds_tested > 0)]
    columns = ["method", "stratifier", "circular", "closest_proxy", "max_abs_spearman_with_proxy", "seeds_tested",
               "mean_abs_rho", "median_rho", "share_p_below_alpha", "fisher_p", "sign_consistency", "pooled_rho",
               "pooled_p", "proxy_r_joint", "circular_joint", "pooled_lag_free_p", "p_holm"]
    return _ordered(s[columns]).reset_index(drop=True).assign(permutations=audit.config.permutations)


WILCOXON_TABLES = {  # name: metric, paper tables app_wilcoxon_*: the synthetic domains, the paper's real ones
    "wilcoxon_synthetic_kstar": "kstar_mae_lag_centre",
    "wilcoxon_synthetic_task_loss": "test_mse",
    "wilcoxon_real_r2": "test_r2_by_time",
}
OWN_WILCOXON = "wilcoxon_r2"  # <domain>_wilcoxon_r2: test R2 of a panel the paper does not report


def wilcoxon_table(results: dict[str, audit_lib.AuditResult], metric: str, domains: list[str]) -> pd.DataFrame:
    """Paired Wilcoxon tests of ``metric`` in ``domains``, each method against AC-GATE (difference = method -
    AC-GATE)."""
    frames = [results[d].wilcoxon[results[d].wilcoxon.metric == metric].assign(domain=d)
              for d in domains if not results[d].wilcoxon.empty]
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames, ignore_index=True)
    columns = ["domain", "method", "n_pairs", "mean_diff", "median_diff", "W", "p", "note"]
    return table[columns].reset_index(drop=True)


def proxy_shuffle_table(results: dict[str, audit_lib.AuditResult]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The proxy-shuffle control (paper table proxy_shuffle_compact): per domain, AC-GATE on the original and on
    the shuffled proxies, averaged over stratifiers (Fisher p as its range); and the per-stratifier detail."""
    details = [audit_lib.proxy_shuffle_comparison(results[d], results[f"{d}_proxy_shuffle"])
               for d in of_kind(results, "data") if f"{d}_proxy_shuffle" in results]
    details = [d for d in details if not d.empty]
    if not details:
        return pd.DataFrame(), pd.DataFrame()
    detail = pd.concat(details, ignore_index=True)
    detail["domain"] = detail.domain.str.removesuffix("_proxy_shuffle")
    compact = detail.groupby(["domain", "run"], sort=False).agg(
        mean_abs_rho=("mean_abs_rho", "mean"), kstar_sd=("kstar_sd", "first"),
        share_p_below_alpha=("share_p_below_alpha", "mean"), fisher_p_min=("fisher_p", "min"),
        fisher_p_max=("fisher_p", "max"), test_r2_by_time=("test_r2_by_time", "first")).reset_index()
    return compact, detail


@dataclass(frozen=True)
class Design:
    ac_encoder: str
    lag_gate: str
    reconstruction: str
    difference: str


DESIGN = {  # paper table fair_baselines; the facts are those of acgate.models / acgate.baselines
    "acgate": Design("yes", "learned", "yes", "full model: AC encoder + lag gate + reconstruction"),
    "plain_lstm": Design("no", "none", "no", "same backbone capacity, fed the K lags directly; no encoder, no gate"),
    "tft": Design("no", "none", "no", "temporal fusion transformer: static covariates, variable selection, "
                  "temporal self-attention over the K lags"),
    "ganet": Design("no", "none", "no", "gated-attention network over the K lags"),
    "no_ac_encoder": Design("no (z fixed)", "learned", "yes", "z_i fixed: no entity-conditioned lag"),
    "uniform_lag": Design("yes", "uniform 1/K", "yes", "omega_ik = 1/K: no learned lag heterogeneity"),
    "no_recon_reg": Design("yes", "learned", "no", "lambda_r = 0: no reconstruction regulariser"),
    "shuffled_proxies": Design("yes (proxies permuted)", "learned", "yes", "AC-GATE on proxies permuted across "
                               "entities: the comparator of the calibrated heterogeneity verdict"),
    "grouped_ardl": Design("no", "none", "no", "real panels only: OLS distributed-lag model per training-window "
                           "group"),
}


def controlled_comparison(runs_root: Path, results: dict[str, audit_lib.AuditResult]) -> pd.DataFrame:
    """The controlled-comparison design (paper table fair_baselines): what each method changes, and its number
    of trainable parameters read off a saved model, on the first synthetic domain and on each real domain (the
    proxy-shuffle twins have their base domain's models)."""
    domains = of_kind(results, "synthetic")[:1] + of_kind(results, "data")
    trained = {m for r in results.values() for m in r.l1.method}
    rows = []
    for method, design in ((m, d) for m, d in DESIGN.items() if m in trained):
        row = {"method": method, "ac_encoder": design.ac_encoder, "lag_gate": design.lag_gate,
               "reconstruction": design.reconstruction, "difference": design.difference}
        for domain in domains:
            seeds = results[domain].l1.query("method == @method").seed
            if seeds.empty:
                continue
            state = method_dir(runs_root, domain, int(seeds.min()), method) / "model.pt"
            if state.is_file():
                tensors = torch.load(state, map_location="cpu", weights_only=True)
                row[f"parameters_{domain}"] = int(sum(t.numel() for k, t in tensors.items() if k != "position"))
        rows.append(row)
    return pd.DataFrame(rows)


def excluded_runs(results: dict[str, audit_lib.AuditResult]) -> pd.DataFrame:
    """Every run folder an audit left out (not trained, stale, incomplete or not asked for), with the reason."""
    frames = [r.excluded.assign(domain=d) for d, r in results.items() if not r.excluded.empty]
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)[["domain", *audit_lib.EXCLUDED_COLUMNS]]


def verdict_table(results: dict[str, audit_lib.AuditResult]) -> pd.DataFrame:
    """Domains x layers: the verdict for AC-GATE under the paper's rules (paper table verdict_matrix) beside the
    calibrated rules', one column per layer and rule ("L2 paper", "L2 calibrated")."""
    if not results:
        return pd.DataFrame()
    matrix = audit_lib.verdict_matrix(list(results.values()))
    matrix.columns = [f"{layer} {rule}" for rule, layer in matrix.columns]
    return matrix[[f"{layer} {rule}" for layer in LAYERS for rule in ("paper", "calibrated")]].reset_index()


def heldout_table(results: dict[str, audit_lib.AuditResult]) -> pd.DataFrame:
    """Per domain and comparator: AC-GATE's held-out test loss against the comparator's on the same rows (the
    evidence of the calibrated L0 and L1), with the seed-to-seed agreement of AC-GATE's k* ordering."""
    frames = []
    for domain, result in results.items():
        if result.heldout.empty:
            continue
        agreement = result.seed_agreement.set_index("method").reindex([result.config.reference])
        frames.append(result.heldout.assign(
            domain=domain, shared_entities=result.shared_entities, bootstrap=result.config.bootstrap,
            kstar_seed_agreement=agreement.median_rho.iloc[0]))
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames, ignore_index=True)
    return table[["domain", "comparator", "seeds", "entities", "mean_loss_diff", "p_seed_better", "p_entity_better",
                  "holm_better", "holm_worse", "shared_entities", "kstar_seed_agreement", "bootstrap"]]


# --- the reproduction table


def _find(frame: pd.DataFrame, column: str, **match) -> float:
    if frame.empty or column not in frame:
        return math.nan
    rows = frame
    for key, value in match.items():
        rows = rows[rows[key] == value]
    return float(rows[column].iloc[0]) if len(rows) else math.nan


NOT_COMPARABLE = {  # (paper table or "*", row substring or "", quantity prefix): why the two numbers differ in kind
    ("fig_case_study", "", "p"): "no: the paper's p is scipy's asymptotic Spearman p, ours a permutation p whose "
                                  "floor is 1/2001",
    ("*", "", "fisher_p"): "no: the paper's authors combined permutation p without the +1 and clipped at 1e-6; "
                           "ours are at least 1/2001 per seed, so Fisher over 20 seeds floors at 2.5e-42",
    ("text", "", "grouped_ardl"): "no: the authors' Grouped ARDL had no lagged target and included x_t; ours is an "
                                  "ARDL(K, K) of the lags only",
    ("*", "grouped_ardl", ""): "no: the authors' Grouped ARDL had no lagged target and included x_t; ours is an "
                               "ARDL(K, K) of the lags only",
    ("*", "", "gate_sensitivity"): "no: the paper's statistic gives the fixed gate of Uniform-Lag a non-zero value, "
                                   "so it is not the k* range over the 5th-95th percentile of z used here",
}


def comparability(table: str, row: str, quantity: str) -> str:
    """'yes', or why the paper's number and ours are different statistics."""
    for (where, in_row, prefix), why in NOT_COMPARABLE.items():
        if where in (table, "*") and in_row in row and quantity.startswith(prefix):
            return why
    return "yes"


def reproduction(tables: dict[str, pd.DataFrame], results: dict[str, audit_lib.AuditResult],
                 paper: dict | None = None) -> pd.DataFrame:
    """Every number the paper reports about the domains in ``results`` next to ours: one row per (paper table,
    row, quantity) with the paper's value, ours (NaN where we have no counterpart run) and ours - paper. Verdicts
    compare as text. Empty when no domain of the paper was audited."""
    paper = paper or paper_numbers()
    rows: list[dict] = []

    def add(table: str, row: str, quantity: str, theirs, ours, domains: tuple[str, ...]) -> None:
        if not set(domains) <= set(results):  # a number about a domain that was not run
            return
        if isinstance(theirs, str):
            diff = "same" if theirs == ours else "differs"
        else:
            diff = ours - theirs if not (isinstance(ours, float) and math.isnan(ours)) else math.nan
        rows.append({"paper_table": table, "row": row, "quantity": quantity, "paper": theirs, "ours": ours,
                     "difference": diff, "comparable": comparability(table, row, quantity)})

    synth = tables.get("synthetic_summary", pd.DataFrame())
    ours_of = {"task_loss": "test_mse", "kstar_mae": "mae_lag_centre", "spearman": "spearman_lag_centre"}
    for scenario, methods in paper["synthetic"].items():
        for method, values in methods.items():
            for key, theirs in values.items():
                base, stat = (key[:-3], "sd") if key.endswith("_sd") else (key, "mean")
                ours = _find(synth, f"{ours_of[base]}_{stat}", domain=f"synthetic_{scenario}", method=method)
                add("app_synth_summary", f"{scenario} {method}", key, theirs, ours, (f"synthetic_{scenario}",))

    real_of = {"test_r2": "test_r2_by_time_mean", "test_r2_sd": "test_r2_by_time_sd", "kstar_sd": "kstar_sd",
               "omega_entropy": "omega_entropy", "gate_sensitivity": "gate_sensitivity"}
    for domain, methods in paper["real"].items():
        summary = tables.get(f"{domain}_summary", pd.DataFrame())
        for method, values in methods.items():
            for key, theirs in values.items():
                add(f"app_{domain}_compact", f"{domain} {method}", key, theirs,
                    _find(summary, real_of[key], method=method), (domain,))

    for domain, methods in paper["l2"].items():
        l2 = tables.get(f"{domain}_l2", pd.DataFrame())
        for method, strata in methods.items():
            for stratifier, values in strata.items():
                for key, theirs in values.items():
                    add(f"app_{domain}_l2_full", f"{domain} {method} {stratifier}", key, theirs,
                        _find(l2, key, method=method, stratifier=stratifier), (domain,))

    for name, groups in paper["wilcoxon"].items():
        metric = WILCOXON_TABLES[f"wilcoxon_{name}"]
        for group, methods in groups.items():
            domain = f"synthetic_{group}" if name.startswith("synthetic") else group
            table = results[domain].wilcoxon if domain in results else pd.DataFrame()
            for method, values in methods.items():
                for key, theirs in values.items():
                    add(f"app_wilcoxon_{name}", f"{group} {method}", key, theirs,
                        _find(table, key, metric=metric, method=method), (domain,))

    compact = tables.get("proxy_shuffle", pd.DataFrame())
    for domain, runs in paper["proxy_shuffle"].items():
        for run, values in runs.items():
            label = "original" if run == "original" else "proxy shuffle"
            for key, theirs in values.items():
                column = "test_r2_by_time" if key == "test_r2" else key
                add("proxy_shuffle_compact", f"{domain} {run}", key, theirs,
                    _find(compact, column, domain=domain, run=label), (domain, f"{domain}_proxy_shuffle"))

    for domain, case in paper["case_study"].items():
        l2 = tables.get(f"{domain}_l2", pd.DataFrame())
        for key, column in (("spearman", "pooled_rho"), ("p", "pooled_p")):
            add("fig_case_study", f"{domain} {case['stratifier']} (seed-mean k*)", key, case[key],
                _find(l2, column, method="acgate", stratifier=case["stratifier"]), (domain,))

    matrix = tables.get("verdict_matrix", pd.DataFrame())
    for row, cells in paper["verdicts"].items():
        for domain in ([f"synthetic_{s}" for s in ("linear", "nonlinear")] if row == "synthetic" else [row]):
            found = matrix[matrix.domain == domain] if not matrix.empty else matrix
            for layer, theirs in cells.items():
                add("verdict_matrix", domain, layer, theirs, found[f"{layer} paper"].iloc[0] if len(found) else "",
                    (domain,))

    for domain in ("economics", "energy"):
        l2 = tables.get(f"{domain}_l2", pd.DataFrame())
        share = l2[l2.method == "acgate"].share_p_below_alpha if not l2.empty else pd.Series(dtype=float)
        for stat in ("min", "max"):
            key = f"{domain}_share_p_below_alpha_{stat}"
            if key in paper["text"]:
                add("text", f"{domain} AC-GATE, over stratifiers", key, paper["text"][key],
                    float(getattr(share, stat)()) if len(share) else math.nan, (domain,))
        key = f"grouped_ardl_test_r2_{domain}"
        if key in paper["text"]:
            add("text", f"{domain} grouped_ardl", key, paper["text"][key],
                _find(tables.get(f"{domain}_summary", pd.DataFrame()), "test_r2_by_time_mean", method="grouped_ardl"),
                (domain,))
    deep = [t[t.method.isin(GATE_METHODS + ("plain_lstm", "tft", "ganet"))].test_r2_by_time_mean
            for d in ("economics", "energy") if not (t := tables.get(f"{d}_summary", pd.DataFrame())).empty]
    deep = pd.concat(deep) if deep else pd.Series(dtype=float)
    for key, stat in (("r2_floor_band_low", "min"), ("r2_floor_band_high", "max")):
        if key in paper["text"]:
            add("text", "deep methods' mean test R2, both domains", key, paper["text"][key],
                float(getattr(deep, stat)()) if len(deep) else math.nan, ("economics", "energy"))
    return pd.DataFrame(rows)


# --- writing tables


def _format(value, column: str) -> str:
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return UNDEFINED if "spearman" in column else ""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(value)
    if column in P_COLUMNS or column.endswith("_p"):
        return f"{value:.2g}"
    text = f"{value:.4f}" if ("mse" in column or "loss" in column) else f"{value:.3f}"
    return text.removeprefix("-") if float(text) == 0 else text  # never "-0.000"


def display(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as text for readers: each ``<x>_mean`` / ``<x>_sd`` pair becomes one "mean (sd)" column
    ``<x>``, methods get the paper's names and variables readable ones (:func:`readable`), numbers a fixed precision
    per column (p-values two significant digits; never a negative zero)."""
    out = pd.DataFrame(index=frame.index)
    for column in frame.columns:
        if column.endswith("_sd") and column[:-3] + "_mean" in frame:
            continue
        if column.endswith("_mean") and (sd := column[:-5] + "_sd") in frame:
            name = column[:-5]
            out[name] = [_format(m, name) + ("" if isinstance(s, float) and math.isnan(s) else f" ({_format(s, name)})")
                         if not (isinstance(m, float) and math.isnan(m)) else _format(m, name)
                         for m, s in zip(frame[column], frame[sd], strict=True)]
        elif column in ("method", "comparator"):
            out[column] = frame[column].map(lambda m: LABELS.get(m, m))
        elif column in ("stratifier", "closest_proxy"):
            out[column] = frame[column].map(readable)
        elif column in ("paper", "ours", "difference") and "quantity" in frame:  # reproduction: as its quantity
            out[column] = [_format(v, q) for v, q in zip(frame[column], frame.quantity, strict=True)]
        elif (draws := RESAMPLED_P.get(column)) in frame:  # a resampling p at its floor prints as "<= 1/(B+1)"
            out[column] = [format_p(v, int(b)) for v, b in zip(frame[column], frame[draws], strict=True)]
        else:
            out[column] = [_format(v, column) for v in frame[column]]
    return out


TEXT_WIDTH = 6.5  # inches: LaTeX tables are laid out for a page of this text width, in \small
GLYPH = {"upper": 0.09, "digit": 0.0625, "other": 0.055}  # inches per character in \small (Computer Modern, 9 pt)
PAD = 8 / 72  # inches: the two \tabcolsep of 4 pt around each column
WRAP = 1.6, 0.9  # inches: text wider than the first wraps (a p{} column), never narrower than the second
KEYS = ("domain", "method", "comparator", "stratifier", "run", "scenario", "control", "rule", "layer", "paper_table",
        "row")  # leading columns like these name a row, and repeat in each part of a table split for width
TEX_CHARS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "{": r"\{", "}": r"\}",
             "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "_": r"\_\allowbreak{}"}
TEX_SYMBOLS = (("<=", r"$\leq$"), ("|ρ|", r"$|\rho|$"), ("ρ", r"$\rho$"), ("α", r"$\alpha$"), ("ω", r"$\omega$"),
               ("R²", "$R^2$"), ("k*", r"$k^\star$"), ("<", "$<$"), (">", "$>$"))


def _tex(text: str) -> str:
    """Plain text as LaTeX: special characters escaped (underscores may break a line), the tables' symbols in
    math mode."""
    out = "".join(TEX_CHARS.get(c, c) for c in text)
    for plain, tex in TEX_SYMBOLS:
        out = out.replace(plain, tex)
    return out


def _is_number(frame: pd.DataFrame, column: str) -> bool:
    """Whether a column of :func:`display` shows numbers (right-aligned): a numeric column of ``frame`` that is
    not yes/no, or a "mean (sd)" pair."""
    return column not in frame or (pd.api.types.is_numeric_dtype(frame[column])
                                   and not pd.api.types.is_bool_dtype(frame[column]))


def _header_lines(column: str) -> list[str]:
    return textwrap.wrap(header(column), 12, break_long_words=False) or [""]


def _printed(text: str) -> float:
    """The estimated printed width of ``text`` in inches (:data:`GLYPH`)."""
    return sum(GLYPH["upper" if c.isupper() else "digit" if c.isdigit() else "other"] for c in text)


def _column_specs(frame: pd.DataFrame, shown: pd.DataFrame) -> dict[str, tuple[str, float]]:
    """Per column of ``shown``: its LaTeX column type and its printed width in inches (without padding), estimated
    from its longest line. Numbers align right, text left; text wider than ``WRAP[0]`` wraps in a p{} column, whose
    width is what the page leaves (at least ``WRAP[1]``; at most ``WRAP[0]`` if the table is split anyway)."""
    natural = {c: max(map(_printed, [*_header_lines(c), *shown[c]])) for c in shown}
    numeric = {c: _is_number(frame, c) for c in shown}
    wrapped = [c for c in shown if not numeric[c] and natural[c] > WRAP[0]]
    share = (TEXT_WIDTH - sum(natural[c] + PAD for c in shown if c not in wrapped) - PAD * len(wrapped)) / max(
        len(wrapped), 1)
    width = round(share if share >= WRAP[1] else WRAP[0], 2)
    return {c: (f"p{{{width}in}}", width) if c in wrapped else ("r" if numeric[c] else "l", natural[c])
            for c in shown}


def _parts(specs: dict[str, tuple[str, float]]) -> list[list[str]]:
    """The columns of each part of a table too wide for :data:`TEXT_WIDTH`: the leading row-naming columns
    (:data:`KEYS`) in every part, the others in order, in as few parts as fit, of even widths."""
    columns = list(specs)
    keys = columns[:next((i for i, c in enumerate(columns) if c not in KEYS), len(columns))]
    rest = [specs[c][1] + PAD for c in columns[len(keys):]]
    room = TEXT_WIDTH - sum(specs[k][1] + PAD for k in keys)
    for n in range(1, len(rest) + 1):  # n parts, each closed once it holds its share of the widths
        parts, width = [[]], 0.0
        for column, w in zip(columns[len(keys):], rest, strict=True):
            if parts[-1] and (width + w > room or width >= sum(rest) / n):
                parts, width = [*parts, []], 0.0
            parts[-1].append(column)
            width += w
        if len(parts) <= n:
            return [keys + part for part in parts]
    return [keys + [c] for c in columns[len(keys):]] or [keys]


def _tabular_body(shown: pd.DataFrame, columns: list[str], specs: dict[str, tuple[str, float]]) -> tuple[str, str]:
    """The column types and the header and body rows of ``columns``, between the booktabs rules."""
    heads = " & ".join(rf"\begin{{tabular}}[b]{{@{{}}{'r' if specs[c][0] == 'r' else 'l'}@{{}}}}"
                       + r"\\".join(_tex(line) for line in _header_lines(c)) + r"\end{tabular}" for c in columns)
    rows = "\n".join(" & ".join(_tex(v) for v in row) + r" \\" for row in shown[columns].itertuples(index=False))
    return "".join(specs[c][0] for c in columns), f"\\toprule\n{heads} \\\\\n\\midrule\n{rows}\n\\bottomrule"


def latex_table(frame: pd.DataFrame, name: str, caption: str) -> str:
    r"""The table as LaTeX (booktabs, \small, caption and label ``tab:<name>``) with readable headers. A table wider
    than :data:`TEXT_WIDTH` is split into parts (a), (b), ... that repeat the row-naming columns; one of more than
    40 rows in all is a longtable (one per part)."""
    shown = display(frame)
    specs = _column_specs(frame, shown)
    parts = _parts(specs)
    long = len(frame) * len(parts) > 40  # more rows than a page holds
    blocks = []
    for n, columns in enumerate(parts):
        spec, body = _tabular_body(shown, columns, specs)
        part = f" ({chr(ord('a') + n)})" if len(parts) > 1 else ""
        if long:
            title = rf"\caption{{{_tex(caption)}{part}}}" + (rf"\label{{tab:{name}}}" if n == 0 else "")
            head, rest = body.split("\\midrule\n", 1)  # the column heads open the first page and repeat
            blocks.append(("\\addtocounter{table}{-1}\n" if n else "")  # one table number for all its parts
                          + f"\\begin{{longtable}}{{{spec}}}\n{title}\\\\\n{head}\\midrule\n\\endfirsthead\n"
                          f"{head}\\midrule\n\\endhead\n{rest}\n\\end{{longtable}}")
        else:
            blocks.append((f"\\par\\medskip{part.strip()}\\par\n" if part else "")
                          + f"\\begin{{tabular}}{{{spec}}}\n{body}\n\\end{{tabular}}")
    if long:
        return "{\\small\\setlength{\\tabcolsep}{4pt}\n" + "\n".join(blocks) + "\n}\n"
    return (f"\\begin{{table}}\n\\centering\n\\small\n\\setlength{{\\tabcolsep}}{{4pt}}\n\\caption{{{_tex(caption)}}}"
            f"\n\\label{{tab:{name}}}\n" + "\n".join(blocks) + "\n\\end{table}\n")


def markdown_table(frame: pd.DataFrame, caption: str) -> str:
    """The caption and the table as Markdown: readable headers, each column as :func:`display` formats it
    (numbers right-aligned)."""
    shown = display(frame)
    align = ["right" if _is_number(frame, c) else "left" for c in shown]
    table = shown.rename(columns=lambda c: header(c).replace("|", "\\|")).to_markdown(  # "|" would end a cell
        index=False, disable_numparse=True, colalign=align)
    return f"{caption}\n\n{table}\n"


def write_table(frame: pd.DataFrame, directory: Path, name: str, caption: str) -> list[Path]:
    """``<name>.csv`` (the numbers, under the column names), ``<name>.tex`` (:func:`latex_table`) and
    ``<name>.md`` (:func:`markdown_table`) in ``directory``, each written atomically."""
    directory = Path(directory)
    paths = [directory / f"{name}.{ext}" for ext in ("csv", "tex", "md")]
    atomic_write(paths[0], lambda f: frame.to_csv(f, index=False))
    atomic_write(paths[1], lambda f: f.write(latex_table(frame, name, caption)))
    atomic_write(paths[2], lambda f: f.write(markdown_table(frame, caption)))
    return paths


# --- figures


def save_figure(fig: plt.Figure, directory: Path, name: str) -> list[Path]:
    """``<name>.png`` and ``<name>.pdf`` in ``directory``, each written atomically."""
    paths = [Path(directory) / f"{name}.{ext}" for ext in ("png", "pdf")]
    for path in paths:  # no creation date in the PDF, so an unchanged figure gives an unchanged file
        atomic_write(path, lambda f, ext=path.suffix[1:]: fig.savefig(f, format=ext, dpi=200, bbox_inches="tight",
                                                                     metadata={"CreationDate": None} if ext == "pdf"
                                                                     else None), binary=True)
    return paths


PAGE_WIDTH = 7.0  # inches: figures are drawn at the printed width of a page, so their fonts print at these sizes
STYLE = {"font.size": 8, "axes.titlesize": 8.5, "axes.labelsize": 8, "xtick.labelsize": 7.5, "ytick.labelsize": 7.5,
         "legend.fontsize": 7.5, "legend.title_fontsize": 7.5}  # pt; nothing smaller than 7 pt
COLOURS = sns.color_palette("colorblind")  # colour-blind safe, for every categorical colour


def _case_study_panels(results: dict[str, audit_lib.AuditResult], paper: dict) -> list[tuple[str, pd.Series]]:
    """(domain, AC-GATE's L2 summary row) per case-study panel: per real domain the paper's stratifier, and when
    that one is circular or absent (a user's panel) the strongest non-circular one."""
    panels = []
    for domain, result in results.items():
        summary = result.l2_summary[result.l2_summary.method == "acgate"] if not result.l2_summary.empty else None
        if result.kind != "data" or summary is None or summary.empty:
            continue
        named = paper["case_study"].get(domain, {}).get("stratifier")
        chosen = [named] if named in set(summary.stratifier) else []
        clean = summary[~summary.circular]
        if (not chosen or summary.set_index("stratifier").circular[named]) and not clean.empty:
            chosen.append(clean.loc[clean.mean_abs_rho.idxmax(), "stratifier"])
        panels += [(domain, summary[summary.stratifier == c].iloc[0]) for c in dict.fromkeys(chosen)]
    return panels


def quantile_medians(x: pd.Series, y: pd.Series, bins: int = 5) -> pd.DataFrame:
    """The median of x and of y within each quantile bin of x: a rank-based trend (as the Spearman rho is) that
    stays within the data, where a straight line would leave the range k* can take."""
    groups = pd.qcut(x.rank(method="first"), min(bins, len(x)), labels=False)
    return pd.DataFrame({"x": x, "y": y}).groupby(groups).median()


def case_study_figure(results: dict[str, audit_lib.AuditResult], data_root: Path, paper: dict | None = None
                      ) -> plt.Figure | None:
    """Stratifier against the seed-mean AC-GATE k* per entity (paper figure case_study_panel), with the
    seed-pooled Spearman rho and permutation p of the audit and the median k* per stratifier quintile; the panels
    share the k* axis. See :func:`_case_study_panels` for which stratifiers."""
    panels = _case_study_panels(results, paper or paper_numbers())
    if not panels:
        return None
    columns = min(len(panels), 2)
    rows = math.ceil(len(panels) / columns)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, columns, figsize=(PAGE_WIDTH * columns / 2, 2.7 * rows), squeeze=False,
                                 sharey=True, layout="constrained")
    for ax, (domain, row) in zip(axes.flat, panels, strict=False):
        kstar = results[domain].kstar_by_entity.query("method == 'acgate'").groupby("entity").kstar.mean()
        strat = read_csv_ids(Path(data_root) / "processed" / domain / "stratifiers.csv", ["entity"]).set_index(
            "entity")[row.stratifier]
        both = pd.concat([strat.rename("x"), kstar.rename("y")], axis=1, join="inner")
        trend = quantile_medians(both.x, both.y)
        with plt.rc_context(STYLE):
            ax.scatter(both.x, both.y, s=10, alpha=0.7, color=COLOURS[0], linewidths=0, label="entity")
            ax.plot(trend.x, trend.y, color="black", lw=1.2, marker="o", ms=3, label="median per quintile")
            circular = (f"\n(circular: ~ proxy {readable(row.closest_proxy)})" if row.circular else
                        f"\n(proxies predict its ranks, R = {row.proxy_r_joint:.2f})" if row.circular_joint else "")
            p = format_p(row.pooled_p, results[domain].config.permutations)  # "<= 1/(B+1)" at the floor
            p = p.replace("<=", "$\\leq$") if p.startswith("<=") else f"= {p}"
            ax.set(xlabel=f"{readable(row.stratifier)}{circular}",
                   ylabel="seed-mean $k^\\star$ (AC-GATE)" if ax.get_subplotspec().is_first_col() else "")
            ax.set_title(f"{readable(domain)}: $\\rho$ = {row.pooled_rho:.2f}, p {p}")
    for ax in axes.flat[len(panels):]:
        ax.remove()
    axes.flat[0].legend(loc="lower right", fontsize=STYLE["legend.fontsize"], frameon=False)
    return fig


def _recovery_panel(ax: plt.Axes, synth: pd.DataFrame, scenarios: list[str]) -> None:
    """Synthetic recovery: Spearman of k* with the true lag centre per method and scenario (mean, sd over seeds;
    greys, one per scenario)."""
    methods = list(dict.fromkeys(synth.method))
    for j, domain in enumerate(scenarios):
        rows = synth[synth.domain == domain].set_index("method").reindex(methods)
        y = np.arange(len(methods)) + (j - (len(scenarios) - 1) / 2) * 0.38
        ax.barh(y, rows.spearman_lag_centre_mean.fillna(0), height=0.38, xerr=rows.spearman_lag_centre_sd.fillna(0),
                color=("0.3", "0.65")[j % 2], label=readable(domain).removeprefix("synthetic "),
                error_kw={"lw": 0.8, "capsize": 2, "ecolor": "black"})
    undefined = synth.groupby("method").spearman_lag_centre_mean.apply(lambda v: v.isna().all())
    for i, method in enumerate(methods):
        if undefined[method]:
            ax.text(0.02, i, "undefined ($k^\\star$ constant)", va="center", fontsize=7, color="0.35")
    ax.set_yticks(np.arange(len(methods)), [readable(m) for m in methods])
    ax.invert_yaxis()
    ax.set(xlim=(0, 1.05), xlabel="Spearman($k^\\star$, true lag centre)")
    ax.legend(title="scenario", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)


def _stratifier_panel(ax: plt.Axes, mine: pd.DataFrame) -> None:
    """AC-GATE's mean |rho| per stratifier (colour: domain; hatched and light: circular), with its share of seeds
    p < .05."""
    domains = list(dict.fromkeys(mine.domain))
    y = np.arange(len(mine))
    for yy, r in zip(y, mine.itertuples(), strict=True):
        colour = COLOURS[domains.index(r.domain) % 10]
        ax.barh(yy, r.mean_abs_rho, color=_lighter(colour) if r.circular else colour, edgecolor=colour,
                hatch="////" if r.circular else None, lw=0.8)
        ax.text(r.mean_abs_rho + 0.02, yy, f"{r.share_p_below_alpha:.0%}", va="center", fontsize=7)
    ax.set_yticks(y, [readable(s) for s in mine.stratifier])
    ax.invert_yaxis()
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[i % 10]) for i in range(len(domains))]
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="0.3", hatch="////"))
    ax.legend(handles, [*map(readable, domains), "circular (a proxy)"], loc="upper center",
              bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    ax.set(xlim=(0, 1.2), xticks=(0, 0.5, 1), xlabel="mean |$\\rho$| over seeds (at the bar: share of seeds p < .05)")


def _lighter(colour) -> tuple[float, float, float]:
    return tuple(1 - 0.45 * (1 - c) for c in colour)


def alignment_points(results: dict[str, audit_lib.AuditResult]) -> pd.DataFrame:
    """Per real domain (and proxy-shuffle twin) and method with a tested k*: mean test R2 over seeds and mean |rho|
    over its non-circular stratifiers and seeds (a circular one duplicates a proxy, so it would count the proxies'
    alignment as the lags'), with the domain's persistence R2."""
    points = []
    for domain, result in results.items():
        if result.kind == "synthetic" or result.l2.empty:
            continue
        circular = set(result.l2_summary[result.l2_summary.circular].stratifier)
        tested = result.l2[result.l2.skipped.isna() & ~result.l2.stratifier.isin(circular)]
        rho = tested.assign(abs_rho=tested.rho.abs()).groupby("method", sort=False).abs_rho.mean()
        r2 = result.l0.groupby("method").r2_by_time.mean()
        points += [{"domain": domain, "method": m, "test_r2": r2.get(m, math.nan), "mean_abs_rho": v,
                    "persistence_r2": r2.get("persistence", math.nan)} for m, v in rho.items()]
    return pd.DataFrame(points, columns=["domain", "method", "test_r2", "mean_abs_rho", "persistence_r2"])


def _forecast_panel(ax: plt.Axes, points: pd.DataFrame) -> None:
    """Forecast (test R2) against lag alignment per method and domain, with each domain's persistence R2."""
    methods = list(dict.fromkeys(_ordered(points).method))
    markers = dict(zip(dict.fromkeys(points.domain), "oXsP^v<>", strict=False))
    for row in points.itertuples():
        ax.scatter(row.test_r2, row.mean_abs_rho, color=COLOURS[methods.index(row.method) % 10],
                   marker=markers[row.domain], s=30, edgecolor="white", lw=0.4)
    floors = points.dropna(subset=["persistence_r2"]).groupby("persistence_r2", sort=False).domain.first()
    styles = dict(zip(floors.index, ("--", ":", "-."), strict=False))  # a twin shares its domain's floor
    for r2, style in styles.items():
        ax.axvline(r2, color="0.3", ls=style, lw=0.9)
    handles = ([plt.Line2D([], [], color=COLOURS[i % 10], marker="o", ls="") for i in range(len(methods))]
               + [plt.Line2D([], [], color="0.3", marker=m, ls="") for m in markers.values()]
               + [plt.Line2D([], [], color="0.3", ls=style, lw=0.9) for style in styles.values()])
    labels = ([readable(m) for m in methods] + [readable(d) for d in markers]
              + [f"persistence, {readable(floors[r2])}" for r2 in styles])
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set(xlabel="test $R^2$ (L0)", ylabel="mean |Spearman($k^\\star$, stratifier)|\n(non-circular stratifiers, L2)")


def evidence_figure(tables: dict[str, pd.DataFrame], results: dict[str, audit_lib.AuditResult]) -> plt.Figure | None:
    """The evidence figure (paper figure compact_evidence_panel), with the panels the domains support: synthetic
    recovery (L3) and AC-GATE's alignment per stratifier (L2) side by side, and below them forecast (L0) against
    lag alignment per method and real domain, beside the persistence forecast. Lettered in reading order; None
    when the domains support no panel."""
    synth = tables.get("synthetic_summary", pd.DataFrame())
    scenarios = [d for d in ("synthetic_linear", "synthetic_nonlinear") if not synth.empty and d in set(synth.domain)]
    l2 = [t.assign(domain=name.removesuffix("_l2")) for name, t in tables.items()
          if name.endswith("_l2") and results.get(name.removesuffix("_l2"), None) is not None
          and results[name.removesuffix("_l2")].kind == "data"]
    mine = pd.concat(l2, ignore_index=True).query("method == 'acgate'") if l2 else pd.DataFrame()
    points = alignment_points(results).dropna(subset=["mean_abs_rho"])
    top = [n for n, shown in (("recovery", scenarios), ("stratifiers", not mine.empty)) if shown]
    rows = [top] if top else []
    if not points.empty:
        rows.append(["forecast"] * max(len(top), 1))
    if not rows:
        return None
    titles = {"recovery": "synthetic recovery (L3)", "stratifiers": "stratifier alignment (AC-GATE, L2)",
              "forecast": "forecast vs lag alignment (L0, L2)"}
    with plt.rc_context(STYLE):
        fig, axes = plt.subplot_mosaic(rows, figsize=(PAGE_WIDTH, 3.1 * len(rows)), layout="constrained",
                                       width_ratios=[0.8, 1.2] if len(top) == 2 else None)
        for letter, name in zip("ABC", dict.fromkeys(n for row in rows for n in row), strict=False):
            ax = axes[name]
            if name == "recovery":
                _recovery_panel(ax, synth[synth.domain.isin(scenarios)], scenarios)
            elif name == "stratifiers":
                _stratifier_panel(ax, mine)
            else:
                _forecast_panel(ax, points)
            ax.set_title(f"{letter}  {titles[name]}", loc="left", fontweight="bold")
    return fig


def forecast_r2_figure(runs_root: Path, results: dict[str, audit_lib.AuditResult]) -> plt.Figure | None:
    """Test R2 (by time, the paper's) per method and seed on the real panels, with the persistence forecast
    as a dashed line (paper figure r2_floor)."""
    domains = of_kind(results, "data")
    if not domains:
        return None
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(domains), figsize=(min(PAGE_WIDTH, 3.5 * len(domains)), 3.2), squeeze=False,
                                 sharey=True, layout="constrained")
        for ax, domain in zip(axes[0], domains, strict=True):
            runs = _ordered(collect(runs_root, results[domain]))
            runs["label"] = runs.method.map(readable)
            state = np.random.get_state()  # seaborn jitters with numpy's global generator: fix it, then restore it
            np.random.seed(0)
            sns.stripplot(data=runs, x="test_r2_by_time", y="label", ax=ax, size=2.5, alpha=0.6, jitter=0.2,
                          color=COLOURS[0])
            np.random.set_state(state)
            sns.pointplot(data=runs, x="test_r2_by_time", y="label", ax=ax, errorbar=None, color="black",
                          markers="|", markersize=10, linestyles="none")
            floor = results[domain].l0.query("method == 'persistence'").r2_by_time
            if len(floor):
                ax.axvline(floor.iloc[0], ls="--", color="0.3", lw=1, label="persistence")
                ax.legend(loc="lower left", frameon=False)
            ax.axvline(0, color="black", lw=0.5)
            ax.set(xlabel="test $R^2$ (per-year cross-section,\nmean over years)", ylabel="", title=readable(domain))
    return fig


TABLES = {  # name: (caption, the paper table it regenerates)
    "synthetic_summary": ("Synthetic summary: mean (sd) over seeds of test MSE and k* recovery (L0/L3).",
                          "app_synth_summary"),
    "economics_summary": ("Economics compact summary (L0/L1), mean (sd) over seeds.", "app_econ_compact"),
    "energy_summary": ("Energy compact summary (L0/L1), mean (sd) over seeds.", "app_energy_compact"),
    "economics_l2": ("Economics L2 stratified k* summary.", "app_econ_l2_full"),
    "energy_l2": ("Energy L2 stratified k* summary.", "app_energy_l2_full"),
    "wilcoxon_synthetic_kstar": ("Paired Wilcoxon test of k* MAE on the synthetic panels (method - AC-GATE).",
                                 "app_wilcoxon_synth_kstar"),
    "wilcoxon_synthetic_task_loss": ("Paired Wilcoxon test of test MSE on the synthetic panels (method - AC-GATE).",
                                     "app_wilcoxon_synth_taskloss"),
    "wilcoxon_real_r2": ("Paired Wilcoxon test of test R2 on the real panels (method - AC-GATE).",
                         "app_wilcoxon_real_r2"),
    "proxy_shuffle": ("Proxy-shuffle negative control: AC-GATE on the original and on shuffled proxies.",
                      "proxy_shuffle_compact"),
    "proxy_shuffle_by_stratifier": ("Proxy-shuffle negative control per stratifier.", "proxy_shuffle_compact"),
    "verdict_matrix": ("Verdict matrix (AC-GATE): the paper's rules beside the calibrated rules.", "verdict_matrix"),
    "heldout": ("Held-out test loss of AC-GATE against each comparator on the same rows (comparator - AC-GATE; "
                "one-sided p over seeds and over entities, Holm over comparators) and the seed-to-seed Spearman "
                "of AC-GATE's k* where seeds share entities.", ""),
    "excluded_runs": ("Run folders the audits left out (not trained, stale, incomplete, or not asked for), with "
                      "the reason.", ""),
    "controlled_comparison": ("Controlled comparison design: what each method changes, with parameter counts.",
                              "fair_baselines"),
    "reproduction": ("Every number the paper reports next to ours (difference = ours - paper).", "all"),
}
FIGURES = {  # name: the paper figure it regenerates
    "case_study": "case_study_panel", "evidence": "compact_evidence_panel", "forecast_r2": "r2_floor",
    "use_case": "use_case", "architecture": "ac_gate_arch",
}


def build_tables(runs_root: Path, domains: list[str]) -> tuple[dict[str, pd.DataFrame], dict]:
    """Every table of :data:`TABLES` that the finished runs and audits of ``domains`` support (empty ones are
    left out), and the audits they were read from."""
    results = audits(runs_root, domains)
    tables = {"synthetic_summary": synthetic_summary(runs_root, results)}
    synthetic, paper = of_kind(results, "synthetic"), paper_domains()
    for domain, result in results.items():
        if result.kind != "synthetic":
            tables[f"{domain}_summary"] = real_summary(runs_root, result)
            tables[f"{domain}_l2"] = l2_table(result)
            if domain not in paper:
                tables[f"{domain}_{OWN_WILCOXON}"] = wilcoxon_table(results, WILCOXON_TABLES["wilcoxon_real_r2"],
                                                                    [domain])
    real = [d for d in results if d not in synthetic and d in paper]
    for name, metric in WILCOXON_TABLES.items():
        tables[name] = wilcoxon_table(results, metric, synthetic if "synthetic" in name else real)
    tables["proxy_shuffle"], tables["proxy_shuffle_by_stratifier"] = proxy_shuffle_table(results)
    tables["verdict_matrix"] = verdict_table(results)
    tables["heldout"] = heldout_table(results)
    tables["controlled_comparison"] = controlled_comparison(runs_root, results)
    tables["excluded_runs"] = excluded_runs(results)
    tables["reproduction"] = reproduction(tables, results)
    return {k: v for k, v in tables.items() if not v.empty}, results


def run_manifest(runs_root: Path, results: dict[str, audit_lib.AuditResult], tables: list[str], figures: list[str]
                 ) -> dict:
    """What produced the tables: the report's code version and machine, the runs the audits took (their code
    versions, total training seconds, when they were made), and the workflow invocation that ended here (its start,
    wall time to this report, how many of the runs it made, the domains it skipped)."""
    manifests, seconds = [], []
    for domain, result in results.items():
        for seed, method in result.l1[["seed", "method"]].itertuples(index=False):
            folder = method_dir(runs_root, domain, seed, method)
            manifests.append(json.loads((folder / "manifest.json").read_text()))
            seconds.append(json.loads((folder / "metrics.json").read_text()).get("seconds", 0.0))
    created = [m["created_utc"] for m in manifests]
    started_file = Path(runs_root) / ".workflow_started.json"
    invocation = json.loads(started_file.read_text()) if started_file.is_file() else {}
    started = invocation.get("started")
    return {
        "report_git_sha": git_sha(),
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "packages": package_versions(),
        "domains": {d: {"seeds": int(r.l1.seed.nunique()), "runs": len(r.l1), "excluded_runs": len(r.excluded)}
                    for d, r in results.items()},
        "runs_git_sha": sorted({m["git_sha"] for m in manifests}),
        "training_seconds_total": round(sum(seconds), 1),
        "runs_made": {"first_utc": min(created), "last_utc": max(created),
                      "span_minutes": round((datetime.fromisoformat(max(created))
                                             - datetime.fromisoformat(min(created))).total_seconds() / 60, 1)}
        if created else None,
        "workflow": {
            "started_utc": invocation.get("started_utc"),
            "wall_minutes_to_report": round((time.time() - started) / 60, 1) if started else None,
            "runs_made_in_this_invocation": sum(datetime.fromisoformat(c).timestamp() >= started for c in created)
            if started else None,
            "skipped_domains": invocation.get("skipped", {}),
        },
        "tables": sorted(tables), "figures": sorted(figures),
    }


DOMAIN_TABLES = {  # <domain>_<suffix>: the caption of the per-domain tables of panels the paper does not name
    "summary": "compact summary (L0/L1), mean (sd) over seeds",
    "l2": "L2 stratified k* summary",
    OWN_WILCOXON: "paired Wilcoxon test of test R2 (method - AC-GATE)",
}


def caption(name: str) -> str:
    """The caption of a table, also for the per-domain tables of user panels."""
    if name in TABLES:
        return TABLES[name][0]
    suffix = next(s for s in DOMAIN_TABLES if name.endswith(f"_{s}"))
    return f"{name.removesuffix(f'_{suffix}')}: {DOMAIN_TABLES[suffix]}."
