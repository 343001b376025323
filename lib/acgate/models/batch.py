"""A panel as the models see it: its lag windows, targets, split masks, proxies, static features and entity index as
normalised tensors (:class:`Batch`), whole or cut into blocks of entities. Training (``acgate.models.train``), the
memory plan (``acgate.models.memory``) and occlusion (``acgate.models.occlusion``) all take one.

    batch = Batch.build(panel, Normalisers.fit(panel), max_lag, torch.device("cpu"))
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from acgate.data.panel import Normalisers, Panel
from acgate.models.networks import lag_windows


@dataclasses.dataclass
class Batch:
    """The whole panel, or a block of its entities, as normalised tensors."""

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

    @property
    def n_entities(self) -> int:
        return self.y.shape[0]

    def blocks(self, size: int) -> list[Batch]:
        """The batch cut into blocks of ``size`` consecutive entities (the last one may be smaller); the batch
        itself when it holds no more than ``size``."""
        if size >= self.n_entities:
            return [self]
        return [Batch(lags=self.lags[i:i + size], y=self.y[i:i + size],
                      masks={s: m[i:i + size] for s, m in self.masks.items()}, proxies=self.proxies[i:i + size],
                      static=self.static[i:i + size], entity_index=self.entity_index[i:i + size])
                for i in range(0, self.n_entities, size)]

    def inputs(self, lags: torch.Tensor | None = None) -> tuple:
        return (self.lags if lags is None else lags, self.proxies, self.static, self.entity_index)

    def through(self, split: str) -> Batch:
        """The batch cut after the last target step of ``split``: the training step needs the windows up to the
        last training target, the validation pass those up to the last validation target. Every model is causal in
        the target steps, so its predictions up to there are those it makes from the whole batch."""
        steps = int(self.masks[split].any(dim=0).nonzero().max()) + 1
        return Batch(lags=self.lags[:, :steps], y=self.y[:, :steps],
                     masks={s: m[:, :steps] for s, m in self.masks.items()}, proxies=self.proxies,
                     static=self.static, entity_index=self.entity_index)
