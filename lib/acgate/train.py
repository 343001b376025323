"""Seeding, device choice, full-batch training with early stopping, lag tables, and one method's run artifacts.

Checkpoint selection uses the validation task loss only, for every method; ground truth never enters training or
selection. Grouped ARDL is fitted in closed form (``acgate.baselines``) and written in the same layout.

Usage::

    result = fit(panel, params, method="acgate", seed=0)          # in memory (neural methods)
    run_method(panel, params, "acgate", seed=0, runs_root="runs")  # also writes runs/<domain>/seed00/acgate/
"""

from __future__ import annotations

import copy
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from acgate import baselines, lags
from acgate.audit import TRUTHS, forecast_metrics, l3_recovery
from acgate.config import GATE_METHODS, Params
from acgate.models import ACGate, build, lag_windows
from acgate.panel import SPLITS, Normalisers, Panel
from acgate.runs import atomic_write, current_metrics, manifest, method_dir, remove_interrupted_writes, write_json


def choose_device(setting: str) -> torch.device:
    if setting == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device = cuda but no CUDA device is visible; use auto or cpu")
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


def seed_everything(seed: int, threads: int) -> None:
    """Seed every generator the run touches and pin the CPU thread count (same seed, same numbers on CPU)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)


@dataclass
class Batch:
    """The whole panel as normalised tensors (training is full batch)."""

    lags: torch.Tensor  # (N, T-K, K, F) lag windows: the only view of X any model gets
    y: torch.Tensor  # (N, T-K) targets of steps K..T-1, 0 where unobserved
    masks: dict[str, torch.Tensor]  # split -> (N, T-K) bool
    proxies: torch.Tensor  # (N, M)
    static: torch.Tensor  # (N, D)
    entity_index: torch.Tensor  # (N,)

    @classmethod
    def build(cls, panel: Panel, norm: Normalisers, max_lag: int, device: torch.device) -> Batch:
        def tensor(a: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(np.asarray(a, dtype=np.float32), device=device)

        y = norm.Y.transform(panel.Y[:, max_lag:])
        return cls(lags=lag_windows(tensor(norm.X.transform(panel.X)), max_lag), y=tensor(np.nan_to_num(y)),
                   masks={s: torch.as_tensor(m, device=device) for s, m in panel.split_masks(max_lag).items()},
                   proxies=tensor(norm.P.transform(panel.P)), static=tensor(norm.S.transform(panel.S)),
                   entity_index=torch.arange(panel.n_entities, device=device))

    def inputs(self, lags: torch.Tensor | None = None) -> tuple:
        return (self.lags if lags is None else lags, self.proxies, self.static, self.entity_index)

    def through(self, split: str) -> Batch:
        """The batch cut after the last target step of ``split``. Every model is causal in the target steps
        (an LSTM, and TFT's attention is masked to earlier steps), so its predictions up to there are the same,
        to the bit, as from the whole batch; the validation pass of every epoch does not compute the test steps."""
        steps = int(self.masks[split].any(dim=0).nonzero().max()) + 1
        return Batch(lags=self.lags[:, :steps], y=self.y[:, :steps],
                     masks={s: m[:, :steps] for s, m in self.masks.items()}, proxies=self.proxies,
                     static=self.static, entity_index=self.entity_index)


def masked_mse(y_hat: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return ((y_hat - y) ** 2)[mask].mean()


def recon_loss(p_hat: torch.Tensor, proxies: torch.Tensor, anchor_weight: float) -> torch.Tensor:
    """Proxy reconstruction MSE with the first proxy weighted by ``anchor_weight``."""
    weights = torch.ones(proxies.shape[1], device=proxies.device)
    weights[0] = anchor_weight
    return (((p_hat - proxies) ** 2) * weights).sum(dim=1).mean() / weights.sum()


class TrainingError(RuntimeError):
    """Training cannot give a usable model (a loss that is not finite); the message says which run and why."""


@dataclass
class FitResult:
    model: torch.nn.Module
    history: pd.DataFrame  # epoch, train_loss, recon_loss, val_loss
    best_epoch: int
    epochs_run: int
    seconds: float
    device: str
    batch: Batch
    norm: Normalisers


def fit(panel: Panel, params: Params, method: str, seed: int, log: Callable[[str], None] = print,
        bar: bool = False) -> FitResult:
    """Train one neural method on one panel; returns the model restored to its best-validation epoch.

    Progress: a line every ``train.log_every`` epochs and one at the stop, through ``log``; with ``bar``, a progress
    bar on standard output instead (epoch, training and validation loss, best epoch; redrawn at most once a second)
    and only the line at the stop."""
    cfg, tcfg = params.model, params.train
    device = choose_device(tcfg.device)
    seed_everything(seed, tcfg.threads)
    norm = Normalisers.fit(panel)
    batch = Batch.build(panel, norm, cfg.max_lag, device)
    model = build(cfg, method, panel.n_entities, panel.X.shape[2], panel.P.shape[1], panel.S.shape[1]).to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=tcfg.lr)

    val_batch = batch.through("val")
    rows, best_val, best_epoch, best_state, stale = [], float("inf"), 0, None, 0
    start = time.perf_counter()
    with tqdm(total=tcfg.max_epochs, desc=f"{method} seed {seed}", unit="epoch", file=sys.stdout, mininterval=1.0,
              disable=not bar) as progress:
        for epoch in range(1, tcfg.max_epochs + 1):
            task, recon = _train_step(model, optimiser, batch, params)
            val = _validation_loss(model, val_batch)
            if not (np.isfinite(val) and np.isfinite(task)):
                raise TrainingError(f"[{method} seed {seed}] a loss is not finite at epoch {epoch} (training {task}, "
                                    f"validation {val}): training diverged or the panel holds values too large for "
                                    "float32; check the panel's values (01_data_prep), or lower train.lr")
            rows.append((epoch, task, recon, val))
            if val < best_val:
                best_val, best_epoch, best_state, stale = val, epoch, copy.deepcopy(model.state_dict()), 0
            else:
                stale += 1
            progress.set_postfix_str(f"train {task:.4f}, val {val:.4f}, best @ {best_epoch}", refresh=False)
            progress.update()
            stop = stale >= tcfg.patience or epoch == tcfg.max_epochs
            if stop:
                progress.close()  # the bar's last state stands above the closing line
            if stop or (not bar and epoch % tcfg.log_every == 0):
                log(f"  [{method} seed {seed}] epoch {epoch:3d}/{tcfg.max_epochs}  train {task:.4f}  "
                    f"val {val:.4f}  best {best_val:.4f} @ {best_epoch}")
            if stop:
                break
    seconds = time.perf_counter() - start
    model.load_state_dict(best_state)
    model.eval()
    history = pd.DataFrame(rows, columns=["epoch", "train_loss", "recon_loss", "val_loss"])
    return FitResult(model=model, history=history, best_epoch=best_epoch, epochs_run=len(rows),
                     seconds=seconds, device=str(device), batch=batch, norm=norm)


def _train_step(model: torch.nn.Module, optimiser: torch.optim.Optimizer, batch: Batch, params: Params
                ) -> tuple[float, float]:
    """One full-batch optimiser step on the training targets; returns the task and reconstruction losses."""
    model.train()
    optimiser.zero_grad()
    out = model(*batch.inputs())
    task = masked_mse(out.y_hat, batch.y, batch.masks["train"])
    recon = (recon_loss(out.p_hat, batch.proxies, params.model.recon_anchor_weight) if out.p_hat is not None
             else torch.zeros((), device=task.device))
    (task + model.recon_weight * recon).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), params.train.grad_clip)
    optimiser.step()
    return task.item(), recon.item()


def _validation_loss(model: torch.nn.Module, val_batch: Batch) -> float:
    model.eval()
    with torch.no_grad():
        return masked_mse(model(*val_batch.inputs()).y_hat, val_batch.y, val_batch.masks["val"]).item()


def predictions(result: FitResult, panel: Panel) -> pd.DataFrame:
    with torch.no_grad():
        y_hat = result.model(*result.batch.inputs()).y_hat.cpu().numpy()
    return panel.prediction_frame(result.model.cfg.max_lag, result.norm.Y.inverse(y_hat))


def occlusion_increase(model: torch.nn.Module, batch: Batch) -> np.ndarray:
    """Lag-specific occlusion (N, K): per entity, the increase in task MSE over the training and validation
    targets when only lag k of every input window is replaced by its training mean (0 after standardisation)."""
    mask = (batch.masks["train"] | batch.masks["val"]).float()
    count = mask.sum(dim=1).clamp_min(1)

    def per_entity_mse(lags: torch.Tensor) -> torch.Tensor:
        return (((model(*batch.inputs(lags)).y_hat - batch.y) ** 2) * mask).sum(dim=1) / count

    with torch.no_grad():
        base = per_entity_mse(batch.lags)
        increases = []
        for k in range(batch.lags.shape[2]):
            occluded = batch.lags.clone()
            occluded[:, :, k, :] = 0.0
            increases.append(per_entity_mse(occluded) - base)
    return torch.stack(increases, dim=1).cpu().numpy()


def profile_from_increase(increase: np.ndarray) -> np.ndarray:
    """A lag profile (N, K) from non-negative importances: rows normalised to sum to one (NaN where all are 0)."""
    positive = np.clip(increase, 0.0, None)
    total = positive.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, positive / total, np.nan)


def lag_table(result: FitResult, panel: Panel) -> pd.DataFrame:
    """Structural omega and k* for AC-GATE models; for neural baselines the diagnostic occlusion profile, with
    their internal lag weights (averaged over time) beside it."""
    model, b = result.model, result.batch
    if isinstance(model, ACGate):
        with torch.no_grad():
            z = model.score(b.proxies)
            omega = model.lag_weights(z).cpu().numpy()
        return lags.lag_frame(panel, omega, "structural", z=z.squeeze(1).cpu().numpy())
    with torch.no_grad():
        out = model(*b.inputs())
    internal = None if out.internal is None else out.internal.mean(dim=1).cpu().numpy()
    return lags.lag_frame(panel, profile_from_increase(occlusion_increase(model, b)), "diagnostic: occlusion",
                     internal=internal)


def omega_of_z(model: ACGate) -> Callable[[np.ndarray], np.ndarray]:
    """The trained gate as a numpy function z (G,) -> omega (G, K)."""
    device = next(model.parameters()).device

    def evaluate(z: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            zt = torch.as_tensor(z, dtype=torch.float32, device=device)[:, None]
            return model.lag_weights(zt).cpu().numpy()

    return evaluate


def summarise(preds: pd.DataFrame, table: pd.DataFrame, facts: dict,
              gate: Callable[[np.ndarray], np.ndarray] | None = None) -> dict:
    """metrics.json content: split-wise L0 metrics, lag summaries, L3 where truth exists, and run ``facts``."""
    omega = table.filter(regex=r"^omega_\d+$").to_numpy()
    metrics: dict = {split: forecast_metrics(*(preds.loc[preds.split == split, c].to_numpy()
                                               for c in ("y", "y_hat", "time"))) for split in SPLITS}
    metrics["lags"] = {"kstar_kind": table.kstar_kind.iloc[0], "kstar_mean": float(table.kstar.mean()),
                       "kstar_sd": float(table.kstar.std(ddof=0)),
                       "omega_entropy": float(np.nanmean(lags.omega_entropy(omega))),
                       "gate_sensitivity": lags.gate_sensitivity(table.z.to_numpy(), gate) if gate else None}
    truths = {name: column for name, column in TRUTHS.items() if column in table}
    if truths:
        metrics["l3"] = {name: l3_recovery(table.kstar.to_numpy(), table[column].to_numpy())
                         for name, column in truths.items()}
    metrics.update(facts)
    return metrics


SHUFFLED_PROXIES_SALT = 104_729  # the shuffled_proxies method's permutation differs from a proxy-shuffle domain's


def run_method(panel: Panel, params: Params, method: str, seed: int, runs_root: Path,
               log: Callable[[str], None] = print, retrain: bool = False, bar: bool = False) -> dict:
    """Train ``method`` and write its artifacts to runs/<domain>/seed<NN>/<method>/; returns metrics.json.

    A finished run trained under the same parameters (params hash) on the same panel (panel digest) is kept, unless
    ``retrain``. Progress goes to ``log``, and with ``bar`` to a progress bar (see :func:`fit`). ``metrics.json`` is
    written last, so an interrupted run leaves nothing that counts as finished.
    ``shuffled_proxies`` is AC-GATE trained on the proxies permuted across entities (one non-identity permutation per
    seed, recorded in the manifest): the comparator that tells a proxy-conditioned gate from a gate that merely has
    more inputs.
    """
    out = method_dir(runs_root, params.domain, seed, method)
    kept = None if retrain else current_metrics(out, params.digest(), panel.digest())
    if kept is not None:
        log(f"  [{method} seed {seed}] kept: finished run with the same parameters in {out} (retrain redoes it)")
        return kept
    (out / "metrics.json").unlink(missing_ok=True)
    remove_interrupted_writes(out)  # of an earlier run of this method that was killed mid-write
    log(f"  [{method} seed {seed}] training on {panel.n_entities} entities")
    if method == "shuffled_proxies":
        panel, permutation = panel.with_shuffled_proxies(seed, SHUFFLED_PROXIES_SALT)
        panel.meta["shuffled_proxies_permutation"] = [str(e) for e in panel.entities[permutation]]
    if method == "grouped_ardl":
        ardl = baselines.GroupedARDL.fit(panel, params)
        preds, table, seconds, device = ardl.predictions(), ardl.lag_table(), ardl.seconds, "cpu"
        history = pd.DataFrame(columns=["epoch", "train_loss", "recon_loss", "val_loss"])  # no iterations
        facts = {"best_epoch": None, "epochs_run": None, "fit": "closed-form OLS per group", "groups": ardl.groups}
        atomic_write(out / "coefficients.csv", lambda f: ardl.coefficients.to_csv(f, index=False))
        gate = None
    else:
        result = fit(panel, params, method, seed, log, bar)
        preds, table, history = predictions(result, panel), lag_table(result, panel), result.history
        seconds, device = result.seconds, result.device
        facts = {"best_epoch": result.best_epoch, "epochs_run": result.epochs_run,
                 "seconds_per_epoch": round(result.seconds / result.epochs_run, 5)}
        if method == "ganet":
            with torch.no_grad():
                facts["gate_density"] = float(result.model(*result.batch.inputs()).gate_density)
        gate = omega_of_z(result.model) if method in GATE_METHODS else None
        atomic_write(out / "model.pt", lambda f: torch.save(result.model.state_dict(), f), binary=True)
    metrics = summarise(preds, table, {**facts, "seconds": round(seconds, 3), "device": device,
                                       "params_hash": params.digest(), "panel_digest": panel.digest()}, gate)
    atomic_write(out / "predictions.csv", lambda f: preds.to_csv(f, index=False))
    atomic_write(out / "lags.csv", lambda f: table.to_csv(f, index=False))
    atomic_write(out / "history.csv", lambda f: history.to_csv(f, index=False))
    write_json(out / "manifest.json", manifest(params.to_dict(), seed, device, method=method,
                                               wall_seconds=round(seconds, 3), panel=panel.meta))
    write_json(out / "metrics.json", metrics)
    log(f"  [{method} seed {seed}] done in {seconds:.1f} s: test MSE {metrics['test']['mse']:.4g}")
    return metrics
