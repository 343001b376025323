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
# # 07 Panel-matched error rates: how often would the audit be wrong on panels like this one?
#
# The calibration of `06_audit_calibration` measures the verdict rules on control panels of its own (100 entities,
# 24 steps). Power and size depend on the panel: its entities, its time span, its splits, how much of the target
# the lagged inputs explain, how noisy and how persistent the rest is. This notebook measures them on surrogates of
# the domain's own panel, which keep its entities, time span, splits, features, proxies and stratifiers and replace
# only the target (`lib/acgate/audit/panel_matched.py` says how):
#
# - **nulls**, one lag curve for every entity (the pooled distributed lag fitted to the panel), with the panel's noise:
#   its persistence, its entities' scales and its common shocks (`one_curve`), with the proxies setting the size of
#   the lagged effect (`effect_size`) or of the noise (`noise_scale`), or how strongly each entity feels one more
#   common shock (`common_shock`): L1, L2 and L3 must not say "supported", nor the lags-differ statement;
# - **positives**, each entity's lag curve shifted so that the true lags spread by 0.25 to 3 lags (sd across
#   entities) along the proxies' direction (`proxy_lags_*`: the proxies hold the lags, so L1, L2, L3 and the
#   lags-differ statement should say "supported"), or by 0.5, 1 or 2 lags along a stratifier the proxies do not
#   carry (`stratifier_lags_*`: the lags differ, which the lags-differ statement should find, but the proxies cannot
#   hold them, so L1, L2 and L3 must not say so). The smallest spread each rule detects in 80 % of the surrogates
#   is what a "not certified" on this panel cannot exclude.
#
# Every replicate is a full audit of a surrogate's runs with the domain's own model, training and audit settings:
# the moderated distributed lag and its three twins in every replicate (a second or a few), AC-GATE and its three
# comparators in the first `neural_replicates` of each scenario (the neural training is most of the cost). The
# audit (`04_audit`) states these rates next to each verdict when the study is current (the same panel, params and
# rules).
#
# - **Inputs**: the domain's panel in `<data_dir>/processed/<domain>/` (from `01_data_prep`), its params file.
# - **Outputs**: `<runs_dir>/<domain>/panel_matched/` (every replicate's panel, runs and audit, `replicates.csv`,
#   `panel_matched.json` with the error rates), `<tables_dir>/<domain>_panel_matched.{csv,md,tex,json}`,
#   `<figures_dir>/<domain>_panel_matched.{png,pdf}`.

# %% tags=["parameters"]
domain: str = "example_panel"  # a data domain: params/<domain>.yaml with a data section (economics, energy, yours)
params_file: str = ""  # params file; empty means params/<domain>.yaml
profile_file: str = ""  # optional overlay profile, e.g. params/smoke_panel.yaml
runs_dir: str = ""  # the study goes to <runs_dir>/<domain>/panel_matched/; empty: runs, or runs/<profile>
data_dir: str = ""  # the panel is read from <data_dir>/processed/<domain>/; empty: data, or <runs_dir>/data
tables_dir: str = ""  # <domain>_panel_matched.{csv,md,tex,json} go here; empty: tables, or <runs_dir>/tables
figures_dir: str = ""  # <domain>_panel_matched.{png,pdf} go here; empty: figures, or <runs_dir>/figures
scenarios: list = []  # scenarios to run; empty means every one the panel allows (acgate.audit.surrogates.SCENARIOS)
replicates: int = 15  # surrogate audits of each scenario (the classical family in every one)
neural_replicates: int = 0  # of those, how many also train the AC-GATE family (the first of each scenario)
null_replicates: int = 36  # surrogate audits of each null scenario (36 bound its rate below 10 %); 0: replicates
seeds: int = 5  # seeds a replicate trains (5: the fewest whose one-sided Wilcoxon can reach p < 0.05); 0: n_seeds
jobs: int = 0  # replicates run at once, each in its own single-thread process; 0 means one per CPU core
# %%
import pandas as pd
from IPython.display import display

from acgate.audit import calibration, panel_matched, surrogates
from acgate.data.prep import prepared_panel
from acgate.layout import grid_folders, panel_matched_dir
from acgate.notebook.resolve import resolve
from acgate.report import figures, render

params, root = resolve(domain, params_file, profile_file)
if params.data is None:
    raise ValueError(f"domain '{domain}' is synthetic: its panels carry their own truth, and 06_audit_calibration "
                     "measures the rules on such panels; this notebook is for data domains (a data section)")
folders = grid_folders([profile_file], runs_dir, data_dir, tables_dir, figures_dir)
panel_matched.check_size(replicates, neural_replicates, seeds or params.n_seeds, jobs, null_replicates,
                         names={"neural": "neural_replicates"}, zero={"seeds": "0: the domain's n_seeds"})
panel = prepared_panel(params, root / folders["data_dir"])
out = panel_matched_dir(root / folders["runs_dir"], params.domain)
source = surrogates.fit_source(panel, params)
names = source.scenarios(scenarios)

# %% [markdown]
# ## What the surrogates are made from
# The pooled lag curve (standardised units, one row per feature, lags 1..K), the noise's AR(1) coefficient (and the
# raw statistic it was debiased from) and median innovation sd, its common shocks (Pesaran's CD of the residuals
# before and after the common factor is taken out, and the share of their variance it holds), the share of the
# target's variance the pooled lagged part explains, how the proxies' direction and the stratifier scenarios' score
# were chosen, and the spread of the true k* each positive reaches (a short window cannot hold a spread of 2 lags).

# %%
for key, value in source.about.items():
    print(f"{key}: {value}")
pd.Series({name: surrogates.SCENARIOS[name].description for name in names}, name="surrogate").to_frame()

# %% [markdown]
# ## The replicates
# One line per finished replicate, with the time so far and an estimate of what is left. On a GPU the AC-GATE family
# of each scenario's replicates is trained first, as one stacked model per method (a line per scenario), and the
# replicates keep those runs. An earlier study of this size in the tables folder keeps the rates of each reference
# whose rules have not changed since (`RULES_VERSIONS` of `acgate.audit.verdicts`): after a change to the classical
# rules only the classical family is measured again. Delete that study's record to measure everything again.

# %%
tables = root / folders["tables_dir"]
study = panel_matched.run_study(source, params, out, scenarios, replicates, neural_replicates, seeds or params.n_seeds,
                                jobs, null_replicates, keep=tables / f"{params.domain}_panel_matched.json")

# %% [markdown]
# ## Error rates on panels like this one
# Per scenario, reference, rule and layer: the share of replicates "supported" with its 95 % Clopper-Pearson interval
# and the right answer (`truth`): where it is "not supported", the share is the rule's false-support rate, else its
# power. Then, per reference and layer of the calibrated rules, the sentence the audit prints next to its verdict.
# The figure `<domain>_panel_matched` shows the same shares per surrogate (its row labels give the replicates each
# reference's shares stand on); its caption is here and in docs/results.md, not in the figure.

# %%
table, rates = study.table, study.rates
# the earlier study's record goes first: a run that stops between the table and the record keeps nothing of it
(tables / f"{params.domain}_panel_matched.json").unlink(missing_ok=True)
render.write_table(table, tables, f"{params.domain}_panel_matched",
                   f"Panel-matched error rates of {params.domain}: share of surrogate audits \"supported\" per "
                   "scenario, reference, rule and layer, with 95 % Clopper-Pearson intervals and the right answer "
                   "(in LaTeX: supported/replicates, * where supported is right).", calibration.compact_table(table))
for reference, layers in rates.items():
    for layer, rate in layers.items():
        print(f"{reference:12s} {layer}: {rate['sentence']}")

# %%
pd.set_option("display.width", 200, "display.max_rows", 200)
display(table[table.rule == "calibrated"].pivot_table(index=["control", "scenario"], columns=["reference", "layer"],
                                                      values="share_supported"))
fig = figures.calibration_figure(table)
figures.save_figure(fig, root / folders["figures_dir"], f"{params.domain}_panel_matched")
# last: the record the audit reads (and its copy beside the table), written once the table and the figure are
for path in (out / panel_matched.RECORD, tables / f"{params.domain}_panel_matched.json"):
    study.write_record(path, params)
