# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: -jupytext.text_representation
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 Audit: the layered lag audit of one domain
#
# Runs the paper's four audit layers on every finished run of a domain:
#
# - **L0**: forecast metrics on the test window;
# - **L1**: is k* more than a constant? (the paper's epsilon, and a spread a reader would notice);
# - **L2**: is k* aligned with pre-specified stratifiers beyond chance? (entity-label permutation tests);
# - **L3**: does k* recover the true lags? (synthetic panels only).
#
# It then runs the paired Wilcoxon tests against each reference and gives the verdict for each layer twice, with the
# rule behind it: under the paper's rules, and under the calibrated rules whose error rates on negative and positive
# controls are measured by `06_audit_calibration` (docs/audit.md says how they differ). The references are AC-GATE
# and, where it ran, the classical yardstick, the moderated distributed lag, each judged against its own shared-lag,
# shuffled-proxy and proxy twins; the two are then compared head to head. Apart from the layers it says whether the
# entities' lags differ at all, whatever the proxies say. Runs that are stale or incomplete are named and left out,
# and the audit of what is current and complete still runs.
#
# - **Inputs**: `runs/<domain>/seed<NN>/<method>/` (from `03_train`); stratifiers and proxies from the panels
#   in `data/processed/<domain>/`.
# - **Outputs**: `runs/<domain>/audit/`: `l0.csv`, `l1.csv`, `l2.csv`, `l2_summary.csv`, `l3.csv`,
#   `wilcoxon.csv`, `heldout.csv`, `seed_agreement.csv`, `kstar_by_entity.csv`, `neural_vs_classical.csv`,
#   `lag_tests.csv`, `verdicts.json` (columns in docs/audit.md), and the audit report: `report.html` (one
#   self-contained page: the verdicts with their evidence, warnings and error rates, the figures, the data and the
#   provenance) and its Markdown twin `report.md` (its figures in `report_figures/`).

# %% tags=["parameters"]
domain: str = "synthetic_linear"  # reads params/<domain>.yaml (its audit section) and runs/<domain>/
params_file: str = ""  # params file; empty means params/<domain>.yaml
profile_file: str = ""  # optional overlay profile, e.g. params/smoke.yaml
runs_dir: str = ""  # runs from <runs_dir>/<domain>/, the audit to its audit/; empty: runs (runs/<profile>)
data_dir: str = ""  # panels from <data_dir>/processed/<domain>/; empty: data, or <runs_dir>/data if not runs
seeds: int = 0  # audit seeds 0..seeds-1; 0 means the params file's n_seeds
methods: list = []  # methods to audit; empty means the params file's list
overwrite: bool = False  # replace an audit asked for otherwise (params, audit settings, seeds, methods; workflow: true)
# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from acgate.audit.domain_audit import audit_domain, audit_request, other_request, over_seeds
from acgate.audit.panel_matched import RECORD, at_seeds, current_rates
from acgate.audit.run_folders import load_panel
from acgate.layout import audit_dir, grid_folders, panel_matched_dir, shown
from acgate.notebook.resolve import resolve
from acgate.report import audit_figures
from acgate.report.audit_page import write_audit_report
from acgate.report.page_warnings import lags_differ_rate, power_warning, rate_warning
from acgate.report.reading import QUESTIONS, lags_differ_reading, readings

# %% [markdown]
# ## The audit
# Reads every run of the domain, runs the layers and the tests, states the verdicts and writes them with the tables
# to the audit folder. Opened with its defaults (in JupyterLab, say), it reads `runs/`; a grid made with a profile or
# by `make quick` is a folder inside it, which the error names: set `runs_dir` (and `data_dir`) to it.

# %%
params, root = resolve(domain, params_file, profile_file)
folders = grid_folders([profile_file], runs_dir, data_dir)  # a profile's own, when one is set
runs_root, data_root = root / folders["runs_dir"], root / folders["data_dir"]
tables = list(dict.fromkeys((root / folders["tables_dir"], root / "tables")))  # this grid's tables, the repository's
out_dir = audit_dir(runs_root, params.domain)
if not overwrite and (other := other_request(out_dir, audit_request(params, seeds, methods))):
    raise FileExistsError(f"{shown(out_dir)} holds another audit ({other}), a grid's perhaps: this run would "
                          "replace it. Add overwrite=true to replace it (a run with that audit's settings brings it "
                          "back), or audit the runs of another runs_dir")
result = audit_domain(params, runs_root, data_root, seeds, methods)
if params.data is not None:  # a data domain: the error rates of a panel-matched study (07) that is current for it:
    #   this grid's own, else the copy beside this grid's tables or the repository's (committed: economics, energy)
    #   (an AC-GATE rate only where the study's replicates have this audit's seed count: at_seeds)
    studies = [panel_matched_dir(runs_root, params.domain) / RECORD,
               *(folder / f"{params.domain}_panel_matched.json" for folder in tables)]
    result.error_rates = at_seeds(current_rates(studies, load_panel(data_root, params.domain, 0), params),
                                  result.request["seeds"])
result.write(out_dir)
print(f"audited {params.domain}: {result.l0.seed.nunique()} seeds x {result.l0.method.nunique()} methods "
      f"-> {shown(out_dir)}")
for problem in result.problems:
    print("PROBLEM:", problem)

# %% [markdown]
# ## Runs left out
# Only runs that are current (trained under these params, on this panel) and complete (every artifact, one k* per
# entity, every prediction `metrics.json` counted) for the seeds and methods asked for are audited. Every other run
# folder is listed here with the reason; the workflow retrains what is stale or missing before it audits.

# %%
if len(result.excluded):
    display(result.excluded)
else:
    print("none: every run asked for is current and complete")

# %% [markdown]
# ## Verdicts
# One line per layer for each reference (AC-GATE, and the moderated distributed lag where it ran): the calibrated
# verdict, and the paper rule's beside it; then whether the entities' lags differ at all, whatever the proxies say
# (per-entity F-tests of lag-curve shape, apart from the layers), and AC-GATE against the classical model. For a
# data domain with a current panel-matched study (`07_panel_matched`), each calibrated verdict is followed by its
# error rates on surrogates of this panel: how often the rule says "supported" where its answer must be no (the
# proxies hold no lag information; for the lags-differ statement, every entity has the same lags), and how often
# it does where the lags spread by 0.25 to 3 lags; a "not certified" adds the smallest spread the rule detects on
# surrogates of this panel in 80 % of them, the lag differences it could have missed. The
# verdicts depend only on the runs and the panels, so re-executing this notebook must print the same (nbval checks
# this cell). Warnings say where the number of seeds cannot reach alpha for a layer, where lags pile up at the
# window's edge, or where a test measures less than it seems to.

# %%
# NBVAL_CHECK_OUTPUT
rates = result.error_rates.get("error_rates", {})
for reference, found in result.verdicts_by_reference.items():
    for layer, cell in found["calibrated"].items():
        print(f"{reference:12s} {layer}: {cell['verdict']:13s} (paper rule: {found['paper'][layer]['verdict']})")
        if layer in rates.get(reference, {}) and cell["verdict"] != "not claimed":
            print(f"{'':17s}{rates[reference][layer]['sentence']}")
            if cell["verdict"] == "not certified" and rates[reference][layer].get("unseen"):
                print(f"{'':17s}{rates[reference][layer]['unseen']}")
            if warning := rate_warning(rates[reference][layer], cell["verdict"], params.audit.alpha):
                print(f"{'':17s}WARNING: {warning}")
        if warning := power_warning(rates, reference, layer, cell["verdict"]):
            print(f"{'':17s}WARNING: {warning}")
print(f"lags differ: {result.lags_differ['verdict']} ({lags_differ_reading(result)})")
differ = lags_differ_rate(rates)  # one statement for both references: a test of the classical fit, its rates
if differ:
    print(f"{'':17s}{differ['sentence']}")
    if result.lags_differ["verdict"] == "not certified" and differ.get("unseen"):
        print(f"{'':17s}{differ['unseen']}")
    if warning := rate_warning(differ, result.lags_differ["verdict"], params.audit.alpha):
        print(f"{'':17s}WARNING: {warning}")
print("\nWhat this panel shows (one answer per question from both references):")
for question, text in readings(result).items():
    print(f"- {QUESTIONS[question]} {text}")
if rates:
    study = result.error_rates["settings"]
    nulls = f", {study['null_replicates']} of each null" if study.get("null_replicates") else ""
    print(f"panel-matched error rates: {study['replicates']} surrogates a scenario ({study['neural_replicates']} with "
          f"AC-GATE{nulls}), {study['seeds']} seeds each (this audit: {result.l0.seed.nunique()} seeds)")
    if result.error_rates.get("stale"):
        print(f"{'':17s}not for {', '.join(result.error_rates['stale'])}: measured under other rules; run the study "
              "again (07_panel_matched measures only what changed)")
elif result.error_rates.get("note"):
    print("panel-matched error rates:", result.error_rates["note"])
for classical, line in result.neural_vs_classical_verdict.items():
    for aspect, outcome in line.items() if classical != "rule" else ():
        if aspect != "evidence":
            print(f"AC-GATE against {classical}, {aspect}: {outcome}")
for warning in result.warnings():
    print("WARNING:", warning)

# %%
pd.set_option("display.max_colwidth", None)
pd.concat({(reference, rule): pd.DataFrame(found[rule]).T for reference, found in result.verdicts_by_reference.items()
           for rule in ("calibrated", "paper")}, names=["reference", "rule", "layer"])[["verdict", "evidence", "rule"]]

# %% [markdown]
# ## AC-GATE against the classical yardstick
# The held-out test loss of AC-GATE against the moderated distributed lag's and the two-stage model's on the same rows
# (over seeds and over entities, as the calibrated L0 compares), and on synthetic panels the recovery of the true lags
# per seed.
# `advantage` is AC-GATE's (positive: AC-GATE better); `outcome` says whether either is better at alpha.

# %%
if result.neural_vs_classical.empty:
    print("the classical model did not run")
else:
    display(result.neural_vs_classical.round(4))
    audit_figures.neural_vs_classical_figure(result)  # not None: the comparison exists
    plt.show()

# %% [markdown]
# ## Held-out evidence: do the proxies hold the lags?
# Each reference's test loss against every comparator's on the same test rows: `mean_loss_diff` is comparator minus
# reference (positive: the reference is better), with one-sided p-values over seeds (paired Wilcoxon) and over
# entities (block bootstrap), and Holm-adjusted p over the comparators. The calibrated L1 needs AC-GATE to beat the
# shared gate (No-AC-Encoder), the gate trained on shuffled proxies and the Proxy Shared-Gate (one gate for all, the
# proxies free to set everything else), and the moderated distributed lag to beat its shared-lag (shared_dl),
# shuffled-proxy (shuffled_dl) and proxy-scaled (proxy_scaled_dl) twins. Below it, the seed-to-seed Spearman of each
# method's k* where seeds share entities: a k* ordering that changes with the seed supports no statement about
# which entities have longer lags. The figure shows each comparator's loss relative to the reference's (in bold: the
# twins the calibrated L1 must beat).

# %%
display(result.heldout.round(4), result.seed_agreement.round(3))
if audit_figures.heldout_figure(result) is not None:
    plt.show()

# %% [markdown]
# ## Tests under the panel's own errors: do the proxies hold the lags, and do the lags differ at all?
# Per panel (one per seed where seeds draw their own, else one), in-sample on every observed target step, by feasible
# GLS under the panel's AR(1) errors and entity noise scales (`acgate.audit.gls`): lag curves moderated by the proxies
# against the entity-scaled shape (judged against a parametric bootstrap of that fit) and the shared curve (against
# permutations of the proxies): the classical reference's L1; and every entity's own curves against the shared shape
# scaled for it, pooled over the entities and judged against a parametric bootstrap (the lags-differ statement).
# Supported while no reference's L1 that speaks for the panel is (`acgate.report.reading`: one whose rates here are
# measured, or either where neither's are): the lags differ, but the proxies do not explain them.

# %%
display(result.lag_tests.round(4))
print(result.lags_differ["verdict"], "-", lags_differ_reading(result))

# %% [markdown]
# ## L0 and L1: forecasts and the spread of k*, mean (sd) over seeds
# `persistence` (y_hat_t = y_{t-1}) is the floor any forecasting claim must be read against. The figure: each
# method's k* across entities, its spread per seed against L1's practical threshold, and the seeds' agreement.

# %%
layers = result.l0.merge(result.l1, on=["seed", "method"], how="left")  # persistence has no k*
display(over_seeds(layers, ["mse", "r2_by_time", "r2_pooled", "kstar_sd"]).join(
    layers.groupby("method", sort=False)[["degenerate_paper", "degenerate_practical", "share_at_window_edge"]].mean()))
if audit_figures.kstar_figure(result) is not None:
    plt.show()

# %% [markdown]
# ## L2: stratifier alignment
# Per method and stratifier, over the seeds that pass the paper's L1 guard: mean |rho|, median rho, the share
# of seeds with permutation p < alpha, Fisher's combined p (which assumes independent seeds: `fisher_valid` is
# false where seeds share entities), sign consistency, and the seed-pooled test where every seed has the same
# entities. `circular` marks a stratifier that (nearly) duplicates one model proxy (the paper rule);
# `circular_joint` one whose ranks all proxies together predict (`proxy_r_joint`, the calibrated rule).
# `alignment_p` is the calibrated rule's permutation p and `p_holm` the same, Holm-adjusted over the non-circular
# stratifiers; `sign_consistency` the share of seeds that agree on the sign. `alignment_lag_free_median` and
# `lag_free_p` say how closely lag-free k* (random functions of the proxies) would align, and how far k* goes
# beyond it: evidence for the reader, not a gate.

# %%
result.l2_summary.round(4) if not result.l2_summary.empty else "no stratifiers"

# %%
if audit_figures.stratifier_rho_figure(result) is not None:
    plt.show()

# %% [markdown]
# ## k* against each stratifier
# For AC-GATE (or the moderated distributed lag, when only the classical models were audited): every entity of every
# seed (for synthetic panels each seed draws new entities, so the points are pooled; for real panels, the seed-mean
# k* per entity).

# %%
if audit_figures.kstar_stratifier_figure(result, data_root) is not None:  # audit.reference, else the first that ran
    plt.show()

# %% [markdown]
# ## L3: recovery of the true lags (synthetic panels)
# MAE and Spearman of k* against the rounded lag centre (the paper's target) and against the DGP's own mean
# lag. Spearman is undefined where k* is the same for every entity. Below, each reference's learned k* against the
# true lag centre, every entity of every seed.

# %%
if not result.l3.empty:
    display(over_seeds(result.l3, [c for c in result.l3.columns if c not in ("seed", "method")]))
if audit_figures.recovery_figure(result) is not None:
    plt.show()

# %% [markdown]
# ## Paired Wilcoxon tests against the reference method
# Differences are method minus reference on the seeds both have; W is min(W+, W-) (scipy), p two-sided.

# %%
result.wilcoxon.round(5)

# %% [markdown]
# ## The audit report
# One page for readers without Jupyter (`report.html`, self-contained; `report.md`, its Markdown twin with the
# figures in `report_figures/`): the verdicts with their evidence, warnings and error rates, the figures above, the
# data (entities kept and dropped, time span, splits) and the provenance of the runs (code versions, devices, dates,
# parameters). The generic error rates come from the calibration of the rules beside this grid's tables, else the
# repository's (`tables/audit_calibration.csv`; for AC-GATE without the gate's memory, the own-panel default, the
# same file in their `gate_memory_off/` folder).

# %%
report_html, report_md = write_audit_report(result, params, runs_root, data_root, out_dir, tables)
print(f"audit report: {shown(report_html)} (Markdown: {report_md.name})")
