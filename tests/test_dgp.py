import dataclasses

import numpy as np
import pytest

from acgate.dgp import lag_centre, lag_weights, load_or_simulate, simulate
from acgate.layout import panel_dir


def test_same_seed_same_panel_other_seed_other_panel(smoke_params):
    cfg, split = smoke_params.synthetic, smoke_params.split
    a = simulate(cfg, 3, split.val_start, split.test_start)
    b = simulate(cfg, 3, split.val_start, split.test_start)
    c = simulate(cfg, 4, split.val_start, split.test_start)
    for name in ("X", "Y", "P", "S"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.allclose(a.Y, c.Y)
    np.testing.assert_array_equal(a.truth["kstar_true"], b.truth["kstar_true"])


@pytest.mark.parametrize("z, linear, nonlinear", [
    (0.0, 10, 10),    # 3 + 7 = 10;  10 * 1 = 10
    (1.0, 3, 1),      # 3;           0 clipped to 1
    (0.5, 6, 2),      # 6.5 rounds half to even -> 6;  2.5 -> 2
    (0.3, 8, 5),      # 7.9 -> 8;    4.9 -> 5
    (0.8, 4, 1),      # 4.4 -> 4;    0.4 -> 0 -> clipped to 1
])
def test_lag_centres_as_specified(z, linear, nonlinear):
    z = np.array([z])
    assert lag_centre(z, "linear", 10)[0] == linear
    assert lag_centre(z, "nonlinear", 10)[0] == nonlinear


def test_lag_centre_is_clipped_to_the_horizon():
    assert lag_centre(np.array([0.0]), "linear", 6)[0] == 6


def test_lag_weights_are_a_bump_around_the_centre():
    w = lag_weights(np.array([1, 5, 10]), 10, 1.25)
    np.testing.assert_allclose(w.sum(axis=1), 1.0)
    assert list(w.argmax(axis=1) + 1) == [1, 5, 10]
    # hand-worked: centre 5, lags 4 and 6 are one width-unit of 1/1.25 away
    np.testing.assert_allclose(w[1, 3] / w[1, 4], np.exp(-0.5 * (1 / 1.25) ** 2))
    np.testing.assert_allclose(w[1, 3], w[1, 5])


def test_target_follows_the_dgp_equation_without_noise(smoke_params):
    cfg = dataclasses.replace(smoke_params.synthetic, noise_sd=0.0, n_entities=5)
    p = simulate(cfg, 0, smoke_params.split.val_start, smoke_params.split.test_start)
    x, w, z = p.X[:, :, 0].astype(float), p.truth["lag_weights"], p.truth["z"]
    K = cfg.lag_horizon
    for i in range(5):
        for t in range(len(p.times)):
            lagged = sum(w[i, k - 1] * x[i, t - k] for k in range(1, K + 1) if t - k >= 0)
            expected = lagged + 0.15 * x[i, t] + 0.25 * z[i] + 0.10 * p.S[i, 0]
            assert p.Y[i, t] == pytest.approx(expected, abs=1e-5)


def test_inputs_proxies_and_statics_follow_the_dgp(smoke_params):
    cfg = dataclasses.replace(smoke_params.synthetic, n_entities=2000, proxy_noise_sd=0.0, static_noise_sd=0.0)
    p = simulate(cfg, 1, smoke_params.split.val_start, smoke_params.split.test_start)
    z = p.truth["z"]
    np.testing.assert_allclose(p.P, np.stack([z, np.sqrt(z), 1 - 0.7 * z], axis=1), atol=1e-6)
    np.testing.assert_allclose(p.S[:, 0], z, atol=1e-6)
    x = p.X[:, :, 0].astype(float)
    resid = (x[:, 1:] - 0.65 * x[:, :-1] - 0.10 * (z[:, None] - 0.5)) / 0.35  # the N(0,1) innovations
    assert abs(resid.mean()) < 0.02 and abs(resid.std() - 1) < 0.02
    np.testing.assert_allclose(p.truth["dgp_mean_lag"], p.truth["lag_weights"] @ np.arange(1, cfg.lag_horizon + 1))


def test_saved_panel_is_reused_only_with_the_same_settings(smoke_params, tmp_path):
    first = load_or_simulate(smoke_params, 0, tmp_path)
    # mark the saved panel, so that a panel read back differs from one drawn afresh (the draw is deterministic)
    dataclasses.replace(first, Y=first.Y + 1).save(panel_dir(tmp_path, smoke_params.domain, 0))
    again = load_or_simulate(smoke_params, 0, tmp_path)
    np.testing.assert_array_equal(again.Y, first.Y + 1)  # read back, not drawn again
    np.testing.assert_array_equal(first.truth["lag_weights"], again.truth["lag_weights"])
    assert list(again.stratifiers.columns) == ["latent_z", "noise"]
    bigger = dataclasses.replace(smoke_params, synthetic=dataclasses.replace(smoke_params.synthetic, n_entities=50))
    assert load_or_simulate(bigger, 0, tmp_path).n_entities == 50
    # the folder now holds the bigger panel's settings, so the first settings draw their panel afresh
    np.testing.assert_array_equal(load_or_simulate(smoke_params, 0, tmp_path).Y, first.Y)
