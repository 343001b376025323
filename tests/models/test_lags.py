"""Tests of acgate.models.lags: the effective lag, the entropy of omega and the gate's sensitivity."""

import numpy as np
import pytest
from scipy import stats

from acgate.models import lags


def test_effective_lag_and_entropy_hand_worked():
    omega = np.array([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.0, 0.5, 0.5, 0.0]])
    np.testing.assert_allclose(lags.effective_lag(omega), [1.0, 2.5, 2.5])
    np.testing.assert_allclose(lags.omega_entropy(omega), [0.0, np.log(4), np.log(2)])
    np.testing.assert_allclose(lags.omega_entropy(omega), stats.entropy(omega, axis=1))


def test_gate_sensitivity_is_the_kstar_range_over_the_5_to_95_percentile_sweep():
    z = np.linspace(0, 1, 101)  # percentiles 5 and 95 are 0.05 and 0.95

    def two_lag_gate(zz):  # k* = 1 + zz
        return np.stack([1 - zz, zz], axis=1)

    assert lags.gate_sensitivity(z, two_lag_gate) == pytest.approx(0.9)
    assert lags.gate_sensitivity(np.zeros(10), two_lag_gate) == 0.0
