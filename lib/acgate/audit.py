"""The layered lag audit (paper section V). This module holds the per-run statistics so far:
L0 forecast metrics and L3 ground-truth recovery."""

from __future__ import annotations

import numpy as np
from scipy import stats


def forecast_metrics(y: np.ndarray, y_hat: np.ndarray, time: np.ndarray) -> dict[str, float]:
    """L0 metrics of observed targets y (n,) against predictions y_hat (n,), with each row's time (n,).

    ``r2_pooled`` is 1 - SSE/SST over all rows; ``r2_by_time`` is the paper's cross-sectional R2,
    computed across entities at each time value and averaged over time values (times with fewer
    than two entities or no spread are skipped).
    """
    err = y_hat - y
    sst = np.sum((y - y.mean()) ** 2)
    per_time = []
    for t in np.unique(time):
        sel = time == t
        sst_t = np.sum((y[sel] - y[sel].mean()) ** 2)
        if sel.sum() >= 2 and sst_t > 0:
            per_time.append(1 - np.sum(err[sel] ** 2) / sst_t)
    return {
        "mse": float(np.mean(err**2)),
        "mae": float(np.mean(np.abs(err))),
        "r2_pooled": float(1 - np.sum(err**2) / sst) if sst > 0 else float("nan"),
        "r2_by_time": float(np.mean(per_time)) if per_time else float("nan"),
        "n": int(len(y)),
    }


def l3_recovery(kstar: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """L3: MAE and Spearman rho of learned k* (N,) against a true lag (N,).

    Spearman is undefined (NaN) when k* does not vary across entities: a collapsed gate ranks nothing.
    (The paper prints 0 for such rows.)
    """
    mae = float(np.mean(np.abs(kstar - truth)))
    rho = float("nan") if np.ptp(kstar) == 0 else float(stats.spearmanr(kstar, truth).statistic)
    return {"mae": mae, "spearman": rho}
