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
# # 06 Audit calibration: how often does each verdict say "supported" on panels with a known truth?
#
# A verdict is evidence only if its error rates are known. This notebook runs replicate audits of control panels,
# each a full audit (03_train's `run_method`, 04_audit's `audit_domain`) of fresh panel draws with their own seeds,
# and counts how often the paper's rules and the calibrated rules say "supported", for each of the two references the
# audit judges: AC-GATE (against the shared gate, the shuffled-proxy gate and the Proxy Shared-Gate) and the
# classical moderated distributed lag (against its shared-lag, shuffled-proxy and proxy-scaled twins):
#
# - **negative controls** (the proxies hold no lag information): every entity has the same lag
#   (`homogeneous_lags`); a pure-noise target; a constant target; proxies shuffled across entities; `lag_free` k*
#   (no training: a fixed random function of the proxies, with persistence as every method's forecast); every
#   entity has the same lags while the proxies set the size of the lagged effect (`effect_size`) or the noise
#   (`noise_scale`), while the noise is autocorrelated (`ar_noise`, coefficient 0.5; `persistent_noise`, 0.95 as in
#   the economics panel), or while the inputs pass through a hinge (`threshold_driver`); and lags drawn at random,
#   apart from the proxies (`random_lags`). No replicate may be "supported" in L1 or L2, also with the practical
#   spread threshold at zero.
# - **positive controls** (lags differ by entity as the proxies say): the linear and nonlinear maps, two lag regimes
#   (lag 3 where the moderator z >= 0.5, lag K below), and the linear map seen through weak proxies. L1 and L2
#   should be "supported" in at least 90 % of replicates.
# - **lags differ**, the statement apart from the layers, has its own truth: the lags differ in `shuffled_proxies`,
#   `lag_free` (whose panel has linear lags) and `random_lags` too.
#
# The panels are smaller than the paper's (`params/audit_calibration.yaml`: 100 entities, 24 steps, K = 8, a
# narrower network, 5 seeds per replicate) so that many replicates fit in the time. `L2 test alone` is the
# calibrated L2 test without its gates (L1 supported, seed agreement): its share on the negative controls is the
# size of the test itself. 50 replicates of a negative control bound its false-support rate below 7.1 % (95 %) when
# none is supported; 30 of a positive one put the power's lower bound at 88 % when all are.
#
# The calibration takes about 70 minutes on 2 cores from scratch, so `make paper` keeps a calibration measured under
# the current rules (`RULES_VERSIONS` of `acgate.audit.verdicts`, a version per reference, recorded in
# `audit_calibration.json` beside the table) and says so; `make calibrate` measures it again. Where the rules of one
# reference changed, this notebook keeps the other reference's rows of the calibration in `tables_dir` (the same
# settings) and trains and audits only the changed reference's family; a scenario added to the calibration is
# measured alone, the rows of the others kept. Delete that record to measure everything.
#
# - **Inputs**: `params/audit_calibration.yaml`.
# - **Outputs**: `<runs_dir>/audit_calibration/` (every replicate's panels, runs and audit, and `replicates.csv`),
#   `<tables_dir>/audit_calibration.{csv,md,tex,json}`, `<figures_dir>/audit_calibration.{png,pdf}`.

# %% tags=["parameters"]
params_file: str = "params/audit_calibration.yaml"  # panel sizes, methods, training and audit settings
scenarios: list = []  # scenarios to run; empty means all of acgate.audit.calibration.SCENARIOS
negative_replicates: int = 50  # replicate audits of each negative control
positive_replicates: int = 30  # replicate audits of each positive control
jobs: int = 0  # replicates at once, each a single-thread process (1: in this one); 0: one per CPU core
runs_dir: str = "runs"  # replicates go to <runs_dir>/audit_calibration/
tables_dir: str = "tables"  # audit_calibration.{csv,md,tex} go here
figures_dir: str = "figures"  # audit_calibration.{png,pdf} go here
# %%
import functools
import os
import time

import pandas as pd
from IPython.display import display

from acgate.audit import calibration
from acgate.audit.verdicts import FAMILIES
from acgate.config import load_params
from acgate.layout import project_root
from acgate.report import figures, render
from acgate.runs import write_csv

root = project_root()
params = load_params(root / params_file)
names = list(scenarios) or list(calibration.SCENARIOS)
kept, kept_rows = calibration.kept_rates(root / tables_dir, params, names, negative_replicates, positive_replicates)
measure = calibration.to_measure(kept_rows, names, [r for r in FAMILIES if r in params.methods])
plan = calibration.replicate_plan([name for name in names if measure[name]], negative_replicates, positive_replicates)
workers = jobs or os.cpu_count() or 1
out = root / runs_dir / "audit_calibration"
(root / tables_dir / calibration.RECORD).unlink(missing_ok=True)  # written again last, once table and figure are
if kept:
    print(calibration.kept_sentence(kept, tables_dir, calibration.measured_text(measure)))
print(f"{len(plan)} replicate audits of {len(names)} scenarios, {params.n_seeds} seeds each, "
      f"{workers} at once -> {out}")

# %% [markdown]
# ## The replicates
# One line per finished replicate, with the time so far and an estimate of what is left.

# %%
start, started = time.perf_counter(), calibration.provenance(params)
work = functools.partial(calibration.run_replicate, params=params, root=out, measure=measure)
replicates = calibration.run_replicates(plan, work, jobs=workers) if plan else pd.DataFrame(columns=["reference"])
minutes = (time.perf_counter() - start) / 60
write_csv(out / "replicates.csv", replicates, index=False)
print(f"{len(plan)} replicates in {minutes:.1f} min ({workers} processes)")

# %% [markdown]
# ## Error rates
# Per scenario, rule and layer: the share of replicates "supported" with its 95 % Clopper-Pearson interval, and the
# right answer (`truth`). Where the truth is "not supported" this is the rule's false-positive rate, elsewhere its
# power. The figure `audit_calibration` shows these shares for L1, L2, L3 and the lags-differ statement, each
# verdict against the truth of its scenario (a grey cross; the row labels give the replicate counts); its caption is
# here and in docs/results.md, not in the figure.

# %%
table = calibration.merged_table(kept_rows, replicates)
render.write_table(table, root / tables_dir, "audit_calibration",
                   "Audit calibration: share of replicate audits \"supported\" per scenario, rule and layer, with "
                   "95 % Clopper-Pearson intervals and the right answer (in LaTeX: supported/replicates, * where "
                   "supported is right).", calibration.compact_table(table))
pd.set_option("display.width", 200, "display.max_rows", 200)
display(table.pivot_table(index=["control", "scenario"], columns=["reference", "rule", "layer"],
                          values="share_supported"))

# %%
fig = figures.calibration_figure(table)
figures.save_figure(fig, root / figures_dir, "audit_calibration")
# last: the record that lets a grid keep this calibration, written once the table and the figure are
calibration.write_record(root / tables_dir, params, names, negative_replicates, positive_replicates, minutes, workers,
                         started, kept)

# %% [markdown]
# ## The targets
# Where "supported" is wrong (every negative control in L1 and L2, under the calibrated rules at the default spread
# threshold and at zero) no replicate may say it; where it is right, L1 and L2 should say it in at least 90 % of
# replicates. The lags-differ statement is held to the same two targets against its own truth.

# %%
for reference, rows in table[table.rule != "paper"].groupby("reference"):
    wrong = rows[(rows.truth == "not supported") & rows.layer.isin(["L1", "L2", "lags differ"])]
    right = rows[(rows.truth == "supported") & rows.layer.isin(["L1", "L2", "lags differ"])]
    print(f"{reference}: replicates supported where the truth is not (L1, L2, lags differ; both thresholds):",
          int(wrong.supported.sum()))
    print(f"{reference}: power where it is (lowest share):",
          right.groupby(["rule", "layer"]).share_supported.min().round(2).to_dict())
