"""Several seeds of one neural method trained as one model: the seeds' weights stacked along a leading axis and the
model run over them with ``torch.func`` (``stack_module_state``, ``functional_call``, ``vmap``), one optimiser step
for all of them an epoch. On a GPU, where a small model's epoch is bound by kernel launches rather than arithmetic,
K seeds cost about what one does; on the CPU the lone runs of :func:`acgate.models.train.fit` are faster, and stay
the reference.

Each seed gets what its lone run gets, up to float rounding: its initial weights (the model is built after the same
seeding), its panel (seeds of a synthetic domain have their own), its loss, its gradient clipped by its own norm,
Adam's update (elementwise, so the stacked update is each seed's), its early stop and its best-validation weights.
What differs is the random stream of dropout and of GA-Net's gate noise (one draw for the stack instead of one per
seed) and the LSTM, written out step by step (``nn.LSTM`` has no ``vmap`` rule). A seed that stops early keeps its
best weights; its later updates, made only because the others go on, are thrown away.

    results = fit_stacked([panel0, panel1], params, "acgate", seeds=[0, 1])   # list of FitResult, or None

``train.stacked`` chooses: auto stacks on CUDA, on stacks everywhere, off never.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from acgate.config import Params
from acgate.data.panel import Normalisers, Panel
from acgate.models.batch import Batch
from acgate.models.memory import HEADROOM, MemoryPlan, keep_freed_memory
from acgate.models.networks import build
from acgate.models.train import FitResult, TrainingError, choose_device, recon_loss, seed_everything


def wanted(params: Params, seeds: int) -> bool:
    """Whether ``seeds`` seeds of a neural method are trained stacked under ``train.stacked``."""
    setting = params.train.stacked
    if seeds < 2 or setting == "off":
        return False
    return setting == "on" or choose_device(params.train.device).type == "cuda"


class UnrolledLSTM(nn.Module):
    """``nn.LSTM`` (batch-first, one direction, biases) written out step by step, with the same parameter names, so
    that ``functional_call`` can hand it an ``nn.LSTM``'s weights and ``vmap`` can run it."""

    def __init__(self, lstm: nn.LSTM):
        super().__init__()
        if not lstm.batch_first or lstm.bidirectional or lstm.proj_size or not lstm.bias:
            raise ValueError("UnrolledLSTM writes out a batch-first, one-directional LSTM with biases only")
        self.layers, self.hidden, self.dropout = lstm.num_layers, lstm.hidden_size, lstm.dropout
        for name, value in lstm.named_parameters():
            self.register_parameter(name, nn.Parameter(value.detach().clone()))

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, None]:
        """x (N, T, F), state (h0, c0) each (layers, N, H) -> (the last layer's outputs (N, T, H), None)."""
        if state is None:
            zeros = x.new_zeros(self.layers, x.shape[0], self.hidden)
            state = (zeros, zeros)
        for layer in range(self.layers):
            w_ih, w_hh, b_ih, b_hh = (getattr(self, f"{kind}_l{layer}")
                                      for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
            inputs = x @ w_ih.T + (b_ih + b_hh)  # every step's input part at once: (N, T, 4H)
            h, c = state[0][layer], state[1][layer]
            outputs = []
            for t in range(x.shape[1]):
                i, f, g, o = (inputs[:, t] + h @ w_hh.T).chunk(4, dim=-1)  # PyTorch's gate order
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                outputs.append(h)
            x = torch.stack(outputs, dim=1)
            if layer < self.layers - 1:
                x = nn.functional.dropout(x, self.dropout, self.training)
        return x, None


def _unrolled(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every ``nn.LSTM`` written out (:class:`UnrolledLSTM`): the stack's template."""
    template = copy.deepcopy(model)
    for name, module in list(template.named_modules()):
        if isinstance(module, nn.LSTM):
            parent, _, child = name.rpartition(".")
            setattr(template.get_submodule(parent) if parent else template, child, UnrolledLSTM(module))
    return template


def _masked_mean(squares: Tensor, mask: Tensor) -> Tensor:
    """The mean of ``squares`` where ``mask`` holds; :func:`acgate.models.train.masked_mse` selects instead, which
    ``vmap`` cannot (the selection's size depends on the data)."""
    return (squares * mask).sum() / mask.sum()


def fit_stacked(panels: list[Panel], params: Params, method: str, seeds: list[int],
                log: Callable[[str], None] = print) -> list[FitResult] | None:
    """Train ``method`` on ``panels[i]`` with seed ``seeds[i]`` as one stacked model; the seeds' results in order,
    each as its lone :func:`acgate.models.train.fit` gives it, or None where the stack cannot be trained at once
    (panels of different shapes, or a stack that does not fit in memory as one block): the caller trains them alone.
    """
    cfg, tcfg = params.model, params.train
    device = choose_device(tcfg.device)
    if len({panel.X.shape + panel.P.shape + panel.S.shape for panel in panels}) > 1:
        return None
    if tcfg.keep_freed_memory:
        keep_freed_memory()
    models, batches, norms = [], [], []
    for panel, seed in zip(panels, seeds, strict=True):  # each seed's weights as its lone run draws them
        seed_everything(seed, tcfg.threads)
        norms.append(Normalisers.fit(panel))
        batches.append(Batch.build(panel, norms[-1], cfg.max_lag, device))
        models.append(build(cfg, method, panel.n_entities, panel.X.shape[2], panel.P.shape[1],
                            panel.S.shape[1]).to(device))
    memory = MemoryPlan.measure(models[0], batches[0], "auto")
    if memory.blocks > 1 or (memory.available is not None
                             and memory.needed() * len(models) > HEADROOM * memory.available):
        return None
    weights, buffers = stack_module_state(models)
    template = _unrolled(models[0])
    inputs = {name: torch.stack([getattr(b, name) for b in batches])
              for name in ("lags", "proxies", "static", "entity_index", "y")}
    masks = {split: torch.stack([b.masks[split] for b in batches]) for split in ("train", "val")}
    steps = {split: int(masks[split].any(dim=(0, 1)).nonzero().max()) + 1 for split in masks}  # Batch.through
    anchor = cfg.recon_anchor_weight

    def losses(w: dict, b: dict, lags: Tensor, proxies: Tensor, static: Tensor, index: Tensor, y: Tensor,
               mask: Tensor) -> tuple[Tensor, Tensor]:
        out = functional_call(template, (w, b), (lags, proxies, static, index))
        task = _masked_mean((out.y_hat - y) ** 2, mask)
        recon = recon_loss(out.p_hat, proxies, anchor) if out.p_hat is not None else task.new_zeros(())
        return task, recon

    stacked_losses = vmap(losses, randomness="different")

    def split_losses(split: str) -> tuple[Tensor, Tensor]:
        cut = steps[split]
        return stacked_losses(weights, buffers, inputs["lags"][:, :, :cut], inputs["proxies"], inputs["static"],
                              inputs["entity_index"], inputs["y"][:, :, :cut], masks[split][:, :, :cut])

    optimiser = torch.optim.Adam(list(weights.values()), lr=tcfg.lr, fused=True)
    recon_weight = models[0].recon_weight
    count = len(models)
    active = np.ones(count, dtype=bool)
    rows: list[list] = [[] for _ in models]
    best_val, best_epoch, stale = np.full(count, np.inf), np.zeros(count, dtype=int), np.zeros(count, dtype=int)
    best_state: list[dict] = [{} for _ in models]
    start = time.perf_counter()
    for epoch in range(1, tcfg.max_epochs + 1):
        template.train()
        optimiser.zero_grad()
        task, recon = split_losses("train")
        (task + recon_weight * recon).sum().backward()
        _clip_each(weights.values(), tcfg.grad_clip)
        optimiser.step()
        template.eval()
        with torch.no_grad():
            val = split_losses("val")[0].cpu().numpy()
        task, recon = task.detach().cpu().numpy(), recon.detach().cpu().numpy()
        for i in np.flatnonzero(active):
            if not (np.isfinite(val[i]) and np.isfinite(task[i])):
                raise TrainingError(f"[{method} seed {seeds[i]}] a loss is not finite at epoch {epoch} (training "
                                    f"{task[i]}, validation {val[i]}; seeds {seeds} trained stacked): training "
                                    "diverged or the panel holds values too large for float32; check the panel's "
                                    "values (01_data_prep), or lower train.lr")
            rows[i].append((epoch, float(task[i]), float(recon[i]), float(val[i])))
            if val[i] < best_val[i]:
                best_state[i] = {name: t[i].detach().clone() for name, t in {**weights, **buffers}.items()}
                best_val[i], best_epoch[i], stale[i] = val[i], epoch, 0
            else:
                stale[i] += 1
            if stale[i] >= tcfg.patience or epoch == tcfg.max_epochs:
                active[i] = False
                log(f"  [{method} seed {seeds[i]}] epoch {epoch:3d}/{tcfg.max_epochs}  train {task[i]:.4f}  "
                    f"val {val[i]:.4f}  best {best_val[i]:.4f} @ {best_epoch[i]} (stacked with {count - 1} more)")
        if not active.any():
            break
    seconds = (time.perf_counter() - start) / count  # each seed's share of the stack's time
    results = []
    for i, model in enumerate(models):
        model.load_state_dict(best_state[i])
        model.eval()
        results.append(FitResult(
            model=model, history=pd.DataFrame(rows[i], columns=["epoch", "train_loss", "recon_loss", "val_loss"]),
            best_epoch=int(best_epoch[i]), epochs_run=len(rows[i]), seconds=seconds, device=str(device),
            batch=batches[i], norm=norms[i], memory=memory))
    return results


def _clip_each(weights, max_norm: float) -> None:
    """``clip_grad_norm_`` for every model of the stack on its own: each model's gradients scaled by
    max_norm / (its global norm + 1e-6) where that is below 1."""
    grads = [w.grad for w in weights if w.grad is not None]
    norms = torch.stack([g.flatten(start_dim=1).norm(dim=1) for g in grads]).norm(dim=0)  # (models,)
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.view(-1, *[1] * (g.dim() - 1)))

