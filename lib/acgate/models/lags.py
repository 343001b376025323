"""Lag summaries of a lag distribution omega (N, K) over lags k = 1..K."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from acgate.data.panel import Panel


def effective_lag(omega: np.ndarray) -> np.ndarray:
    """k*_i = sum_k k omega_{i,k}, shape (N,)."""
    return omega @ np.arange(1, omega.shape[1] + 1)


def omega_entropy(omega: np.ndarray) -> np.ndarray:
    """Shannon entropy (nats) of each entity's lag distribution, shape (N,); ln K for a uniform one, 0 log 0 = 0."""
    omega = np.asarray(omega, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(omega > 0, omega * np.log(omega), 0.0)
    return np.where(np.isnan(omega).any(axis=1), np.nan, -terms.sum(axis=1))


def gate_sensitivity(z: np.ndarray, omega_of_z: Callable[[np.ndarray], np.ndarray], n_grid: int = 101) -> float:
    """Range (max - min) of k* as z sweeps from its 5th to its 95th percentile across entities.

    ``omega_of_z`` maps scores (G,) to lag weights (G, K); 0 when z does not vary.
    """
    lo, hi = np.percentile(z, [5, 95])
    kstar = effective_lag(omega_of_z(np.linspace(lo, hi, n_grid)))
    return float(kstar.max() - kstar.min())


def lag_frame(panel: Panel, profile: np.ndarray, kind: str, z: np.ndarray | None = None,
              internal: np.ndarray | None = None) -> pd.DataFrame:
    """lags.csv: entity, z, omega_1..omega_K, kstar, kstar_kind, [internal_1..K, kstar_internal], truth columns."""
    table = pd.DataFrame({"entity": panel.entities, "z": np.nan if z is None else z})
    for k in range(profile.shape[1]):
        table[f"omega_{k + 1}"] = profile[:, k]
    table["kstar"] = effective_lag(profile)
    table["kstar_kind"] = kind
    if internal is not None:
        for k in range(internal.shape[1]):
            table[f"internal_{k + 1}"] = internal[:, k]
        table["kstar_internal"] = effective_lag(internal)
    for key in ("kstar_true", "dgp_mean_lag"):
        if key in panel.truth:
            table[key] = panel.truth[key]
    return table
