"""How good a run is: forecast metrics of predictions against observed targets (the audit's L0, also written to
every run's metrics.json) and the recovery of a known true lag by k* (L3).

    forecast_metrics(y, y_hat, time)  ->  {"mse", "mae", "r2_pooled", "r2_by_time", "n"}
    l3_recovery(kstar, truth)         ->  {"mae", "spearman"}
"""

from __future__ import annotations

import numpy as np

from acgate import statistics

TRUTHS = {"lag_centre": "kstar_true", "dgp_mean_lag": "dgp_mean_lag"}  # L3's truths and their lags.csv columns


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

    Spearman is undefined (NaN) when k* does not vary across entities (a collapsed gate ranks nothing; the
    paper prints 0 for such rows) or when the truth does not (the null scenario). Entities whose (diagnostic) k* is
    undefined, e.g. no single lag matters under occlusion, are left out.
    """
    defined = np.isfinite(kstar)
    kstar, truth = kstar[defined], truth[defined]
    if len(kstar) < 2:
        return {"mae": float("nan"), "spearman": float("nan")}
    mae = float(np.mean(np.abs(kstar - truth)))
    rho = float("nan") if np.ptp(kstar) == 0 or np.ptp(truth) == 0 else statistics.spearman(kstar, truth)
    return {"mae": mae, "spearman": rho}
