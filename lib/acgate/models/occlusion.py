"""The diagnostic lag profile of a model without a lag gate: lag-specific occlusion. Each lag k of every input
window is replaced in turn by its training mean (0 after standardisation), and the increase in each entity's task
loss, normalised over lags, is that entity's lag profile; its mean lag is the baselines' (diagnostic, never
structural) k*."""

from __future__ import annotations

import numpy as np
import torch

from acgate.models.batch import Batch


def occlusion_increase(model: torch.nn.Module, batch: Batch, block: int) -> np.ndarray:
    """Lag-specific occlusion (N, K): per entity, the increase in task MSE over the training and validation
    targets when only lag k of every input window is replaced by its training mean (0 after standardisation). The
    passes stop at the last validation step (every model is causal in the target steps: the test steps change
    nothing here), and take ``block`` entities at a time."""
    return np.concatenate([_block_increase(model, part) for part in batch.through("val").blocks(block)])


def _block_increase(model: torch.nn.Module, batch: Batch) -> np.ndarray:
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
