"""Tests of acgate.models.metrics: the forecast metrics and the L3 recovery of the true lags."""

import numpy as np
import pytest
from scipy import stats

from acgate.models.metrics import forecast_metrics, l3_recovery


def test_forecast_metrics_against_a_hand_worked_example():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    y_hat = np.array([1.0, 2.0, 2.0, 6.0])
    time = np.array([0, 0, 1, 1])
    m = forecast_metrics(y, y_hat, time)
    assert m["mse"] == pytest.approx((0 + 0 + 1 + 4) / 4)
    assert m["mae"] == pytest.approx((0 + 0 + 1 + 2) / 4)
    assert m["r2_pooled"] == pytest.approx(1 - 5 / 5.0)  # SST = 2.25+0.25+0.25+2.25
    # by time: t=0 perfect (R2 1); t=1 SSE 5, SST 0.5 -> R2 -9; mean -4
    assert m["r2_by_time"] == pytest.approx(-4.0)
    assert m["n"] == 4


def test_l3_against_scipy_and_a_collapsed_gate():
    rng = np.random.default_rng(0)
    truth = rng.integers(1, 11, 50).astype(float)
    kstar = truth + rng.normal(0, 1, 50)
    l3 = l3_recovery(kstar, truth)
    assert l3["spearman"] == pytest.approx(stats.spearmanr(kstar, truth).statistic)
    assert l3["mae"] == pytest.approx(np.abs(kstar - truth).mean())
    collapsed = l3_recovery(np.full(50, 5.5), truth)
    assert np.isnan(collapsed["spearman"]) and collapsed["mae"] == pytest.approx(np.abs(5.5 - truth).mean())
