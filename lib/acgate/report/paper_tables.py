"""The paper's tables, built from the run artifacts and the audits (notebook 05_report): what the notebook calls to
build the report.

Every table is a DataFrame of numbers (means and standard deviations in separate ``<x>_mean`` / ``<x>_sd``
columns); :mod:`acgate.report.render` writes it as CSV for machines and as LaTeX and Markdown for readers.
:data:`TABLES` lists them with the paper table each one regenerates and their captions, :data:`FIGURES` the figures
(:mod:`acgate.report.figures`, :mod:`acgate.report.diagrams`); :func:`build_tables` builds every table the domains
support, the reproduction table (:mod:`acgate.report.reproduction`) among them, and :func:`run_manifest` records what
produced them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from acgate.audit import domain_audit, head_to_head, run_folders
from acgate.audit.verdicts import LAYERS
from acgate.config import CLOSED_FORM_METHODS
from acgate.layout import method_dir
from acgate.report import comparisons
from acgate.report.inputs import audits, collect, in_paper_order, of_kind, paper_domains
from acgate.report.reproduction import reproduction
from acgate.runs import code_versions, git_sha, machine, package_versions, reading
from acgate.statistics import smallest_wilcoxon_p


def _mean_sd(frame: pd.DataFrame, by: list[str], columns: list[str]) -> pd.DataFrame:
    grouped = frame.groupby(by, sort=False)[columns]
    out = grouped.mean().add_suffix("_mean").join(grouped.std(ddof=1).add_suffix("_sd"))
    return out[[f"{c}_{s}" for c in columns for s in ("mean", "sd")]].reset_index()


def synthetic_summary(runs_root: Path, results: dict[str, domain_audit.AuditResult]) -> pd.DataFrame:
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
    table = in_paper_order(pd.concat(frames, ignore_index=True))
    table = table.sort_values("domain", key=lambda d: d.map(domains.index), kind="stable")  # then by domain
    first = ["domain", "method", "seeds", "kstar_kind"]
    return table[first + [c for c in table.columns if c not in first]].reset_index(drop=True)


def real_summary(runs_root: Path, audit: domain_audit.AuditResult) -> pd.DataFrame:
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
    table = in_paper_order(table)
    return table[first + [c for c in table.columns if c not in first]].reset_index(drop=True)


def l2_table(audit: domain_audit.AuditResult) -> pd.DataFrame:
    """L2 of a real domain (paper tables app_econ_l2_full / app_energy_l2_full): the methods with a structural
    k* and at least one non-degenerate seed, every stratifier."""
    s = audit.l2_summary
    if s.empty:
        return s
    s = s[(s.kstar_kind == "structural") & (s.seeds_tested > 0)]
    columns = ["method", "stratifier", "circular", "closest_proxy", "max_abs_spearman_with_proxy", "seeds_tested",
               "mean_abs_rho", "median_rho", "share_p_below_alpha", "fisher_p", "sign_consistency", "pooled_rho",
               "pooled_p", "proxy_r_joint", "circular_joint", "pooled_lag_free_p", "p_holm"]
    return in_paper_order(s[columns]).reset_index(drop=True).assign(permutations=audit.config.permutations)


WILCOXON_TABLES = {  # name: metric, paper tables app_wilcoxon_*: the synthetic domains, the paper's real ones
    "wilcoxon_synthetic_kstar": "kstar_mae_lag_centre",
    "wilcoxon_synthetic_task_loss": "test_mse",
    "wilcoxon_real_r2": "test_r2_by_time",
}
OWN_WILCOXON = "wilcoxon_r2"  # <domain>_wilcoxon_r2: test R2 of a panel the paper does not report


def wilcoxon_table(results: dict[str, domain_audit.AuditResult], metric: str, domains: list[str]) -> pd.DataFrame:
    """Paired Wilcoxon tests of ``metric`` in ``domains``, each method against AC-GATE (difference = method -
    AC-GATE)."""
    frames = [results[d].wilcoxon[(results[d].wilcoxon.metric == metric)
                                  & (results[d].wilcoxon.reference == "acgate")].assign(domain=d)
              for d in domains if not results[d].wilcoxon.empty]
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames, ignore_index=True)
    # a p at the smallest value its pairs allow (0.062 for 5 seeds that all agree) is a floor, not a measurement
    floor = table.nonzero_pairs.map(lambda n: smallest_wilcoxon_p(int(n), two_sided=True))
    at_floor = table.p <= floor * (1 + 1e-9)
    table["note"] = table.note.where(~at_floor, table.nonzero_pairs.map(
        lambda n: f"p at its floor for {int(n)} pairs (every pair agrees)"))
    columns = ["domain", "method", "n_pairs", "mean_diff", "median_diff", "W", "p", "note"]
    return table[columns].reset_index(drop=True)


def proxy_shuffle_table(results: dict[str, domain_audit.AuditResult]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The proxy-shuffle control (paper table proxy_shuffle_compact): per domain, AC-GATE on the original and on
    the shuffled proxies, averaged over stratifiers (Fisher p as its range); and the per-stratifier detail."""
    details = [comparisons.proxy_shuffle_comparison(results[d], results[f"{d}_proxy_shuffle"])
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


DESIGN = {  # paper table fair_baselines; the facts are those of acgate.models.networks / acgate.models.baselines
    "acgate": Design("yes", "learned", "yes", "full model: AC encoder + lag gate + reconstruction"),
    "plain_lstm": Design("no", "none", "no", "same backbone capacity, fed the K lags directly; no encoder, no gate"),
    "tft": Design("no", "none", "no", "temporal fusion transformer: static covariates, variable selection, "
                  "temporal self-attention over the K lags"),
    "ganet": Design("no", "none", "no", "gated-attention network over the K lags"),
    "no_ac_encoder": Design("no (z fixed)", "learned", "yes", "z_i fixed: no entity-conditioned lag"),
    "uniform_lag": Design("yes", "uniform 1/K", "yes", "omega_ik = 1/K: no learned lag heterogeneity"),
    "no_recon_reg": Design("yes", "learned", "no", "lambda_r = 0: no reconstruction regulariser"),
    "shuffled_proxies": Design("yes (proxies permuted)", "learned", "yes", "AC-GATE on proxies permuted across "
                               "entities: a comparator of the calibrated heterogeneity verdict"),
    "proxy_shared_gate": Design("yes (not for the lags)", "learned, shared", "yes", "one lag gate for every entity; "
                                "z from the proxies sets the initial state: a comparator of the calibrated "
                                "heterogeneity verdict"),
    "grouped_ardl": Design("no", "none", "no", "real panels only: OLS distributed-lag model per training-window "
                           "group"),
    "moderated_dl": Design("no (proxies enter linearly)", "polynomial curve x proxies", "no",
                           "classical yardstick: pooled ridge regression, lag curves linear in the proxies and their "
                           "squares"),
    "shared_dl": Design("no", "one polynomial curve", "no", "moderated_dl without proxy interactions: one lag curve "
                        "for every entity"),
    "shuffled_dl": Design("no (proxies permuted)", "polynomial curve x proxies", "no", "moderated_dl on proxies "
                          "permuted across entities"),
    "proxy_scaled_dl": Design("no (proxies scale the curve)", "one polynomial curve, scaled", "no",
                              "one lag curve whose size the proxies scale: moderated_dl without lag-shape moderation"),
    "two_stage_dl": Design("no", "per-entity curve, shrunk", "no", "per-entity OLS lag curves meta-regressed on the "
                           "proxies (GLS), each shrunk toward its prediction"),
    "neural_dl": Design("no (proxies through a network)", "polynomial curve x network units", "no",
                        "moderated_dl whose moderators are random tanh units of the proxies, fitted by ridge"),
}


def controlled_comparison(runs_root: Path, results: dict[str, domain_audit.AuditResult]) -> pd.DataFrame:
    """The controlled-comparison design (paper table fair_baselines): what each method changes, and its number
    of trainable parameters read off a saved model, on the first synthetic domain and on each real domain (the
    proxy-shuffle twins have their base domain's models)."""
    domains = of_kind(results, "synthetic")[:1] + of_kind(results, "data")
    trained = {m for r in results.values() for m in r.l1.method}
    rows = []
    for method, design in ((m, d) for m, d in DESIGN.items() if m in trained):
        row: dict[str, Any] = {"method": method, "ac_encoder": design.ac_encoder, "lag_gate": design.lag_gate,
               "reconstruction": design.reconstruction, "difference": design.difference}
        for domain in domains:
            seeds = results[domain].l1.query("method == @method").seed
            if seeds.empty:
                continue
            state = method_dir(runs_root, domain, int(seeds.min()), method) / "model.pt"
            with reading(state.parent):
                if state.is_file():
                    try:
                        tensors = torch.load(state, map_location="cpu", weights_only=True)
                    except (RuntimeError, EOFError, OSError, ValueError) as err:
                        raise ValueError(f"{state} is damaged ({type(err).__name__}: {str(err)[:100]}); delete its "
                                         f"run folder {state.parent} and run the grid again, which retrains it"
                                         ) from None
                    row[f"parameters_{domain}"] = int(sum(t.numel() for k, t in tensors.items() if k != "position"))
        rows.append(row)
    return pd.DataFrame(rows)


def excluded_runs(results: dict[str, domain_audit.AuditResult]) -> pd.DataFrame:
    """Every run folder an audit left out (not trained, stale, incomplete or not asked for), with the reason."""
    frames = [r.excluded.assign(domain=d) for d, r in results.items() if not r.excluded.empty]
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)[["domain", *run_folders.EXCLUDED_COLUMNS]]


def verdict_table(results: dict[str, domain_audit.AuditResult]) -> pd.DataFrame:
    """(domain, reference) x layers: the verdict for AC-GATE (the paper table verdict_matrix) and for the moderated
    distributed lag under the paper's rules beside the calibrated rules', one column per layer and rule ("L2
    paper", "L2 calibrated"), whether the entities' lags differ at all (whatever the proxies say; the same for both
    references), AC-GATE against each classical model (held-out forecast) on AC-GATE's row, and for a data domain
    with a current panel-matched study how often its nulls were falsely supported."""
    if not results:
        return pd.DataFrame()
    matrix = comparisons.verdict_matrix(list(results.values()))
    matrix.columns = [f"{layer} {rule}" for rule, layer in matrix.columns]
    matrix = matrix[[f"{layer} {rule}" for layer in LAYERS for rule in ("paper", "calibrated")]].reset_index()
    matrix["lags differ"] = matrix.domain.map({d: r.lags_differ.get("verdict", "") for d, r in results.items()})
    for classical in head_to_head.CLASSICAL:
        versus = {d: r.neural_vs_classical_verdict.get(classical, {}).get("forecast", "") for d, r in results.items()}
        matrix[f"vs {classical}"] = [versus[d] if ref == head_to_head.NEURAL else "" for d, ref in
                                     zip(matrix.domain, matrix.reference, strict=True)]
    matrix[MATCHED_COLUMN] = [_nulls_supported(results[d], ref) for d, ref in
                              zip(matrix.domain, matrix.reference, strict=True)]
    return matrix


MATCHED_COLUMN = "panel-matched nulls supported"  # verdict_table: a data domain's false supports (07_panel_matched)


def _nulls_supported(result: domain_audit.AuditResult, reference: str) -> str:
    """How often the calibrated L1, L2 and the lags-differ statement (the classical reference's alone) said
    "supported" on the null surrogates of the domain's panel-matched study ("L1 0/120, L2 0/120, lags differ 3/120");
    empty without a current study."""
    rates = result.error_rates.get("error_rates", {}).get(reference, {})
    return ", ".join(f"{layer} {rates[layer]['false_support']['supported']}/"
                     f"{rates[layer]['false_support']['replicates']}"
                     for layer in ("L1", "L2", "lags differ") if layer in rates)


def neural_vs_classical_table(results: dict[str, domain_audit.AuditResult]) -> pd.DataFrame:
    """Per domain: AC-GATE against the moderated distributed lag and the two-stage model on held-out loss and, where
    the truth is known, on lag recovery (:func:`acgate.audit.head_to_head.neural_vs_classical`)."""
    frames = [r.neural_vs_classical.assign(domain=d) for d, r in results.items() if not r.neural_vs_classical.empty]
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames, ignore_index=True)
    return table[["domain", *head_to_head.COMPARISON_COLUMNS]]


def heldout_table(results: dict[str, domain_audit.AuditResult]) -> pd.DataFrame:
    """Per domain, reference and comparator: the reference's held-out test loss against the comparator's on the same
    rows (the evidence of the calibrated L0 and L1), with the seed-to-seed agreement of the reference's k*
    ordering."""
    frames = []
    for domain, result in results.items():
        if result.heldout.empty:
            continue
        agreement = result.seed_agreement.set_index("method").median_rho
        frames.append(result.heldout.assign(
            domain=domain, shared_entities=result.shared_entities, bootstrap=result.config.bootstrap,
            kstar_seed_agreement=result.heldout.reference.map(agreement)))
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames, ignore_index=True)
    return table[["domain", "reference", "comparator", "seeds", "entities", "mean_loss_diff", "p_seed_better",
                  "p_entity_better", "holm_better", "holm_worse", "shared_entities", "kstar_seed_agreement",
                  "bootstrap"]]


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
    "verdict_matrix": ("Verdict matrix: AC-GATE and the moderated distributed lag (the classical yardstick), the "
                       "paper's rules beside the calibrated rules; vs moderated_dl, vs two_stage_dl: AC-GATE's "
                       "held-out forecast against each classical model's (empty where the domain did not run it).",
                       "verdict_matrix"),
    "neural_vs_classical": ("AC-GATE against the moderated distributed lag and the two-stage model: held-out test MSE "
                            "on the same rows "
                            "(one-sided p over seeds and over entities, the larger) and, on synthetic panels, lag "
                            "recovery per seed (one-sided paired Wilcoxon); advantage is AC-GATE's (positive: "
                            "AC-GATE better).", ""),
    "heldout": ("Held-out test loss of each reference (AC-GATE, the moderated distributed lag) against each "
                "comparator on the same rows (comparator - reference; one-sided p over seeds and over entities, Holm "
                "over comparators) and the seed-to-seed Spearman of the reference's k* where seeds share entities.",
                ""),
    "excluded_runs": ("Run folders the audits left out (not trained, stale, incomplete, or not asked for), with "
                      "the reason.", ""),
    "controlled_comparison": ("Controlled comparison design: what each method changes, with parameter counts (empty: "
                              "a closed-form fit, or a method the domain did not run).",
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
    tables["neural_vs_classical"] = neural_vs_classical_table(results)
    tables["heldout"] = heldout_table(results)
    tables["controlled_comparison"] = controlled_comparison(runs_root, results)
    tables["excluded_runs"] = excluded_runs(results)
    tables["reproduction"] = reproduction(tables, results)
    return {k: v for k, v in tables.items() if not v.empty}, results


def run_manifest(runs_root: Path, results: dict[str, domain_audit.AuditResult], tables: list[str], figures: list[str]
                 ) -> dict:
    """What produced the tables: the report's code version and machine, the runs the audits took (their code
    versions, git SHA and code digest, and a sentence when they differ: :func:`acgate.runs.code_versions`; total
    training seconds, when they were made), and the workflow invocation that ended here (its start,
    wall time to this report, how many of the runs it made, the domains it skipped and the methods it left out of a
    domain)."""
    manifests, seconds = [], []
    for domain, result in results.items():
        for seed, method in result.l1[["seed", "method"]].itertuples(index=False):
            folder = method_dir(runs_root, domain, seed, method)
            with reading(folder):
                manifests.append(json.loads((folder / "manifest.json").read_text()))
                metrics = json.loads((folder / "metrics.json").read_text())
                seconds.append(0.0 if "copied_from" in metrics else metrics.get("seconds", 0.0))  # a fit counted once
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
        "runs_code_digest": sorted({m.get("code_digest", "not recorded") for m in manifests}),
        "code_versions": code_versions(manifests),
        "devices": sorted({m["device"] + (f" ({m['gpu']})" if m.get("gpu") else "") for m in manifests
                           if m.get("method") not in CLOSED_FORM_METHODS}),  # the neural runs: numpy fits say cpu
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
            "left_out_methods": invocation.get("left_out", {}),
        },
        "tables": sorted(tables), "figures": sorted(figures),
    }


LOADED = 1.25  # a 15-minute load average above this many times the cores: work beside the grid's own jobs


def suite_times(record: dict, previous: dict) -> dict:
    """The full suite's wall time per device (``tables/suite_times.json``): ``previous`` with the entry of this
    manifest's devices and machine replaced when its workflow invocation made every run the tables use (a whole
    ``make paper``, not a rerun of the report or of a few runs); otherwise ``previous`` unchanged. A suite that
    skipped domains (their input files missing) or left methods out of a domain (leave_out) is a suite of its own:
    the key names what it left out. Each entry keeps the machine's 15-minute load average as the suite ended; a suite
    on a loaded machine (:data:`LOADED`) does not replace one that was not, and goes under its key with ", loaded"."""
    flow, runs = record["workflow"], sum(d["runs"] for d in record["domains"].values())
    if flow["wall_minutes_to_report"] is None or flow["runs_made_in_this_invocation"] != runs:
        return previous
    machine, skipped = record["machine"], sorted(flow.get("skipped_domains") or {})
    key = (f"{', '.join(record['devices'])} on {machine['cores']} cores ({machine['cpu']})"
           + (f", without {', '.join(skipped)}" if skipped else "")
           + "".join(f", without {', '.join(methods)} in {domain}"
                     for domain, methods in sorted((flow.get("left_out_methods") or {}).items())))
    load = (machine.get("load_average") or [None] * 3)[-1]
    loaded = load is not None and load > LOADED * machine["cores"]
    if loaded and key in previous and not previous[key].get("loaded", False):
        key += ", loaded"
    return {**previous, key: {"wall_minutes": flow["wall_minutes_to_report"], "runs": runs,
                              "training_seconds_total": record["training_seconds_total"],
                              "runs_git_sha": record["runs_git_sha"], "finished_utc": record["created_utc"],
                              "load_average_15min": load, "loaded": loaded}}


DOMAIN_TABLES = {  # <domain>_<suffix>: the caption of the per-domain tables of panels the paper does not name
    "summary": "compact summary (L0/L1), mean (sd) over seeds",
    "l2": "L2 stratified k* summary",
    OWN_WILCOXON: "paired Wilcoxon test of test R2 (method - AC-GATE)",
}


# the columns of a table's LaTeX version, for a page (the CSV and Markdown keep every column); the reproduction table
# (some 300 numbers beside the paper's, a lookup for the screen) has none
LATEX_COLUMNS = {
    "l2": ["method", "stratifier", "circular", "mean_abs_rho", "fisher_p", "sign_consistency", "pooled_rho", "p_holm"],
}
NO_LATEX = ("reproduction",)


def latex_view(name: str, frame: pd.DataFrame) -> bool | pd.DataFrame:
    """What the LaTeX version of table ``name`` shows (:func:`acgate.report.render.write_table`'s ``latex``): the
    :data:`LATEX_COLUMNS` of its kind, every column (True), or nothing (False, :data:`NO_LATEX`)."""
    if name in NO_LATEX:
        return False
    columns = next((c for suffix, c in LATEX_COLUMNS.items() if name.endswith(f"_{suffix}")), None)
    return True if columns is None else frame[[c for c in columns if c in frame]]


def caption(name: str) -> str:
    """The caption of a table, also for the per-domain tables of user panels."""
    if name in TABLES:
        return TABLES[name][0]
    suffix = next(s for s in DOMAIN_TABLES if name.endswith(f"_{s}"))
    return f"{name.removesuffix(f'_{suffix}')}: {DOMAIN_TABLES[suffix]}."
