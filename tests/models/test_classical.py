"""The classical yardstick (acgate.models.classical): the algebra against statsmodels, the lag profile by hand, recovery
on the synthetic panels, and its run folder."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from acgate.config import load_params
from acgate.data import dgp
from acgate.data.panel import Normalisers
from acgate.models import classical
from acgate.models.metrics import l3_recovery
from acgate.models.runner import run_method

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def linear():
    """The paper's linear synthetic panel (200 entities, 30 steps, K = 10), seed 0, and its params."""
    params = load_params(ROOT / "params" / "synthetic_linear.yaml")
    return params, dgp.simulate(params.synthetic, 0, params.split.val_start, params.split.test_start)


def smoke_design(smoke_params, size=3):
    panel = dgp.simulate(smoke_params.synthetic, 3, smoke_params.split.val_start, smoke_params.split.test_start)
    K = smoke_params.model.max_lag
    norm = Normalisers.fit(panel)
    windows = classical.lag_windows(norm.X.transform(panel.X), K)
    d = classical.design(windows, norm.Y.transform(panel.Y)[:, K:], classical.lag_basis(K, size),
                         panel.target_split(K))
    return panel, d, classical.moderators(norm.P.transform(panel.P), shared=False)


def test_lag_windows_and_basis(smoke_params):
    x = np.arange(2 * 7 * 1, dtype=float).reshape(2, 7, 1)
    windows = classical.lag_windows(x, 3)  # (N, T-K, F, K)
    assert windows.shape == (2, 4, 1, 3)
    assert windows[1, 0, 0].tolist() == [x[1, 2, 0], x[1, 1, 0], x[1, 0, 0]]  # target step 3: lags 1, 2, 3
    basis = classical.lag_basis(10, 4)
    assert np.allclose(basis.T @ basis, np.eye(4))
    full = classical.lag_basis(5, 5)  # J = K spans every lag curve
    assert np.allclose(full @ full.T, np.eye(5))


def test_unpenalised_fit_is_ols_with_entity_dummies(smoke_params):
    """Penalty 0: the within-entity least squares of the moderated model equals statsmodels OLS of y on entity
    dummies and every basis-reduced lag x moderator column, over the training targets."""
    panel, d, q = smoke_design(smoke_params)
    Z = classical.interactions(d.U, q)
    beta = classical.ridge_within(Z, d.y, d.train, np.ones(Z.shape[-1], bool), (0.0,))[0]
    entity, _ = np.nonzero(d.train)
    dummies = pd.get_dummies(entity).to_numpy(float)
    ols = sm.OLS(d.y[d.train], np.hstack([dummies, Z[d.train]])).fit()
    assert np.allclose(beta, ols.params[dummies.shape[1]:], atol=1e-8)
    # the intercepts the predictions use are the OLS dummies' coefficients
    fitted = np.einsum("nsc,c->ns", Z, beta)
    assert np.allclose(classical.intercepts(d.y - fitted, d.train)[np.unique(entity)], ols.params[:dummies.shape[1]],
                       atol=1e-8)


def test_ridge_shrinks_only_the_interactions(smoke_params):
    panel, d, q = smoke_design(smoke_params)
    Z = classical.interactions(d.U, q)
    penalised = np.tile(np.arange(q.shape[1]) > 0, 3)
    heavy = classical.ridge_within(Z, d.y, d.train, penalised, (1e6,))[0].reshape(1, 3, -1)
    assert np.abs(heavy[..., 1:]).max() < 1e-4  # interactions shrunk to zero
    shared = classical.ridge_within(Z[..., ~penalised], d.y, d.train, np.zeros((~penalised).sum(), bool), (0.0,))[0]
    assert np.allclose(heavy[..., 0].ravel(), shared, atol=1e-4)  # what is left is the shared-lag model


def test_two_stage_against_statsmodels(smoke_params):
    """One basis function (P = 1): stage 1 is per-entity OLS (statsmodels, its coefficient and variance), stage 2
    WLS of the entity coefficients on the moderators with weights 1 / (psi + v_i) (statsmodels), and each entity's
    curve is the prediction plus psi / (psi + v_i) of its own deviation, psi by the method of moments."""
    panel, d, q = smoke_design(smoke_params, size=1)
    usable, theta_own, cov_own = classical.stage_one(d)
    assert usable.all()
    own, var = [], []
    for i in range(panel.n_entities):
        rows = d.train[i]
        result = sm.OLS(d.y[i, rows], sm.add_constant(d.U[i, rows, 0, :])).fit()
        own.append(result.params[1])
        var.append(result.bse[1] ** 2)
    own, var = np.array(own), np.array(var)
    spread = own - q @ np.linalg.lstsq(q, own, rcond=None)[0]
    psi = max(spread @ spread / (len(own) - q.shape[1]) - var.mean(), 0.0)
    assert np.allclose(theta_own[:, 0], own, atol=1e-10) and np.allclose(cov_own[:, 0, 0], var, atol=1e-10)
    found = classical.between_entity_covariance(q, theta_own, cov_own)
    assert psi > 0 and found[0, 0] == pytest.approx(psi, rel=1e-8)
    for scale in (1.0, 0.3, 0.0):  # the scale fit_two_stage chooses on validation
        gamma = sm.WLS(own, q, weights=1 / (scale * psi + var)).fit().params
        expected = q @ gamma + scale * psi / (scale * psi + var) * (own - q @ gamma)
        assert np.allclose(classical.shrunk_curves(q, usable, theta_own, cov_own, scale * found)[:, 0], expected,
                           atol=1e-8)
    assert classical.fit_two_stage(d, q).facts["psi_scale"] in classical.SHRINK_SCALES


def test_two_stage_gls_with_several_coefficients(smoke_params):
    """P = 3 (a basis of three): the meta-regression against the GLS normal equations written with Kronecker products,
    sum_i (q_i q_i' kron W_i) vec(Gamma) = sum_i q_i kron (W_i theta_i), and the BLUP written per entity."""
    panel, d, q = smoke_design(smoke_params, size=3)
    usable, theta, cov = classical.stage_one(d)
    psi = classical.between_entity_covariance(q[usable], theta[usable], cov[usable])
    found = classical.shrunk_curves(q, usable, theta, cov, psi)
    lhs, rhs = 0, 0
    for i in np.flatnonzero(usable):
        weight = np.linalg.inv(psi + cov[i])
        lhs = lhs + np.kron(np.outer(q[i], q[i]), weight)
        rhs = rhs + np.kron(q[i], weight @ theta[i])
    gamma = np.linalg.solve(lhs, rhs).reshape(q.shape[1], 3)  # row m: moderator m's effect on the 3 coefficients
    for i in (0, 7, 19):
        predicted = q[i] @ gamma
        expected = predicted + psi @ np.linalg.inv(psi + cov[i]) @ (theta[i] - predicted)
        assert np.allclose(found[i], expected, atol=1e-8)


def test_lag_profile_hand_worked():
    curves = np.array([[[0.1, 0.3, -0.1], [-0.2, 0.0, 0.0]],  # entity 0: feature a, feature b
                       [[0.2, 0.1, 0.0], [-0.4, -0.2, 0.0]],
                       [[-0.1, -0.1, -0.1], [0.1, 0.1, 0.1]]])  # entity 2: no positive oriented weight
    omega = classical.lag_profile(curves)
    # a's pooled total effect is positive, b's negative: b is turned over before the features are added
    assert np.allclose(omega[0], np.array([0.3, 0.3, 0.0]) / 0.6)
    assert np.allclose(omega[1], np.array([0.6, 0.3, 0.0]) / 0.9)
    assert np.allclose(omega[2], [1 / 3] * 3)  # the absolute curve's profile


def test_recovery_on_the_linear_panel(linear):
    """The moderated model ranks the true lags as AC-GATE does; its twins carry no lag ranking."""
    params, panel = linear
    found = {m: classical.fit_classical(p, params, m).lag_table()
             for m, p in (("moderated_dl", panel), ("shared_dl", panel), ("two_stage_dl", panel),
                          ("shuffled_dl", panel.with_shuffled_proxies(0, 1)[0]))}
    recovery = {m: l3_recovery(t.kstar.to_numpy(), t.kstar_true.to_numpy()) for m, t in found.items()}
    assert recovery["moderated_dl"]["spearman"] > 0.95 and recovery["moderated_dl"]["mae"] < 1.0
    assert recovery["two_stage_dl"]["spearman"] > 0.9
    assert found["shared_dl"].kstar.std() < 1e-9  # one curve for every entity
    assert abs(recovery["shuffled_dl"]["spearman"]) < 0.4
    assert (found["moderated_dl"].kstar_kind == "structural").all()


def test_two_stage_needs_entities_with_their_own_fit(linear):
    params, panel = linear
    short = dataclasses.replace(panel, X=np.repeat(panel.X, 4, axis=2), feature_names=["a", "b", "c", "d"])
    with pytest.raises(ValueError, match="two_stage_dl on domain 'synthetic_linear'.*use moderated_dl"):
        classical.fit_classical(short, params, "two_stage_dl")


def test_run_folder_and_the_shared_permutation(smoke_params, tmp_path):
    panel = dgp.simulate(smoke_params.synthetic, 0, smoke_params.split.val_start, smoke_params.split.test_start)
    for method in ("moderated_dl", "shuffled_dl"):
        metrics = run_method(panel, smoke_params, method, 0, tmp_path, log=lambda _: None)
        assert metrics["lags"]["kstar_kind"] == "structural" and metrics["basis_size"] in classical.BASIS_SIZES
    folder = tmp_path / "synthetic_linear" / "seed00"
    curves = pd.read_csv(folder / "moderated_dl" / "coefficients.csv")
    assert len(curves) == panel.n_entities and list(curves.columns[-2:]) == ["lag_4", "lag_5"]
    assert (pd.read_csv(folder / "moderated_dl" / "predictions.csv").groupby("split").size() > 0).all()
    # the classical shuffled-proxy twin sees the same permutation as AC-GATE's
    run_method(panel, smoke_params, "shuffled_proxies", 0, tmp_path, log=lambda _: None)
    permutation = {m: json.loads((folder / m / "manifest.json").read_text())["panel"]["shuffled_proxies_permutation"]
                   for m in ("shuffled_dl", "shuffled_proxies")}
    assert permutation["shuffled_dl"] == permutation["shuffled_proxies"]


def calibration_panel(name, seed):
    from acgate.audit import calibration

    params = load_params(ROOT / "params" / "audit_calibration.yaml")
    return params, calibration.draw_panel(name, params, seed)


def test_proxy_scaled_curves_share_one_shape_and_nest_the_shared_curve():
    """proxy_scaled_dl on a panel whose proxies set the lagged effect's size: every entity's curve is its scale times
    one shape (rank one across entities), and the fit is at least as good on the training targets as the shared
    curve it starts from, and as the moderated model's validation choice allows."""
    params, panel = calibration_panel("effect_size", 7)
    scaled = classical.fit_classical(panel, params, "proxy_scaled_dl")
    shared = classical.fit_classical(panel, params, "shared_dl")
    curves = scaled.curves[:, 0, :]  # (N, K), one feature
    assert np.linalg.svd(curves, compute_uv=False)[1] < 1e-6 * np.linalg.svd(curves, compute_uv=False)[0]
    assert np.ptp(np.abs(curves).sum(axis=1)) > 0.1  # the sizes differ by entity
    assert scaled.facts["val_mse_standardised"] <= shared.facts["val_mse_standardised"] + 1e-9
    assert np.ptp(scaled.lag_table().kstar) < 1e-6  # one shape, one k*
