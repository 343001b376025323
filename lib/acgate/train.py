"""Training one neural method on one panel: seeding, device choice, the full-batch inputs, the losses, and
full-batch Adam with early stopping and best-validation checkpoint selection.

Checkpoint selection uses the validation task loss only, for every method; ground truth never enters training or
selection. ``acgate.runner`` turns a fit into a run folder (and fits Grouped ARDL in closed form).

    result = fit(panel, params, method="acgate", seed=0)   # in memory
"""

from __future__ import annotations

import ctypes
import functools
import random
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from acgate.config import Params
from acgate.models import Output, build, lag_windows
from acgate.panel import Normalisers, Panel


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


@functools.cache
def keep_freed_memory() -> None:
    """Let glibc's malloc keep the memory this process frees (Linux; elsewhere nothing is changed).

    By default glibc serves a large block with its own ``mmap`` and returns it to the system when it is freed, and
    hands the top of its heap back once more than a threshold is free. A training step allocates and frees tensors
    of several MB (TFT's (N, T', K, d) activations: 8 MB on the synthetic panel), so every step asked the system for
    the same memory again and had each 4 KiB page faulted in and zeroed: 8 000-17 000 page faults per TFT epoch,
    about 4 000 per epoch for the first AC-GATE-family runs of a process. With blocks up to 32 MiB (glibc's most)
    taken from the heap and up to 1 GiB of free heap kept, the pages stay mapped: the same arithmetic on the same
    bytes, without the faults (7 % of a TFT run, about a fifth of the first runs in a process; docs/speed.md). The
    process's peak memory is unchanged; what it frees is kept for its next step instead of going back."""
    if not sys.platform.startswith("linux"):
        return
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    mallopt(m_mmap_threshold, 32 * 2**20)
    mallopt(m_trim_threshold, 2**30)


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
        (an LSTM, and TFT's attention is masked to earlier steps), so its predictions up to there are the same
        as from the whole batch: the training step computes only the steps up to the last training target (the
        loss sees no later one), drawing its training noise for the whole batch's steps (``noise_steps``, see
        :mod:`acgate.models`) so that it draws the same numbers; the validation pass does not compute the test
        steps."""
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
        f"(model.hidden = {params.model.hidden}, model.max_lag = {params.model.max_lag}). Train on fewer entities, "
        "with a smaller model.hidden, or on a machine with more memory"
        + ("; or on the CPU (train.device = cpu), whose memory is usually larger" if on_gpu else ""))


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

    @functools.cached_property
    def output(self) -> Output:
        """The trained model's output on the whole batch (evaluation, no gradient), made once: the predictions, a
        baseline's internal lag weights and GA-Net's gate density all come from it. Made at the first use and kept:
        it does not follow later changes to the model, and its tensors (whose numpy views callers get) are not to be
        changed in place."""
        with torch.no_grad():
            return self.model(*self.batch.inputs())


def fit(panel: Panel, params: Params, method: str, seed: int, log: Callable[[str], None] = print,
        bar: bool = False) -> FitResult:
    """Train one neural method on one panel; returns the model restored to its best-validation epoch.

    Progress: a line every ``train.log_every`` epochs and one at the stop, through ``log``; with ``bar``, a progress
    bar on standard output instead (epoch, training and validation loss, best epoch; redrawn at most once a second)
    and only the line at the stop."""
    cfg, tcfg = params.model, params.train
    device = choose_device(tcfg.device)
    keep_freed_memory()
    seed_everything(seed, tcfg.threads)
    norm = Normalisers.fit(panel)
    batch = Batch.build(panel, norm, cfg.max_lag, device)
    model = build(cfg, method, panel.n_entities, panel.X.shape[2], panel.P.shape[1], panel.S.shape[1]).to(device)
    optimiser = Adam(model.parameters(), lr=tcfg.lr)

    train_batch, val_batch = batch.through("train"), batch.through("val")
    # listed once: the model's modules (switched between training and evaluation every epoch) and its state (views
    # of the parameters and buffers that the optimiser updates in place; the best epoch's is copied from them)
    modules, state = list(model.modules()), model.state_dict()
    rows, best_val, best_epoch, best_state, stale = [], float("inf"), 0, None, 0
    start = time.perf_counter()
    with tqdm(total=tcfg.max_epochs, desc=f"{method} seed {seed}", unit="epoch", file=sys.stdout, mininterval=1.0,
              disable=not bar) as progress:
        for epoch in range(1, tcfg.max_epochs + 1):
            task, recon = _train_step(model, optimiser, train_batch, params, noise_steps=batch.y.shape[1],
                                      modules=modules)
            val = _validation_loss(model, val_batch, modules)
            if not (np.isfinite(val) and np.isfinite(task)):
                raise TrainingError(f"[{method} seed {seed}] a loss is not finite at epoch {epoch} (training {task}, "
                                    f"validation {val}): training diverged or the panel holds values too large for "
                                    "float32; check the panel's values (01_data_prep), or lower train.lr")
            rows.append((epoch, task, recon, val))
            if val < best_val:
                # a copy of each tensor (Python's deepcopy of the whole dict costs several times more per epoch)
                best_state = {name: tensor.clone() for name, tensor in state.items()}
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
                     seconds=seconds, device=str(device), batch=batch, norm=norm)


class Adam:
    """Full-batch Adam: ``torch.optim.Adam(params, lr, fused=True)`` with its defaults (betas (0.9, 0.999), eps 1e-8,
    no weight decay), by way of the same kernel (``torch._fused_adam_``, one call updates every parameter) on the
    same state, so the same update to the bit (a test compares them step by step), without torch.optim's machinery:
    building a torch.optim optimiser imports the compiler (``torch._dynamo``, 1.0-1.3 s once per process, some 30-40
    core-seconds over the paper grid's 30 training processes) and its step's wrappers cost about 0.07 ms of a small
    model's 1-3 ms step. As there, a parameter without a gradient is left as it is, and its moments start at its
    first gradient. Every parameter must be on one device, in one dtype (as in every model here; the fused kernel
    takes one)."""

    betas, eps = (0.9, 0.999), 1e-8

    def __init__(self, params, lr: float):
        self.params, self.lr = list(params), lr
        if len({(p.device, p.dtype) for p in self.params}) > 1:
            raise ValueError("Adam: the parameters are on more than one device or in more than one dtype; move the "
                             "model to one device and one dtype first")
        # exp_avg, exp_avg_sq and the step count (a float32 scalar, as fused Adam keeps it) of each parameter
        self.state: dict[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        # the parameters stepped last time (their ids), with their step counts as views of one tensor, so that one add
        # counts a step for all of them (a _foreach_add_ over one scalar a parameter costs some 1.5 microseconds a
        # parameter), and the kernel's lists; remade, the counts copied, when the parameters with a gradient change
        self._live: tuple[int, ...] = ()
        self._counts = torch.zeros(0)
        self._lists: tuple[list[torch.Tensor], ...] = ()

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        live = [p for p in self.params if p.grad is not None]
        if not live:
            return
        if tuple(map(id, live)) != self._live:
            for p in live:
                if p not in self.state:  # its moments and step count start at its first gradient
                    self.state[p] = (torch.zeros_like(p, memory_format=torch.preserve_format),
                                     torch.zeros_like(p, memory_format=torch.preserve_format),
                                     torch.zeros((), dtype=torch.float32, device=p.device))
            self._counts = torch.stack([self.state[p][2] for p in live])
            for p, count in zip(live, self._counts.unbind(), strict=True):
                self.state[p] = (*self.state[p][:2], count)
            self._live = tuple(map(id, live))
            self._lists = tuple(list(s) for s in zip(*(self.state[p] for p in live), strict=True))
        self._counts.add_(1)
        exp_avgs, exp_avg_sqs, steps = self._lists
        torch._fused_adam_(live, [p.grad for p in live], exp_avgs, exp_avg_sqs, [], steps, lr=self.lr,
                           beta1=self.betas[0], beta2=self.betas[1], weight_decay=0.0, eps=self.eps, amsgrad=False,
                           maximize=False)


@torch.no_grad()
def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm)`` for parameters on one device in one dtype (as
    :class:`Adam` wants them): the same kernels in the same order (each gradient's norm, their norm, the gradients
    scaled by min(max_norm / (norm + 1e-6), 1)), so the same gradients to the bit (a test compares), without the
    wrappers that group the tensors by device and dtype first: 0.13 against 0.09 ms a step for a synthetic AC-GATE
    on one thread of the AMD EPYC VM. Parameters without a gradient are left alone."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))


def set_training(modules: list[torch.nn.Module], training: bool) -> None:
    """``model.train(training)`` for the model's ``modules`` (``list(model.modules())``), listed once by the caller:
    ``Module.train`` walks the module tree and sets each flag through ``Module.__setattr__``, a visible share of a
    small model's epoch (about 6 % of an audit-calibration fit). No module here overrides ``train``."""
    for module in modules:
        module.__dict__["training"] = training


def _train_step(model: torch.nn.Module, optimiser: Adam, batch: Batch, params: Params,
                noise_steps: int | None = None, modules: list[torch.nn.Module] | None = None) -> tuple[float, float]:
    """One full-batch optimiser step on the training targets, its training noise drawn for ``noise_steps`` target
    steps (the whole batch's, when ``batch`` is cut); returns the task and reconstruction losses. ``modules``: the
    model's modules, when the caller has listed them (:func:`set_training`)."""
    set_training(modules or list(model.modules()), True)
    optimiser.zero_grad()
    out = model(*batch.inputs(), noise_steps=noise_steps)
    task = masked_mse(out.y_hat, batch.y, batch.masks["train"])
    recon = (recon_loss(out.p_hat, batch.proxies, params.model.recon_anchor_weight) if out.p_hat is not None
             else torch.zeros((), device=task.device))
    (task + model.recon_weight * recon).backward()
    # the optimiser's list of the parameters (model.parameters(), in its order): no walk of the module tree
    clip_grad_norm(optimiser.params, params.train.grad_clip)
    optimiser.step()
    return task.item(), recon.item()


def _validation_loss(model: torch.nn.Module, val_batch: Batch, modules: list[torch.nn.Module] | None = None) -> float:
    set_training(modules or list(model.modules()), False)
    with torch.no_grad():
        return masked_mse(model(*val_batch.inputs()).y_hat, val_batch.y, val_batch.masks["val"]).item()


def predictions(result: FitResult, panel: Panel) -> pd.DataFrame:
    y_hat = result.output.y_hat.cpu().numpy()
    return panel.prediction_frame(result.model.cfg.max_lag, result.norm.Y.inverse(y_hat))
