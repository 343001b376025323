"""Training one neural method on one panel: seeding, device choice, the panel's inputs, the losses, and Adam with
one optimiser step over the whole panel an epoch, early stopping and best-validation checkpoint selection.

An epoch's step is computed in blocks of entities (``train.block_entities``): each block's share of the loss is
back-propagated in turn and the gradients add up to those of the whole panel, so peak memory follows the block
while the step is the full-batch one (up to float rounding; dropout and GA-Net's gate noise are drawn block by
block). Panels up to a block are one block, computed exactly as in one pass.

Checkpoint selection uses the validation task loss only, for every method; ground truth never enters training or
selection. ``acgate.models.runner`` turns a fit into a run folder (and fits Grouped ARDL in closed form).

    result = fit(panel, params, method="acgate", seed=0)   # in memory
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import re
import sys
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from acgate.config import Params
from acgate.data.panel import Normalisers, Panel
from acgate.models.batch import Batch
from acgate.models.memory import MemoryPlan, keep_freed_memory
from acgate.models.networks import Output, build


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


def masked_mse(y_hat: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return ((y_hat - y) ** 2)[mask].mean()


def recon_loss(p_hat: torch.Tensor, proxies: torch.Tensor, anchor_weight: float) -> torch.Tensor:
    """Proxy reconstruction MSE with the first proxy weighted by ``anchor_weight``."""
    weights = torch.ones(proxies.shape[1], device=proxies.device)
    weights[0] = anchor_weight
    return (((p_hat - proxies) ** 2) * weights).sum(dim=1).mean() / weights.sum()


class TrainingError(RuntimeError):
    """Training cannot give a usable model (a loss that is not finite, memory that runs out); the message says which
    run and why, and what to change."""


# how the allocators say that memory ran out: PyTorch's on the CPU ("can't allocate memory", "not enough memory") and
# on CUDA ("out of memory"), numpy's ("Unable to allocate"); and how much each was asked for
OUT_OF_MEMORY = re.compile(r"can't allocate memory|not enough memory|out of memory|unable to allocate", re.IGNORECASE)
REQUESTED = re.compile(r"(?:tried to|unable to) allocate (\d+ bytes|[\d.]+ [KMGTP]i?B)", re.IGNORECASE)


def memory_error(err: BaseException, params: Params, method: str, seed: int, panel: Panel) -> TrainingError | None:
    """For an allocator's error while ``method`` trained on ``panel`` (an exhausted CPU or GPU memory: a bare
    allocator message names neither the panel, nor the method, nor the setting to change), a :class:`TrainingError`
    that names the run, the panel's size, the request and the fixes; None for any other error."""
    if not (isinstance(err, (MemoryError, torch.OutOfMemoryError)) or OUT_OF_MEMORY.search(str(err))):
        return None
    found = REQUESTED.search(str(err))
    amount = found.group(1) if found else "an unknown amount"
    if amount.endswith(" bytes"):
        amount += f" ({int(amount.split()[0]) / 2**20:,.1f} MiB)"
    on_gpu = isinstance(err, torch.OutOfMemoryError) or "cuda" in str(err).lower()
    n, t, f = panel.X.shape
    return TrainingError(
        f"[{params.domain} seed {seed} {method}] out of memory: tried to allocate {amount} on the "
        f"{'GPU' if on_gpu else 'CPU'}, training on a panel of {n} entities × {t} times × {f} features "
        f"(model.hidden = {params.model.hidden}, model.max_lag = {params.model.max_lag}, train.block_entities = "
        f"{params.train.block_entities}). Train in smaller blocks (a smaller train.block_entities), on fewer "
        "entities, with a smaller model.hidden, or on a machine with more memory"
        + ("; or on the CPU (train.device = cpu), whose memory is usually larger" if on_gpu else ""))


@dataclasses.dataclass
class FitResult:
    model: torch.nn.Module
    history: pd.DataFrame  # epoch, train_loss, recon_loss, val_loss
    best_epoch: int
    epochs_run: int
    seconds: float
    device: str
    batch: Batch
    norm: Normalisers
    memory: MemoryPlan  # the block of entities computed at once, and the memory it was planned to need

    @functools.cached_property
    def output(self) -> Output:
        """The trained model's output on the whole batch (evaluation, no gradient, block by block), made once: the
        predictions, a baseline's internal lag weights and GA-Net's gates all come from it. Made at the first use and
        kept: it does not follow later changes to the model, and its tensors (whose numpy views callers get) are not
        to be changed in place."""
        return evaluate(self.model, self.batch, self.memory.block)


def evaluate(model: torch.nn.Module, batch: Batch, block: int) -> Output:
    """The model's output on ``batch``, without gradients, computed ``block`` entities at a time and joined."""
    with torch.no_grad():
        outputs = [model(*part.inputs()) for part in batch.blocks(block)]
    if len(outputs) == 1:
        return outputs[0]
    return Output(**{field.name: None if getattr(outputs[0], field.name) is None
                     else torch.cat([getattr(out, field.name) for out in outputs])
                     for field in dataclasses.fields(Output)})


def fit(panel: Panel, params: Params, method: str, seed: int, log: Callable[[str], None] = print,
        bar: bool = False) -> FitResult:
    """Train one neural method on one panel; returns the model restored to its best-validation epoch.

    Progress: a line every ``train.log_every`` epochs and one at the stop, through ``log``; with ``bar``, a progress
    bar on standard output instead (epoch, training and validation loss, best epoch; redrawn at most once a second)
    and only the line at the stop."""
    cfg, tcfg = params.model, params.train
    device = choose_device(tcfg.device)
    seed_everything(seed, tcfg.threads)
    if tcfg.keep_freed_memory:
        keep_freed_memory()
    norm = Normalisers.fit(panel)
    batch = Batch.build(panel, norm, cfg.max_lag, device)
    model = build(cfg, method, panel.n_entities, panel.X.shape[2], panel.P.shape[1], panel.S.shape[1]).to(device)
    # fused: one kernel updates every parameter (the CPU's default updates them one at a time)
    optimiser = torch.optim.Adam(model.parameters(), lr=tcfg.lr, fused=True)
    memory = MemoryPlan.measure(model, batch, tcfg.block_entities)
    n, t, f = panel.X.shape
    memory.check(params.domain, seed, method, panel=f"{n:,} entities × {t} times × {f} feature{'s' * (f != 1)}")
    if memory.blocks > 1:
        log(f"  [{method} seed {seed}] training in {memory.describe()}")

    train_blocks = _weighted_blocks(batch.through("train"), "train", memory.block)
    val_blocks = _weighted_blocks(batch.through("val"), "val", memory.block)
    rows, best_val, best_epoch, best_state, stale = [], float("inf"), 0, None, 0
    start = time.perf_counter()
    with tqdm(total=tcfg.max_epochs, desc=f"{method} seed {seed}", unit="epoch", file=sys.stdout, mininterval=1.0,
              disable=not bar) as progress:
        for epoch in range(1, tcfg.max_epochs + 1):
            task, recon = _train_step(model, optimiser, train_blocks, params)
            val = _validation_loss(model, val_blocks)
            if not (np.isfinite(val) and np.isfinite(task)):
                raise TrainingError(f"[{method} seed {seed}] a loss is not finite at epoch {epoch} (training {task}, "
                                    f"validation {val}): training diverged or the panel holds values too large for "
                                    "float32; check the panel's values (01_data_prep), or lower train.lr")
            rows.append((epoch, task, recon, val))
            if val < best_val:
                best_state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
                best_val, best_epoch, stale = val, epoch, 0
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
                     seconds=seconds, device=str(device), batch=batch, norm=norm, memory=memory)


@dataclasses.dataclass
class WeightedBlock:
    """A block of entities and its shares of the whole panel's losses: of the targets of the split (the task loss
    is a mean over them) and of the entities (the reconstruction loss is a mean over them). A block's mean loss
    times its share, summed over the blocks, is the whole panel's loss; with one block both shares are 1."""

    batch: Batch
    target_share: float
    entity_share: float


def _weighted_blocks(batch: Batch, split: str, block: int) -> list[WeightedBlock]:
    targets = int(batch.masks[split].sum())  # none: the shares are NaN, and so the loss, as a mean over none
    return [WeightedBlock(part, int(part.masks[split].sum()) / targets if targets else math.nan,
                          part.n_entities / batch.n_entities)
            for part in batch.blocks(block)]


def _train_step(model: torch.nn.Module, optimiser: torch.optim.Optimizer, blocks: list[WeightedBlock],
                params: Params) -> tuple[float, float]:
    """One optimiser step on the whole panel's training targets, its gradients accumulated block by block; returns
    the task and reconstruction losses."""
    model.train()
    optimiser.zero_grad()
    task_total = recon_total = 0.0
    for block in blocks:
        out = model(*block.batch.inputs())
        zero = torch.zeros((), device=out.y_hat.device)
        task = (masked_mse(out.y_hat, block.batch.y, block.batch.masks["train"]) * block.target_share
                if block.target_share else zero)  # a block without training targets adds no task loss
        recon = (recon_loss(out.p_hat, block.batch.proxies, params.model.recon_anchor_weight) * block.entity_share
                 if out.p_hat is not None else zero)
        loss = task + model.recon_weight * recon
        if loss.requires_grad:
            loss.backward()
        task_total += task.item()
        recon_total += recon.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), params.train.grad_clip)
    optimiser.step()
    return task_total, recon_total


def _validation_loss(model: torch.nn.Module, blocks: list[WeightedBlock]) -> float:
    model.eval()
    with torch.no_grad():
        return sum((masked_mse(model(*block.batch.inputs()).y_hat, block.batch.y, block.batch.masks["val"])
                    * block.target_share).item() for block in blocks if block.target_share)


def predictions(result: FitResult, panel: Panel) -> pd.DataFrame:
    y_hat = result.output.y_hat.cpu().numpy()
    return panel.prediction_frame(result.model.cfg.max_lag, result.norm.Y.inverse(y_hat))
