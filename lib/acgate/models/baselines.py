"""Non-neural baselines: persistence (y_hat_t = y_{t-1}) and Grouped ARDL.

Grouped ARDL is an ARDL(K, K) fitted by OLS (numpy least squares) on the K-lag windows of the features every model
sees and, unlike the neural models (whose inputs are lagged features only), lags 1..K of the target: a group
intercept, a calendar-time trend, lags 1..K of the target and lags 1..K of every feature, all in the
training-window standardised units. Entities are grouped by terciles of their first proxy (a training-window
summary); a group with too few training rows per coefficient is predicted by the global fit. Its diagnostic lag
profile is the normalised absolute feature coefficients per lag (lag 1 = most recent).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from acgate.config import Params
from acgate.data.panel import Normalisers, Panel
from acgate.models.lags import lag_frame


def persistence(panel: Panel, max_lag: int) -> pd.DataFrame:
    """Predictions y_hat_t = y_{t-1} for the target steps K..T-1 where both y_t and y_{t-1} are observed;
    the same columns as a model's predictions.csv (entity, time, split, y, y_hat)."""
    return panel.prediction_frame(max_lag, panel.Y[:, max_lag - 1:-1])


def ardl_design(panel: Panel, norm: Normalisers, max_lag: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Regressors (N, T-K, C) and targets (N, T-K) in standardised units, with the coefficient names."""
    x = norm.X.transform(panel.X)
    y = norm.Y.transform(panel.Y)
    n, t_len, n_feat = x.shape
    steps = t_len - max_lag
    train_times = panel.times[panel.train_time_mask()]
    trend = (panel.times[max_lag:] - train_times.mean()) / max(np.ptp(train_times), 1)  # calendar time
    columns = [np.ones((n, steps)), np.broadcast_to(trend, (n, steps))]
    names = ["intercept", "trend"]
    for k in range(1, max_lag + 1):
        columns.append(y[:, max_lag - k:t_len - k])
        names.append(f"y_lag{k}")
    for k in range(1, max_lag + 1):
        for f in range(n_feat):
            columns.append(x[:, max_lag - k:t_len - k, f])
            names.append(f"{panel.feature_names[f]}_lag{k}")
    return np.stack(columns, axis=-1), y[:, max_lag:], names


@dataclass
class GroupedARDL:
    panel: Panel
    max_lag: int
    norm: Normalisers
    group: np.ndarray  # (N,) group label of each entity
    coefficients: pd.DataFrame  # one row per group (and 'global'): the OLS coefficients
    groups: dict  # group -> {"entities": n, "train_rows": r, "fit": "own" | "global"}
    y_hat: np.ndarray  # (N, T-K) predictions in original units (NaN where a lagged value is missing)
    seconds: float

    @classmethod
    def fit(cls, panel: Panel, params: Params) -> GroupedARDL:
        start = time.perf_counter()
        K = params.model.max_lag
        norm = Normalisers.fit(panel)
        design, target, names = ardl_design(panel, norm, K)
        usable = np.isfinite(design).all(axis=-1)
        trainable = usable & np.isfinite(target) & (panel.target_split(K) == "train")[None, :]
        group = np.asarray(pd.qcut(panel.P[:, 0], 3, labels=["low", "mid", "high"], duplicates="drop").astype(str))

        def ols(rows: np.ndarray) -> np.ndarray:
            return np.linalg.lstsq(design[rows], target[rows], rcond=None)[0]

        beta = {"global": ols(trainable)}
        groups = {}
        for g in sorted(set(group)):
            rows = trainable & (group == g)[:, None]
            own = rows.sum() >= params.model.ardl_min_rows_per_coef * len(names)
            beta[g] = ols(rows) if own else beta["global"]
            groups[g] = {"entities": int((group == g).sum()), "train_rows": int(rows.sum()),
                         "fit": "own" if own else "global"}
        per_entity = np.stack([beta[g] for g in group])  # (N, C)
        y_hat = np.where(usable, np.einsum("ntc,nc->nt", np.nan_to_num(design), per_entity), np.nan)
        coefficients = pd.DataFrame([{"group": g, **dict(zip(names, b, strict=True))} for g, b in beta.items()])
        return cls(panel, K, norm, group, coefficients, groups, norm.Y.inverse(y_hat), time.perf_counter() - start)

    def predictions(self) -> pd.DataFrame:
        return self.panel.prediction_frame(self.max_lag, self.y_hat)

    def lag_profile(self) -> np.ndarray:
        """(N, K): per entity, its group's |feature coefficients| summed over features per lag, normalised."""
        table = self.coefficients.set_index("group")
        weights = np.stack([[table.loc[g].filter(regex=rf"_lag{k}$").drop(f"y_lag{k}").abs().sum()
                             for k in range(1, self.max_lag + 1)] for g in self.group])
        return weights / weights.sum(axis=1, keepdims=True)

    def lag_table(self) -> pd.DataFrame:
        return lag_frame(self.panel, self.lag_profile(), "diagnostic: ARDL |coefficients|")
