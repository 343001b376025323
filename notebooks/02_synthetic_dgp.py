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
# # 02 Synthetic DGP: a panel with known entity-specific lags
#
# Draws the synthetic panel of one scenario and seed (paper Algorithm 2) and shows
# what the model is asked to recover: each entity's lag centre is a function of a latent moderator
# z, and the target is a lag-weighted sum of past inputs centred there.
#
# - **Inputs**: `params/<domain>.yaml` (optionally overlaid by a profile such as `params/smoke.yaml`).
# - **Outputs**: `data/processed/<domain>/seed<NN>/` with `panel.npz`, `panel.json`, `stratifiers.csv`
#   and `dgp_settings.json`; `03_train` reads the panel from there.

# %% tags=["parameters"]
domain: str = "synthetic_linear"  # a synthetic domain, e.g. synthetic_linear: reads params/<domain>.yaml
seed: int = 0  # seed of the numpy generator that draws the panel
params_file: str = ""  # params file; empty means params/<domain>.yaml
profile_file: str = ""  # optional overlay profile, e.g. params/smoke.yaml for a tiny fast run
data_dir: str = ""  # panels go to <data_dir>/processed/; empty: data, or runs/<profile>/data with a profile
# %%
import matplotlib.pyplot as plt
import numpy as np

from acgate.data.dgp import load_or_simulate
from acgate.layout import grid_folders, panel_dir, shown
from acgate.notebook.resolve import resolve

params, root = resolve(domain, params_file, profile_file)
data_root = root / grid_folders([profile_file], data_dir=data_dir)["data_dir"]  # a profile's own with one
panel = load_or_simulate(params, seed, data_root)
truth = panel.truth
print(f"domain {params.domain}, seed {seed}: {panel.n_entities} entities x {len(panel.times)} steps, "
      f"K = {params.synthetic.lag_horizon}; saved to {shown(panel_dir(data_root, params.domain, seed))}")

# %% [markdown]
# The first rows of ground truth. These values depend only on the seed, so they must reproduce exactly
# when the notebook is executed again (nbval checks this cell's output).

# %%
# NBVAL_CHECK_OUTPUT
print("z           ", np.round(truth["z"][:6], 4))
print("lag centre  ", truth["kstar_true"][:6].astype(int))
print("DGP mean lag", np.round(truth["dgp_mean_lag"][:6], 4))
print("first target", np.round(panel.Y[:3, params.model.max_lag], 4))

# %% [markdown]
# ## True lag centre against the moderator z
# The rounded lag centre (what the paper scores recovery against) and the DGP's own mean lag
# sum_k k w_k. They part near the ends of 1..K, where the Gaussian bump is cut off. Under scenario
# interaction the lag centre is not a function of z alone but of z and a second latent z2: the points are
# coloured by z2 there, and the mean-lag curve in z is left out.

# %%
order = np.argsort(truth["z"])
fig, ax = plt.subplots(figsize=(6, 3.5))
if "z2" in truth:  # interaction: k_c follows z and z2 together, so a curve in z alone would only zigzag
    points = ax.scatter(truth["z"], truth["kstar_true"], c=truth["z2"], cmap="coolwarm", s=12,
                        label="lag centre $k_c$")
    fig.colorbar(points, ax=ax, label="second latent moderator z2")
else:
    ax.scatter(truth["z"], truth["kstar_true"], s=12, label="lag centre $k_c$", alpha=0.7)
    ax.plot(truth["z"][order], truth["dgp_mean_lag"][order], color="C3", label=r"DGP mean lag $\sum_k k\,w_k$")
ax.set(xlabel="latent moderator z", ylabel="lag", title=f"{params.domain}: true lag against z")
ax.legend()
plt.show()

# %% [markdown]
# ## The DGP lag weights, entities sorted by z

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
weights = truth["lag_weights"][order]
image = ax.imshow(weights.T, aspect="auto", interpolation="nearest", cmap="viridis",
                  extent=(0, len(weights), weights.shape[1] + 0.5, 0.5))  # a row per lag, lag 1 on top
fig.colorbar(image, ax=ax, label="$w_k$")
ax.set(xlabel="entities, by increasing z", ylabel="lag k", title="DGP lag weights", xticks=[],
       yticks=np.arange(1, weights.shape[1] + 1))
plt.show()

# %% [markdown]
# ## A few series
# Inputs x and targets Y for entities with short, middle and long lag centres. The shaded span is the
# K-step warm-up; the dashed lines mark the validation and test windows.

# %%
by_lag = np.argsort(truth["kstar_true"], kind="stable")  # not by z: under some scenarios k_c is not monotone in z
picks = by_lag[[0, len(by_lag) // 2, len(by_lag) - 1]]
fig, axes = plt.subplots(len(picks), 1, figsize=(7, 6), sharex=True)
for ax, i in zip(axes, picks, strict=True):
    ax.plot(panel.times, panel.X[i, :, 0], label="x", color="C0")
    ax.plot(panel.times, panel.Y[i], label="Y", color="C1")
    ax.axvspan(panel.times[0], panel.times[params.model.max_lag], color="grey", alpha=0.15)
    for start in (panel.val_start, panel.test_start):
        ax.axvline(start, color="k", ls="--", lw=0.8)
    ax.set_title(f"entity {panel.entities[i]}: z = {truth['z'][i]:.2f}, lag centre {truth['kstar_true'][i]:.0f}",
                 fontsize=9)
axes[0].legend(loc="upper right")
axes[-1].set_xlabel("time step")
plt.tight_layout()
plt.show()
