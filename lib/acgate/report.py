"""The paper's tables and figures, regenerated from the run artifacts and the audits (notebook 05_report).

Every table is a DataFrame of numbers (means and standard deviations in separate ``<x>_mean`` / ``<x>_sd``
columns) written as CSV for machines and as LaTeX and Markdown for readers, where each pair becomes one
"mean (sd)" cell. :data:`TABLES` lists them with the paper table each one regenerates; :data:`FIGURES` the
figures. :func:`reproduction` puts every number the paper reports (``paper_numbers.yaml``) next to ours.
"""

from __future__ import annotations

import json
import math
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


def paper_numbers() -> dict:
    """The figures the paper reports (``lib/acgate/paper_numbers.yaml``)."""
    return yaml.safe_load(resources.files("acgate").joinpath("paper_numbers.yaml").read_text())


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


WILCOXON_TABLES = {  # name: (metric, synthetic domains?), paper tables app_wilcoxon_*
    "wilcoxon_synthetic_kstar": ("kstar_mae_lag_centre", True),
    "wilcoxon_synthetic_task_loss": ("test_mse", True),
    "wilcoxon_real_r2": ("test_r2_by_time", False),
}


def wilcoxon_table(results: dict[str, audit_lib.AuditResult], metric: str, synthetic: bool) -> pd.DataFrame:
    """Paired Wilcoxon tests of ``metric``, each method against AC-GATE (difference = method - AC-GATE)."""
    frames = [r.wilcoxon[r.wilcoxon.metric == metric].assign(domain=d)
              for d, r in results.items() if (r.kind == "synthetic") == synthetic and not r.wilcoxon.empty]
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
    rows = []
    for method, design in DESIGN.items():
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
    """Every number the paper reports next to ours: one row per (paper table, row, quantity) with the paper's
    value, ours (NaN where we have no counterpart run) and ours - paper. Verdicts compare as text."""
    paper = paper or paper_numbers()
    rows: list[dict] = []

    def add(table: str, row: str, quantity: str, theirs, ours) -> None:
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
                add("app_synth_summary", f"{scenario} {method}", key, theirs, ours)

    real_of = {"test_r2": "test_r2_by_time_mean", "test_r2_sd": "test_r2_by_time_sd", "kstar_sd": "kstar_sd",
               "omega_entropy": "omega_entropy", "gate_sensitivity": "gate_sensitivity"}
    for domain, methods in paper["real"].items():
        summary = tables.get(f"{domain}_summary", pd.DataFrame())
        for method, values in methods.items():
            for key, theirs in values.items():
                add(f"app_{domain}_compact", f"{domain} {method}", key, theirs,
                    _find(summary, real_of[key], method=method))

    for domain, methods in paper["l2"].items():
        l2 = tables.get(f"{domain}_l2", pd.DataFrame())
        for method, strata in methods.items():
            for stratifier, values in strata.items():
                for key, theirs in values.items():
                    add(f"app_{domain}_l2_full", f"{domain} {method} {stratifier}", key, theirs,
                        _find(l2, key, method=method, stratifier=stratifier))

    for name, groups in paper["wilcoxon"].items():
        metric, _ = WILCOXON_TABLES[f"wilcoxon_{name}"]
        for group, methods in groups.items():
            domain = f"synthetic_{group}" if name.startswith("synthetic") else group
            table = results[domain].wilcoxon if domain in results else pd.DataFrame()
            for method, values in methods.items():
                for key, theirs in values.items():
                    add(f"app_wilcoxon_{name}", f"{group} {method}", key, theirs,
                        _find(table, key, metric=metric, method=method))

    compact = tables.get("proxy_shuffle", pd.DataFrame())
    for domain, runs in paper["proxy_shuffle"].items():
        for run, values in runs.items():
            label = "original" if run == "original" else "proxy shuffle"
            for key, theirs in values.items():
                column = "test_r2_by_time" if key == "test_r2" else key
                add("proxy_shuffle_compact", f"{domain} {run}", key, theirs,
                    _find(compact, column, domain=domain, run=label))

    for domain, case in paper["case_study"].items():
        l2 = tables.get(f"{domain}_l2", pd.DataFrame())
        for key, column in (("spearman", "pooled_rho"), ("p", "pooled_p")):
            add("fig_case_study", f"{domain} {case['stratifier']} (seed-mean k*)", key, case[key],
                _find(l2, column, method="acgate", stratifier=case["stratifier"]))

    matrix = tables.get("verdict_matrix", pd.DataFrame())
    for row, cells in paper["verdicts"].items():
        for domain in ([f"synthetic_{s}" for s in ("linear", "nonlinear")] if row == "synthetic" else [row]):
            found = matrix[matrix.domain == domain] if not matrix.empty else matrix
            for layer, theirs in cells.items():
                add("verdict_matrix", domain, layer, theirs, found[f"{layer} paper"].iloc[0] if len(found) else "")

    for domain in ("economics", "energy"):
        l2 = tables.get(f"{domain}_l2", pd.DataFrame())
        share = l2[l2.method == "acgate"].share_p_below_alpha if not l2.empty else pd.Series(dtype=float)
        for stat in ("min", "max"):
            key = f"{domain}_share_p_below_alpha_{stat}"
            if key in paper["text"]:
                add("text", f"{domain} AC-GATE, over stratifiers", key, paper["text"][key],
                    float(getattr(share, stat)()) if len(share) else math.nan)
        key = f"grouped_ardl_test_r2_{domain}"
        if key in paper["text"]:
            add("text", f"{domain} grouped_ardl", key, paper["text"][key],
                _find(tables.get(f"{domain}_summary", pd.DataFrame()), "test_r2_by_time_mean", method="grouped_ardl"))
    deep = [t[t.method.isin(GATE_METHODS + ("plain_lstm", "tft", "ganet"))].test_r2_by_time_mean
            for d in ("economics", "energy") if not (t := tables.get(f"{d}_summary", pd.DataFrame())).empty]
    deep = pd.concat(deep) if deep else pd.Series(dtype=float)
    for key, stat in (("r2_floor_band_low", "min"), ("r2_floor_band_high", "max")):
        if key in paper["text"]:
            add("text", "deep methods' mean test R2, both domains", key, paper["text"][key],
                float(getattr(deep, stat)()) if len(deep) else math.nan)
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
    return f"{value:.4f}" if ("mse" in column or "loss" in column) else f"{value:.3f}"


def display(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as text for readers: each ``<x>_mean`` / ``<x>_sd`` pair becomes one "mean (sd)" column
    ``<x>``, methods get the paper's names, numbers a fixed precision (p-values two significant digits)."""
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
        elif (draws := RESAMPLED_P.get(column)) in frame:  # a resampling p at its floor prints as "<= 1/(B+1)"
            out[column] = [format_p(v, int(b)) for v, b in zip(frame[column], frame[draws], strict=True)]
        else:
            out[column] = [_format(v, column) for v in frame[column]]
    return out


def write_table(frame: pd.DataFrame, directory: Path, name: str, caption: str) -> list[Path]:
    """``<name>.csv`` (the numbers), ``<name>.tex`` (booktabs, with caption and label ``tab:<name>``) and
    ``<name>.md`` in ``directory``, each written atomically."""
    directory = Path(directory)
    shown = display(frame)
    latex = shown.to_latex(index=False, caption=caption, label=f"tab:{name}", escape=True, longtable=len(frame) > 40)
    paths = [directory / f"{name}.{ext}" for ext in ("csv", "tex", "md")]
    atomic_write(paths[0], lambda f: frame.to_csv(f, index=False))
    atomic_write(paths[1], lambda f: f.write(latex))
    atomic_write(paths[2], lambda f: f.write(f"{caption}\n\n{shown.to_markdown(index=False)}\n"))
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


def case_study_figure(results: dict[str, audit_lib.AuditResult], data_root: Path, paper: dict | None = None
                      ) -> plt.Figure | None:
    """Stratifier against the seed-mean AC-GATE k* per entity (paper figure case_study_panel), with the
    seed-pooled Spearman rho and permutation p of the audit: per real domain the paper's stratifier, and when
    that one is circular (it duplicates a proxy) also the strongest non-circular one."""
    paper = paper or paper_numbers()
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
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), squeeze=False)
    for ax, (domain, row) in zip(axes[0], panels, strict=True):
        kstar = results[domain].kstar_by_entity.query("method == 'acgate'").groupby("entity").kstar.mean()
        strat = read_csv_ids(Path(data_root) / "processed" / domain / "stratifiers.csv", ["entity"]).set_index(
            "entity")[row.stratifier]
        both = pd.concat([strat.rename("stratifier"), kstar.rename("kstar")], axis=1, join="inner")
        sns.regplot(data=both, x="stratifier", y="kstar", ax=ax, scatter_kws={"s": 14, "alpha": 0.7},
                    line_kws={"color": "black", "lw": 1}, seed=0)  # a reproducible bootstrap band
        circular = (f" (circular: ~ proxy {row.closest_proxy})" if row.circular else
                    f" (proxies predict its ranks, R = {row.proxy_r_joint:.2f})" if row.circular_joint else "")
        p = format_p(row.pooled_p, results[domain].config.permutations)  # "<= 1/(B+1)" at the permutation floor
        p = p.replace("<=", "$\\leq$") if p.startswith("<=") else f"= {p}"
        ax.set(xlabel=f"{row.stratifier}{circular}", ylabel="seed-mean $k^\\star$ (AC-GATE)",
               title=f"{domain}: $\\rho$ = {row.pooled_rho:.2f}, p {p}")
    fig.tight_layout()
    return fig


def evidence_figure(tables: dict[str, pd.DataFrame], results: dict[str, audit_lib.AuditResult]) -> plt.Figure:
    """Three panels (paper figure compact_evidence_panel). A: synthetic recovery, Spearman of k* with the lag
    centre per method (mean and sd over seeds). B: forecast (test R2) against lag alignment (mean |rho| over
    stratifiers and seeds) per method and real domain. C: AC-GATE's mean |rho| per stratifier, labelled with the
    share of seeds whose permutation p < alpha."""
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), layout="constrained", gridspec_kw={"width_ratios": [1, 1, 1]})
    palette = sns.color_palette("muted")
    ax = axes[0]
    synth = tables.get("synthetic_summary", pd.DataFrame())
    scenarios = [d for d in ("synthetic_linear", "synthetic_nonlinear") if not synth.empty and d in set(synth.domain)]
    methods = list(dict.fromkeys(synth.method)) if scenarios else []
    for j, domain in enumerate(scenarios):
        rows = synth[synth.domain == domain].set_index("method").reindex(methods)
        y = np.arange(len(methods)) + (j - 0.5) * 0.38
        ax.barh(y, rows.spearman_lag_centre_mean.fillna(0), height=0.38, xerr=rows.spearman_lag_centre_sd.fillna(0),
                color=palette[j], label=domain.removeprefix("synthetic_"), error_kw={"lw": 1, "capsize": 2})
        for yy, value in zip(y, rows.spearman_lag_centre_mean, strict=True):
            if math.isnan(value):
                ax.text(0.02, yy, "undefined (k* constant)", va="center", fontsize=7, color="grey")
    ax.set_yticks(np.arange(len(methods)), [LABELS.get(m, m) for m in methods])
    ax.invert_yaxis()
    ax.set(xlim=(0, 1.05), xlabel="Spearman($k^\\star$, true lag centre)")
    if scenarios:
        ax.legend(title="scenario", fontsize=8, loc="center right", bbox_to_anchor=(1.0, 0.74))
    ax.set_title("A  synthetic recovery (L3)", loc="left")

    ax = axes[1]
    points = []
    for domain, result in results.items():
        if result.kind == "synthetic" or result.l2.empty:
            continue
        tested = result.l2[result.l2.skipped.isna()]
        rho = tested.assign(abs_rho=tested.rho.abs()).groupby("method").abs_rho.mean()
        r2 = result.l0.groupby("method").r2_by_time.mean()
        points += [{"domain": domain, "method": LABELS.get(m, m), "test R2": r2.get(m, math.nan), "mean |rho|": v}
                   for m, v in rho.items()]
    if points:
        sns.scatterplot(data=pd.DataFrame(points), x="test R2", y="mean |rho|", hue="method", style="domain", s=60,
                        ax=ax, palette="tab10")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.set(xlabel="test $R^2$ (L0)", ylabel="mean |Spearman($k^\\star$, stratifier)| (L2)")
    ax.set_title("B  forecast vs lag alignment", loc="left")

    ax = axes[2]
    l2 = [t.assign(domain=name.removesuffix("_l2")) for name, t in tables.items()
          if name.endswith("_l2") and "proxy_shuffle" not in name]
    mine = pd.concat(l2, ignore_index=True).query("method == 'acgate'") if l2 else pd.DataFrame()
    if not mine.empty:
        domains = list(dict.fromkeys(mine.domain))
        colours = [palette[2 + domains.index(d) % 8] for d in mine.domain]
        y = np.arange(len(mine))
        ax.barh(y, mine.mean_abs_rho, color=colours)
        for yy, r in zip(y, mine.itertuples(), strict=True):
            ax.text(r.mean_abs_rho + 0.02, yy, f"{r.share_p_below_alpha:.0%} of seeds p<.05", va="center", fontsize=7)
        ax.set_yticks(y, [f"{d}: {s}{' (circular)' if c else ''}"
                          for d, s, c in zip(mine.domain, mine.stratifier, mine.circular, strict=True)], fontsize=8)
        ax.invert_yaxis()
    ax.set(xlim=(0, 1.3), xlabel="AC-GATE mean |$\\rho$| over seeds")
    ax.set_title("C  stratifier alignment (AC-GATE)", loc="left")
    return fig


def forecast_r2_figure(runs_root: Path, results: dict[str, audit_lib.AuditResult]) -> plt.Figure | None:
    """Test R2 (by time, the paper's) per method and seed on the real panels, with the persistence forecast
    as a dashed line (paper figure r2_floor)."""
    domains = of_kind(results, "data")
    if not domains:
        return None
    fig, axes = plt.subplots(1, len(domains), figsize=(5 * len(domains), 3.8), squeeze=False, sharey=False)
    for ax, domain in zip(axes[0], domains, strict=True):
        runs = _ordered(collect(runs_root, results[domain]))
        runs["label"] = runs.method.map(LABELS)
        state = np.random.get_state()  # seaborn jitters with numpy's global generator: fix it, then restore it
        np.random.seed(0)
        sns.stripplot(data=runs, x="test_r2_by_time", y="label", ax=ax, size=3, alpha=0.6, jitter=0.2)
        np.random.set_state(state)
        sns.pointplot(data=runs, x="test_r2_by_time", y="label", ax=ax, errorbar=None, color="black",
                      markers="|", markersize=12, linestyles="none")
        floor = results[domain].l0.query("method == 'persistence'").r2_by_time
        if len(floor):
            ax.axvline(floor.iloc[0], ls="--", color="grey", lw=1)
            ax.text(floor.iloc[0], -0.6, " persistence", color="grey", fontsize=8)
        ax.axvline(0, color="black", lw=0.5)
        ax.set(xlabel="test $R^2$ (per-year cross-section, mean over years)", ylabel="", title=domain)
    fig.tight_layout()
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
    for domain, result in results.items():
        if result.kind != "synthetic":
            tables[f"{domain}_summary"] = real_summary(runs_root, result)
            tables[f"{domain}_l2"] = l2_table(result)
    for name, (metric, synthetic) in WILCOXON_TABLES.items():
        tables[name] = wilcoxon_table(results, metric, synthetic)
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


def caption(name: str) -> str:
    """The caption of a table, also for the per-domain tables of user panels."""
    if name in TABLES:
        return TABLES[name][0]
    domain, _, kind = name.rpartition("_")
    return f"{domain}: {'compact summary (L0/L1)' if kind == 'summary' else 'L2 stratified k* summary'}."
