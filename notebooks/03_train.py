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
# # 03 Train: AC-GATE and its ablations on one domain and seed
#
# Trains each method (one Adam step over the whole panel an epoch, computed in blocks of entities; early stopping
# and checkpoint selection on the validation task loss only; ground truth is never used), writes its run artifacts,
# and shows the learning curves and the learned lag weights next to the truth where the panel has one.
#
# - **Inputs**: `params/<domain>.yaml` (+ optional profile); the panel in `data/processed/<domain>/` (real
#   domains, from `01_data_prep`) or `data/processed/<domain>/seed<NN>/` (synthetic: drawn and saved here if
#   `02_synthetic_dgp` has not run). Proxy-shuffle domains permute the proxies once per seed; the method
#   `shuffled_proxies` is AC-GATE on another permutation of them (the calibrated L1's comparator).
# - **Outputs**: `runs/<domain>/seed<NN>/<method>/` with `metrics.json`, `lags.csv`, `predictions.csv`,
#   `history.csv`, `model.pt` (Grouped ARDL: `coefficients.csv`) and `manifest.json` (parameters, seed, git SHA,
#   package versions, device).

# %% tags=["parameters"]
domain: str = "synthetic_linear"  # reads params/<domain>.yaml
seed: int = 0  # training and data seed
params_file: str = ""  # params file; empty means params/<domain>.yaml
profile_file: str = ""  # optional overlay profile, e.g. params/smoke.yaml for a tiny fast run
methods: list = []  # methods to train; empty means the params file's list
runs_dir: str = ""  # artifacts go to <runs_dir>/<domain>/seed<NN>/<method>/; empty: runs, or runs/<profile>
data_dir: str = ""  # panels are read from <data_dir>/processed/; empty: data, or <runs_dir>/data when that is not runs
retrain: bool = False  # true: retrain a method even when its finished run has the same parameters (params hash)
stack_seeds: list = []  # the job's seeds: where train.stacked stacks (a GPU) they train as one model; empty: alone
# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from acgate.config import NEURAL_METHODS
from acgate.data.prep import panel_for_training
from acgate.layout import grid_folders, method_dir
from acgate.models import stacked
from acgate.models.runner import run_method, run_seeds
from acgate.notebook.resolve import resolve

params, root = resolve(domain, params_file, profile_file)
folders = grid_folders([profile_file], runs_dir, data_dir)  # a profile's own, when one is set
runs_root, data_root = root / folders["runs_dir"], root / folders["data_dir"]
to_train = list(methods) or list(params.methods)
panel = panel_for_training(params, seed, data_root)
print(f"{params.domain} seed {seed}: {panel.n_entities} entities, K = {params.model.max_lag}, "
      f"methods {', '.join(to_train)}")

# %% [markdown]
# ## Seeds trained together (on a GPU)
# On a GPU a small model's epoch waits on kernel launches, not arithmetic. Where `train.stacked` stacks (auto: on a
# GPU; on: anywhere), the first notebook of a job trains the neural methods of all the job's seeds (`stack_seeds`; the
# workflow's `seeds_per_job` of them) as one stacked model per method, each seed its lone run up to float rounding
# (`acgate.models.stacked`), and the job's later notebooks keep those runs. `retrain` applies in the first notebook,
# which trains the stack again; to retrain one seed alone, run its notebook with `stack_seeds=[]`. With
# `train.stacked` off, or auto on the CPU, nothing happens here.

# %%
neural = [m for m in to_train if m in NEURAL_METHODS]
stacking = seed in stack_seeds and bool(neural) and stacked.wanted(params, len(stack_seeds))
if stacking and seed == stack_seeds[0]:
    panels = {s: panel if s == seed else panel_for_training(params, s, data_root) for s in stack_seeds}
    for m in neural:
        run_seeds(panels, params, m, runs_root, retrain=retrain, bar=True)
elif stacking and retrain:
    print(f"retrain: seed {stack_seeds[0]}'s notebook trains the neural runs of seeds {stack_seeds} again as one "
          "stack, and this one keeps them (stack_seeds=[] retrains this seed alone)")

# %% [markdown]
# ## Training
# A progress bar per method (epoch, training and validation loss, best epoch so far) and a line when it stops. A
# method whose finished run was trained under the same parameters is kept (set `retrain = True` to redo it, e.g.
# after changing code under `lib/`; runs the stack above trained are not trained again).

# %%
metrics = {m: run_method(panel, params, m, seed, runs_root, retrain=retrain and not (stacking and m in neural),
                         bar=True) for m in to_train}
out_dirs = {m: method_dir(runs_root, params.domain, seed, m) for m in to_train}

# %% [markdown]
# ## Results
# Test-window forecast metrics (original units), the spread of the effective lag k* across entities, and,
# for synthetic panels, L3 recovery against the rounded lag centre and against the DGP's own mean lag. For the
# baselines k* is diagnostic (lag-specific occlusion, or ARDL coefficients), never structural.

# %%
rows = []
for m, met in metrics.items():
    row = {"method": m, "epochs": met["epochs_run"], "best epoch": met["best_epoch"], "seconds": met["seconds"],
           "test MSE": met["test"]["mse"], "test R2 (by time)": met["test"]["r2_by_time"],
           "k* sd": met["lags"]["kstar_sd"], "omega entropy": met["lags"]["omega_entropy"],
           "gate sensitivity": met["lags"]["gate_sensitivity"]}
    for truth, l3 in met.get("l3", {}).items():
        row[f"MAE vs {truth}"], row[f"Spearman vs {truth}"] = l3["mae"], l3["spearman"]
    rows.append(row)
results = pd.DataFrame(rows).set_index("method")
results.round(4)

# %% [markdown]
# The learned effective lags, rounded. Training on CPU is deterministic, so this must reproduce exactly
# when the notebook is executed again (nbval checks this cell's output).

# %%
# NBVAL_CHECK_OUTPUT
for m in to_train:
    kstar = pd.read_csv(out_dirs[m] / "lags.csv").kstar.to_numpy()
    print(f"{m:14s} best epoch {str(metrics[m]['best_epoch']):>4s}  k* first {np.round(kstar[:3], 3)}  "
          f"sd {np.nanstd(kstar):.3f}")

# %% [markdown]
# ## Learning curves
# Training task loss (with dropout) and validation task loss, normalised units; the dot marks the
# restored best-validation epoch. The closed-form fits (Grouped ARDL, the classical lag models) have no epochs.

# %%
iterated = [m for m in to_train if metrics[m]["epochs_run"]]
if iterated:
    fig, axes = plt.subplots(1, len(iterated), figsize=(3.2 * len(iterated), 2.8), sharey=True, squeeze=False)
    for ax, m in zip(axes[0], iterated, strict=True):
        history = pd.read_csv(out_dirs[m] / "history.csv")
        ax.plot(history.epoch, history.train_loss, label="train")
        ax.plot(history.epoch, history.val_loss, label="validation")
        best = history.loc[history.epoch == metrics[m]["best_epoch"]]
        ax.scatter(best.epoch, best.val_loss, color="k", zorder=3)
        ax.set(title=m, xlabel="epoch", yscale="log")
    axes[0, 0].set_ylabel("task MSE (normalised)")
    axes[0, 0].legend()
    plt.show()  # one shared y axis: the default spacing fits (tight_layout would add about 0.2 s to the figure)

# %% [markdown]
# ## Learned lags against the truth
# Left: each entity's learned k* against its true lag centre (the diagonal is perfect recovery).
# Right: AC-GATE's learned lag weights omega next to the DGP's weights (one colour scale), entities sorted by true z.

# %%
if "kstar_true" in panel.truth:
    fig, axes = plt.subplots(1, len(to_train), figsize=(3.2 * len(to_train), 3), sharey=True, squeeze=False)
    for ax, m in zip(axes[0], to_train, strict=True):
        lags = pd.read_csv(out_dirs[m] / "lags.csv")
        jitter = np.random.default_rng(0).uniform(-0.15, 0.15, len(lags))
        ax.scatter(lags.kstar_true + jitter, lags.kstar, s=8, alpha=0.6)
        top = params.model.max_lag
        ax.plot([1, top], [1, top], color="k", lw=0.8)
        ax.set(title=m, xlabel="true lag centre", xlim=(0.5, top + 0.5), ylim=(0.5, top + 0.5))
    axes[0, 0].set_ylabel("learned k*")
    plt.show()

# %%
if "lag_weights" in panel.truth and to_train:
    shown = "acgate" if "acgate" in to_train else to_train[0]
    order = np.argsort(panel.truth["z"])
    learned = pd.read_csv(out_dirs[shown] / "lags.csv").filter(like="omega_").to_numpy()[order]
    true = panel.truth["lag_weights"][order]
    top = max(np.nanmax(learned), np.nanmax(true))  # one colour scale for both
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, weights, title in ((axes[0], learned, f"learned omega ({shown})"), (axes[1], true, "DGP lag weights")):
        image = ax.imshow(weights.T, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0, vmax=top,
                          extent=(0, len(weights), weights.shape[1] + 0.5, 0.5))  # a row per lag, lag 1 on top
        fig.colorbar(image, ax=ax)
        ax.set(title=title, xlabel="entities, by increasing true z", ylabel="lag k", xticks=[],
               yticks=np.arange(1, weights.shape[1] + 1))
    plt.tight_layout()
    plt.show()
