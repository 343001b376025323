"""Baselines that every forecasting claim is read against. So far: persistence (y_hat_t = y_{t-1})."""

from __future__ import annotations

import numpy as np
import pandas as pd

from acgate.panel import Panel


def persistence(panel: Panel, max_lag: int) -> pd.DataFrame:
    """Predictions y_hat_t = y_{t-1} for the target steps K..T-1 where both y_t and y_{t-1} are observed;
    the same columns as a model's predictions.csv (entity, time, split, y, y_hat)."""
    y, previous = panel.Y[:, max_lag:], panel.Y[:, max_lag - 1:-1]
    entity, step = np.nonzero(np.isfinite(y) & np.isfinite(previous))
    return pd.DataFrame({"entity": panel.entities[entity], "time": panel.times[max_lag:][step],
                         "split": panel.target_split(max_lag)[step], "y": y[entity, step],
                         "y_hat": previous[entity, step]})
