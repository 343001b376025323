# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: -jupytext.text_representation
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 Audit calibration: how often does each verdict say "supported" on panels with a known truth?
#
# A verdict is evidence only if its error rates are known. This notebook runs replicate audits of control panels,
# each a full audit (03_train's `run_method`, 04_audit's `audit_domain`) of fresh panel draws with their own seeds,
# and counts how often the paper's rules and the calibrated rules say "supported", for each of the two references the
# audit judges: AC-GATE (against the shared gate and the shuffled-proxy gate) and the classical moderated distributed
# lag (against its shared-lag and shuffled-proxy twins):
#
# - **negative controls** (k* carries no lag information): every entity has the same lag (`homogeneous_lags`,
#   with a stratifier about 0.9 correlated with a proxy), a pure-noise target, a constant target, proxies
#   shuffled across entities, and `lag_free` k* (no training: a fixed random function of the proxies, with
#   persistence as every method's forecast). No replicate may be "supported" in L1 or L2.
# - **positive controls** (lags differ by entity): the linear and nonlinear scenarios, and two lag regimes (lag 3
#   where the moderator z >= 0.5, lag K below). The heterogeneity verdict (L1) should be "supported" in at least
#   90 % of replicates.
#
# The panels are smaller than the paper's (`params/audit_calibration.yaml`: 100 entities, 24 steps, K = 8, a
# narrower network, 5 seeds per replicate) so that many replicates fit in minutes. `L2 test alone` is the
# calibrated L2 test without its gates (L1 supported, seed agreement): its share on the negative controls is the
# size of the test itself.
#
# - **Inputs**: `params/audit_calibration.yaml`.
# - **Outputs**: `<runs_dir>/audit_calibration/` (every replicate's panels, runs and audit, and `replicates.csv`),
#   `<tables_dir>/audit_calibration.{csv,md,tex}`, `<figures_dir>/audit_calibration.{png,pdf}`.

# %% tags=["parameters"]
params_file: str = "params/audit_calibration.yaml"  # panel sizes, methods, training and audit settings
scenarios: list = []  # scenarios to run; empty means all of acgate.calibration.SCENARIOS
trained_replicates: int = 10  # replicate audits of each trained scenario
lag_free_replicates: int = 40  # replicate audits of the lag-free control (no training, so cheap)
jobs: int = 0  # replicates run at once, each in its own single-thread process (1: one after another, in the
#   notebook's own process); 0 means one per CPU core
runs_dir: str = "runs"  # replicates go to <runs_dir>/audit_calibration/
tables_dir: str = "tables"  # audit_calibration.{csv,md,tex} go here
figures_dir: str = "figures"  # audit_calibration.{png,pdf} go here
# %%
import os
import time

import pandas as pd
from IPython.display import display

from acgate import calibration, figures, render
from acgate.config import load_params
from acgate.layout import project_root
from acgate.runs import atomic_write

root = project_root()
params = load_params(root / params_file)
names = list(scenarios) or list(calibration.SCENARIOS)
plan = [(name, r) for name in names
        for r in range(trained_replicates if calibration.SCENARIOS[name].trained else lag_free_replicates)]
workers = jobs or os.cpu_count() or 1
out = root / runs_dir / "audit_calibration"
print(f"{len(plan)} replicate audits of {len(names)} scenarios, {params.n_seeds} seeds each, "
      f"{workers} at once -> {out}")

# %% [markdown]
# ## The replicates
# One line per finished replicate, with the time so far and an estimate of what is left.

# %%
start = time.perf_counter()
replicates = calibration.run_replicates(plan, params, out, jobs=workers)
minutes = (time.perf_counter() - start) / 60
atomic_write(out / "replicates.csv", lambda f: replicates.to_csv(f, index=False))
print(f"{len(replicates)} replicates in {minutes:.1f} min ({workers} processes)")

# %% [markdown]
# ## Error rates
# Per scenario, rule and layer: the share of replicates "supported" with its 95 % Clopper-Pearson interval. On the
# negative controls this is the rule's false-positive rate, on the positive controls its power.

# %%
table = calibration.calibration_table(replicates)
render.write_table(table, root / tables_dir, "audit_calibration",
                   "Audit calibration: share of replicate audits \"supported\" per scenario, rule and layer, with "
                   "95 % Clopper-Pearson intervals.")
pd.set_option("display.width", 200, "display.max_rows", 200)
display(table.pivot_table(index=["control", "scenario"], columns=["reference", "rule", "layer"],
                          values="share_supported"))

# %%
fig = calibration.calibration_figure(table)
figures.save_figure(fig, root / figures_dir, "audit_calibration")

# %% [markdown]
# ## The targets
# No negative-control replicate may be "supported" in L1 or L2 under the calibrated rules; L1 must be "supported"
# in at least 90 % of the positive-control replicates.

# %%
for reference, calibrated in table[table.rule == "calibrated"].groupby("reference"):
    false_positives = calibrated[(calibrated.control == "negative") & calibrated.layer.isin(["L1", "L2"])]
    power = calibrated[(calibrated.control == "positive") & (calibrated.layer == "L1")]
    print(f"{reference}: negative controls, replicates supported in L1 or L2:", int(false_positives.supported.sum()))
    print(f"{reference}: positive controls, share with L1 supported:",
          power.set_index("scenario").share_supported.round(2).to_dict())
