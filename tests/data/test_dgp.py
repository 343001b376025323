import dataclasses
import hashlib

import numpy as np
import pytest

from acgate.data.dgp import lag_centre, lag_weights, load_or_simulate, simulate
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


# K = 10: interaction 5.5 + 4.5 (2z - 1)(2z2 - 1), non_monotone 5.5 + 4.5 sin(2 pi z); rounding is half to even
@pytest.mark.parametrize("z, z2, expected", [
    (0.0, 0.0, 10),    # (-1)(-1) = 1: 10, the top of 1..K
    (0.0, 1.0, 1),     # (-1)(1) = -1: 1, the bottom of 1..K
    (1.0, 0.0, 1),
    (1.0, 1.0, 10),
    (0.5, 0.9, 6),     # no main effect: z = 1/2 gives 5.5 -> 6 whatever z2 is
    (0.9, 0.5, 6),     # ... and so does z2 = 1/2
    (0.75, 0.25, 4),   # (0.5)(-0.5) = -0.25: 5.5 - 1.125 = 4.375 -> 4
    (0.9, 0.9, 8),     # (0.8)(0.8) = 0.64: 5.5 + 2.88 = 8.38 -> 8
    (0.25, 0.0, 8),    # (-0.5)(-1) = 0.5: 7.75 -> 8
])
def test_interaction_lag_centre_is_a_saddle(z, z2, expected):
    assert lag_centre(np.array([z]), "interaction", 10, z2=np.array([z2]))[0] == expected


@pytest.mark.parametrize("z, expected", [
    (0.0, 6),          # sin 0 = 0: 5.5 -> 6
    (0.25, 10),        # sin(pi/2) = 1: 10, the longest lag
    (0.75, 1),         # sin(3 pi/2) = -1: 1, the shortest
    (1 / 12, 8),       # sin(pi/6) = 0.5: 7.75 -> 8
    (0.4, 8),          # sin(0.8 pi) = 0.588: 8.145 -> 8
    (0.6, 3),          # sin(1.2 pi) = -0.588: 2.855 -> 3
    (0.95, 4),         # sin(1.9 pi) = -0.309: 4.109 -> 4
])
def test_non_monotone_lag_centre_follows_a_sine(z, expected):
    assert lag_centre(np.array([z]), "non_monotone", 10)[0] == expected


def test_new_lag_maps_span_one_to_k_for_any_k():
    z, z2 = np.array([0.0, 0.0, 0.25, 0.75]), np.array([0.0, 1.0, 0.5, 0.5])
    assert list(lag_centre(z[:2], "interaction", 6, z2=z2[:2])) == [6, 1]
    assert list(lag_centre(z[2:], "non_monotone", 6)) == [6, 1]
    assert list(lag_centre(z[2:], "non_monotone", 1)) == [1, 1]  # K = 1: one lag, nothing to vary
    with pytest.raises(ValueError, match="z2"):
        lag_centre(z, "interaction", 10)


def _truth_digest(panel) -> str:
    """sha256 of the truth arrays and the stratifiers; rounded to 12 decimals, so a last-bit difference in exp()
    between numpy builds does not count as a different panel."""
    digest = hashlib.sha256()
    for key in sorted(panel.truth):
        digest.update(key.encode())
        digest.update(np.round(np.asarray(panel.truth[key], dtype=np.float64), 12).tobytes())
    digest.update(np.round(panel.stratifiers.to_numpy(dtype=np.float64), 12).tobytes())
    digest.update(",".join(panel.stratifiers.columns).encode())
    return digest.hexdigest()[:12]


# recorded before the interaction and non_monotone maps and the threshold driver were added: seed 0, smoke size (the
# panel digests as Panel.digest gives them since it takes each proxy vector with its entity)
@pytest.mark.parametrize("scenario, panel_digest, truth_digest", [
    ("linear", "fdcb74490c5a", "b77e48f89276"),
    ("nonlinear", "e1266bc96614", "b5db447bfa5a"),
    ("constant", "6ed40352173e", "676257943381"),
    ("two_regime", "ba06aa7e537d", "9f78dc7d6ece"),
])
def test_earlier_scenarios_draw_the_same_panels_as_before(smoke_params, scenario, panel_digest, truth_digest):
    cfg = dataclasses.replace(smoke_params.synthetic, scenario=scenario, driver="linear")
    p = simulate(cfg, 0, smoke_params.split.val_start, smoke_params.split.test_start)
    assert (p.digest(), _truth_digest(p)) == (panel_digest, truth_digest)
    assert p.proxy_names == ["z", "sqrt_z", "one_minus_0.7z"]


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


def test_threshold_driver_passes_lagged_inputs_through_a_hinge(smoke_params):
    cfg = dataclasses.replace(smoke_params.synthetic, noise_sd=0.0, n_entities=3, driver="threshold",
                              driver_threshold=0.1, threshold_gain=1.5)
    p = simulate(cfg, 0, smoke_params.split.val_start, smoke_params.split.test_start)
    x, w, z = p.X[:, :, 0].astype(float), p.truth["lag_weights"], p.truth["z"]
    K = cfg.lag_horizon
    i = 1
    for t in range(len(p.times)):
        lagged = sum(w[i, k - 1] * 1.5 * max(x[i, t - k] - 0.1, 0.0) for k in range(1, K + 1) if t - k >= 0)
        expected = lagged + 0.15 * x[i, t] + 0.25 * z[i] + 0.10 * p.S[i, 0]  # the contemporaneous term stays linear
        assert p.Y[i, t] == pytest.approx(expected, abs=1e-5)
    # the same draws as the linear driver: only the target differs, and only through the lagged inputs
    linear = simulate(dataclasses.replace(cfg, driver="linear"), 0, p.val_start, p.test_start)
    np.testing.assert_array_equal(linear.X, p.X)
    assert not np.allclose(linear.Y[:, K:], p.Y[:, K:])


def test_interaction_panel_has_z2_from_its_own_stream(smoke_params):
    cfg, split = smoke_params.synthetic, smoke_params.split
    p = simulate(dataclasses.replace(cfg, scenario="interaction"), 7, split.val_start, split.test_start)
    linear = simulate(cfg, 7, split.val_start, split.test_start)
    z, z2, n = p.truth["z"], p.truth["z2"], cfg.n_entities
    np.testing.assert_array_equal(z2, np.random.default_rng([7, 2]).uniform(0.0, 1.0, size=n))
    assert p.proxy_names == ["z", "z2", "one_minus_0.7z"]
    assert list(p.stratifiers.columns) == ["latent_z", "latent_z2", "noise"]
    np.testing.assert_array_equal(p.stratifiers.latent_z2, z2)
    np.testing.assert_array_equal(p.truth["kstar_true"], lag_centre(z, "interaction", cfg.lag_horizon, z2=z2))
    # the main stream is untouched: z, x, statics and the proxy noise are the linear scenario's draws
    np.testing.assert_array_equal(z, linear.truth["z"])
    np.testing.assert_array_equal(p.X, linear.X)
    np.testing.assert_array_equal(p.S, linear.S)
    np.testing.assert_array_equal(p.P[:, [0, 2]], linear.P[:, [0, 2]])
    np.testing.assert_allclose(p.P[:, 1] - z2, linear.P[:, 1] - np.sqrt(z), atol=1e-6)  # the same noise draw
    np.testing.assert_array_equal(p.stratifiers.noise, linear.stratifiers.noise)


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
