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
# # 01 Data prep: from official files (or your CSV) to a cleaned panel
#
# Loads a real domain's inputs and applies the cleaning rules (`lib/acgate/data/prep.py`):
#
# - positivity filters;
# - an entity missing share of at most 15 %;
# - features interpolated linearly only between observed values, never extrapolated;
# - targets never filled.
#
# It then builds the panel, with proxies, static features and stratifiers summarised from training-window
# history only, and shows what happened.
#
# - **Inputs**: the official files in `$ACGATE_RAW_DIR` or `data/raw/` (`make data` downloads them), or a
#   user's long CSV (`data.loader: csv`).
# - **Outputs**: `data/processed/<domain>/`: `panel.npz`, `panel.json`, `stratifiers.csv`, `entities.csv` (every
#   entity with kept/dropped and the reason) and `manifest.json` (parameters, input files with sha256, git SHA).

# %% tags=["parameters"]
domain: str = "economics"  # economics, energy, their _proxy_shuffle twins, or your own params/<domain>.yaml
params_file: str = ""  # params file; empty means params/<domain>.yaml
profile_file: str = ""  # optional overlay profile
data_dir: str = ""  # the panel goes to <data_dir>/processed/<domain>/; empty: data, or runs/<profile>/data
# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from acgate.data import prep
from acgate.data.sources import input_files
from acgate.layout import grid_folders, panel_dir, shown
from acgate.notebook.resolve import resolve
from acgate.runs import manifest

params, root = resolve(domain, params_file, profile_file)
data_root = root / grid_folders([profile_file], data_dir=data_dir)["data_dir"]  # a profile's own with one
frame, source = prep.load_long(params, root)
prepared = prep.prepare(frame, params, source)
panel = prepared.panel
out_dir = panel_dir(data_root, params.domain)
prep.save(prepared, out_dir, manifest(params.to_dict(), seed=-1, device="none", inputs=input_files(params, root)))
print(f"{params.domain}: {panel.n_entities} of {len(prepared.report)} entities kept, {len(panel.times)} years "
      f"{panel.times[0]}-{panel.times[-1]}; saved to {shown(out_dir)}")
if prepared.warning:  # also in the terminal, and in the audit
    print(f"WARNING: {prepared.warning}")

# %% [markdown]
# ## Entities kept and dropped
# The number kept and the reason for every drop, and how many observed targets were left out because their lag
# window reaches a feature before its first or after its last observed value (`data.feature_edges`). The counts
# depend only on the input files and the rules, so re-executing must print the same (nbval checks this cell).

# %%
# NBVAL_CHECK_OUTPUT
reasons = prepared.report.reason.str.replace(r"\d\.\d\d", "x", regex=True).value_counts()
print(f"kept {int(prepared.report.kept.sum())}, dropped {int((~prepared.report.kept).sum())}, targets left out "
      f"{int(prepared.report.targets_left_out.sum())}")
print(reasons.to_string())

# %%
prepared.report[~prepared.report.kept].head(40)

# %% [markdown]
# ## Coverage by year
# Share of entities whose target and every feature are observed in each year, before interpolation: all entities
# in the source, and the entities kept.

# %%
fig, ax = plt.subplots(figsize=(7, 3))
prepared.coverage.plot(ax=ax)
for start, label in ((panel.val_start, "validation"), (panel.test_start, "test")):
    ax.axvline(start - 0.5, color="k", ls="--", lw=0.8)
    ax.text(start, ax.get_ylim()[0], f" {label}", va="bottom", fontsize=8)
ax.set(xlabel="year", ylabel="share observed", ylim=(0, 1.05), title=f"{params.domain}: coverage")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## The target
# Distribution of the target over all kept entity-years (observed values only), by split.

# %%
target = pd.DataFrame({"y": panel.Y.ravel(), "year": np.tile(panel.times, panel.n_entities)}).dropna()
target["split"] = np.where(target.year < panel.val_start, "train",
                           np.where(target.year < panel.test_start, "val", "test"))
fig, ax = plt.subplots(figsize=(6, 3))
sns.histplot(data=target, x="y", hue="split", bins=40, ax=ax, element="step")
ax.set(xlabel=params.data.target)
plt.show()

# %% [markdown]
# ## Stratifiers, proxies and their correlations
# Spearman correlations across entities. A stratifier that nearly duplicates a proxy gives circular L2 evidence;
# the audit flags it.

# %%
entity_table = pd.concat([panel.stratifiers.add_prefix("stratifier: "),
                          pd.DataFrame(panel.P, index=panel.stratifiers.index,
                                       columns=[f"proxy: {p}" for p in panel.proxy_names])], axis=1)
fig, ax = plt.subplots(figsize=(6, 5))
sns.heatmap(entity_table.corr(method="spearman"), annot=True, fmt=".2f", cmap="vlag", vmin=-1, vmax=1, ax=ax)
plt.show()
