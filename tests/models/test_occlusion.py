"""Tests of acgate.models.occlusion: the lag-specific occlusion profile of a neural baseline."""

import numpy as np
import torch

from acgate.data.dgp import simulate
from acgate.data.panel import Normalisers
from acgate.models import occlusion, train
from acgate.models.networks import Output


class LagOneOnly(torch.nn.Module):
    """Predicts y_t = 2 x_{t-1}: depends on lag 1 of the first feature only."""

    def forward(self, lags, proxies, static, entity_index):
        return Output(y_hat=2 * lags[:, :, 0, 0])


def test_occlusion_of_a_lag_the_prediction_ignores_is_zero(smoke_params):
    panel = simulate(smoke_params.synthetic, 0, smoke_params.split.val_start, smoke_params.split.test_start)
    batch = train.Batch.build(panel, Normalisers.fit(panel), smoke_params.model.max_lag, torch.device("cpu"))
    increase = occlusion.occlusion_increase(LagOneOnly(), batch, block=panel.n_entities)
    assert increase.shape == (panel.n_entities, smoke_params.model.max_lag)
    np.testing.assert_array_equal(occlusion.occlusion_increase(LagOneOnly(), batch, block=7), increase)  # in blocks
    assert (increase[:, 1:] == 0).all() and (increase[:, 0] != 0).any()
    profile = occlusion.profile_from_increase(increase)
    rows = increase[:, 0] > 0
    np.testing.assert_array_equal(profile[rows, 0], 1.0)
    assert np.isnan(profile[~rows]).all()  # no lag matters for these entities: k* undefined, not invented
