"""Behaviour: on an easy synthetic panel AC-GATE recovers the entity ordering of the true lags, far from what a
chance ordering gives. (The collapsed ablations cannot order entities at all: their gate is one lag distribution
for every entity, which tests/models/test_networks.py checks.)"""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from acgate.config import load_params
from acgate.data.dgp import simulate
from acgate.models import runner, train

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def easy():
    """100 entities, low noise, otherwise the paper's locked linear setting (K = 10, d = 64, 200 epochs)."""
    params = load_params(ROOT / "params" / "synthetic_linear.yaml")
    synthetic = dataclasses.replace(params.synthetic, n_entities=100, noise_sd=0.05)
    params = dataclasses.replace(params, synthetic=synthetic,
                                 train=dataclasses.replace(params.train, device="cpu", log_every=1000))
    return params, simulate(synthetic, 11, params.split.val_start, params.split.test_start)


@pytest.mark.slow
def test_acgate_recovers_the_true_lag_ordering(easy):
    params, panel = easy
    table = runner.lag_table(train.fit(panel, params, "acgate", 0, lambda s: None), panel)
    rho = stats.spearmanr(table.kstar, panel.truth["kstar_true"]).statistic
    mae = np.mean(np.abs(table.kstar - panel.truth["dgp_mean_lag"]))
    assert rho > 0.9, f"Spearman(k*, lag centre) = {rho:.3f}"
    assert mae < 1.5, f"MAE(k*, DGP mean lag) = {mae:.3f}"
    # a chance ordering is far from this: |rho| of a random k* is about 1/sqrt(N) = 0.1
    shuffled = np.random.default_rng(0).permutation(table.kstar.to_numpy())
    assert abs(stats.spearmanr(shuffled, panel.truth["kstar_true"]).statistic) < 0.4
