"""acgate.tools.noise_recovery: its cells hold the noise they claim, and the noise model's readings are summarised."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from acgate.audit import gls, noise
from acgate.tools import noise_recovery


def test_a_cell_keeps_each_entitys_noise_variance_at_another_rho(example):
    _, _, source = example
    for rho, factors in ((0.5, 0), (0.95, 1)):
        cell = noise_recovery.cell_source(source, rho, factors)
        assert np.allclose(cell.sigma**2 / (1 - rho**2), source.sigma**2 / (1 - source.rho**2))
        assert cell.rho == rho and np.array_equal(cell.common, source.common if factors else 0 * source.common)


def test_the_true_share_is_that_of_the_surrogates_own_noise(example):
    """None without common factors; nearly all of it with the panel's factor when the idiosyncratic noise is (nearly)
    gone; the common_shock null's shock alone, as large as the idiosyncratic noise, about half; and on top of the
    panel's factor (the cell of 2 factors) it adds to the share."""
    _, _, source = example
    rows = gls.lag_design(source.panel, source.max_lag).rows
    rng = np.random.default_rng(0)  # a common factor of its own (the example panel's noise has none)
    common = np.outer(rng.uniform(0.5, 1.5, len(source.sigma)), 0.1 * rng.normal(size=source.common.shape[1]))
    source = dataclasses.replace(source, common=common)
    plain, one, shocked = (noise_recovery.cell_source(source, 0.8, f) for f in (0, 1, 2))
    assert noise_recovery.true_share(plain, "one_curve", 3, None, rows) == 0.0
    quiet = dataclasses.replace(one, sigma=one.sigma * 1e-4)
    assert noise_recovery.true_share(quiet, "one_curve", 3, None, rows) == pytest.approx(1.0, abs=1e-3)
    alone = dataclasses.replace(shocked, common=0 * common)
    assert 0.2 < noise_recovery.true_share(alone, "one_curve", 3, "common_shock", rows) < 0.8
    assert noise_recovery.true_share(shocked, "one_curve", 3, "common_shock", rows) > noise_recovery.true_share(
        one, "one_curve", 3, None, rows)


def test_a_surrogates_reading_and_the_summary(example):
    params, _, source = example
    rows = pd.DataFrame([noise_recovery.surrogate_row(source, params, (0.8, factors, "one_curve", replicate))
                         for factors in (0, 2) for replicate in range(2)])
    assert list(rows.factors) == [0, 0, 2, 2]
    assert rows.rho_read.between(-0.9, noise.MAX_RHO).all() and (rows.true_share[rows.factors == 0] == 0).all()
    again = noise_recovery.surrogate_row(source, params, (0.8, 0, "one_curve", 1))
    assert again == rows.iloc[1].to_dict()  # the study's seed
    found = noise_recovery.summary(rows).set_index("factors")
    assert found.surrogates.tolist() == [2, 2]
    assert found.rho_bias[2] == pytest.approx(rows.rho_read[2:].mean() - 0.8, abs=1e-4)
