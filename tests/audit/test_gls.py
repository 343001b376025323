"""The in-sample GLS lag tests (acgate.audit.gls): the F statistics are statsmodels' weighted least squares on the
quasi-differenced panel written out by hand, the permutation p is the brute-force count, and the error model recovers
the AR(1) coefficient and the entity noise scales of a panel whose lag curves differ by entity."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import optimize

from acgate.audit import calibration, gls, persistence, verdicts
from acgate.config import load_params
from acgate.models.classical import lag_basis, lag_profile, moderators
from acgate.models.lags import effective_lag

ROOT = Path(__file__).resolve().parents[2]
K, J, RHO = 6, 3, 0.6


@pytest.fixture(scope="module")
def small():
    """A small panel's design (12 entities, 20 steps, 2 features, gaps in two entities' rows), moderators of two
    proxies and a fixed error model (rho 0.6, entity scales 0.5 to 2)."""
    rng = np.random.default_rng(3)
    n, s_len = 12, 20
    U = rng.normal(size=(n, s_len, 2, J))
    rows = np.ones((n, s_len), dtype=bool)
    rows[3, 5:7] = False
    rows[7, :2] = False
    y = np.where(rows, rng.normal(size=(n, s_len)) + 0.3 * U[:, :, 0, 0] * np.linspace(-1, 1, n)[:, None], 0.0)
    U = np.where(rows[..., None, None], U, 0.0)
    design = gls.LagDesign(U, y, rows, lag_basis(K, J))
    q = moderators(rng.normal(size=(n, 2)), shared=False)
    pairs = np.zeros_like(rows)
    pairs[:, 1:] = rows[:, 1:] & rows[:, :-1]
    errors = persistence.ErrorModel(RHO, rng.uniform(0.5, 2.0, n), pairs, RHO, np.zeros(len(persistence.RHO_GRID)))
    return design, q, errors


def f_test(restricted, full, df: int, rank: int) -> float:
    """The F statistic of ``full`` (statsmodels results) against ``restricted`` with ``df`` more coefficients and
    ``rank`` coefficients in all. The ranks are counted, not read off statsmodels: the moderated model nests the
    entity scales with as many exact collinearities as features, and a numerical rank at that edge depends on the
    linear-algebra library."""
    return (restricted.ssr - full.ssr) / df / (full.ssr / (full.nobs - rank))


def scaled_shape_by_hand(y, X, fixed, weights, entity, start):
    """The shapes (F, J) of theta_if = s_if b_f, s_if >= 0, fitted with the columns every model has (``fixed``: the
    entity intercepts, and loadings) by scipy's bounded nonlinear least squares on the weighted rows (X: rows, F, J),
    from the pooled curve ``start``; each of norm 1."""
    n, k, (n_feat, size) = entity.max() + 1, fixed.shape[1], start.shape
    root = np.sqrt(weights)

    def residual(v):
        level, scale, shape = v[:k], v[k:k + n * n_feat].reshape(n, n_feat), v[k + n * n_feat:].reshape(n_feat, size)
        return root * (y - fixed @ level - np.einsum("rf,rfj,fj->r", scale[entity], X, shape))

    start = start / np.linalg.norm(start, axis=1, keepdims=True)
    v0 = np.concatenate([np.zeros(k), np.ones(n * n_feat), start.reshape(-1)])
    low = np.concatenate([np.full(k, -np.inf), np.zeros(n * n_feat), np.full(n_feat * size, -np.inf)])
    found = optimize.least_squares(residual, v0, bounds=(low, np.inf), xtol=1e-15, ftol=1e-15, gtol=1e-15,
                                   max_nfev=20_000)
    shape = found.x[k + n * n_feat:].reshape(n_feat, size)
    return shape / np.linalg.norm(shape, axis=1, keepdims=True)


def by_hand(design, q, errors, shape=None):
    """The two F tests of gls.interaction_test, written out: Cochrane-Orcutt quasi-differences on consecutive observed
    steps, entity dummies (1 - rho), weights 1 / sigma_i^2, statsmodels WLS and the F statistic of its residual sums
    of squares; with ``design.common``, each entity's own loading on the quasi-differenced common shock in every
    model. Returns (F, df) against the entity-scaled shape, (F, df) against the shared curve, the moderated model's
    k* (N,), the shapes of the entity-scaled curves (``shape``: given, as they do not depend on q) and each entity's
    free scales of them (N, F)."""
    n, s_len, n_feat, size = design.U.shape
    y, X, dummies, loadings, entity = [], [], [], [], []
    rho = errors.rho
    common = np.zeros(s_len) if design.common is None else design.common
    for i in range(n):
        for s in range(1, s_len):
            if design.rows[i, s] and design.rows[i, s - 1]:
                y.append(design.y[i, s] - rho * design.y[i, s - 1])
                X.append((design.U[i, s] - rho * design.U[i, s - 1]).reshape(-1))
                dummies.append(np.eye(n)[i] * (1 - rho))
                loadings.append(np.eye(n)[i] * (common[s] - rho * common[s - 1]))
                entity.append(i)
    y, X, dummies, entity = np.array(y), np.array(X), np.array(dummies), np.array(entity)
    fixed = [dummies] + ([np.array(loadings)] if design.common is not None else [])  # in every model
    k = n * len(fixed)
    weights = 1 / errors.sigma[entity] ** 2
    moderated = np.einsum("rp,rm->rpm", X, q[entity]).reshape(len(y), -1)
    fit = lambda columns: sm.WLS(y, np.hstack(fixed + columns), weights=weights).fit()  # noqa: E731
    shared, full = fit([X]), fit([moderated])
    if shape is None:
        shape = scaled_shape_by_hand(y, X.reshape(-1, n_feat, size), np.hstack(fixed), weights, entity,
                                     shared.params[k:].reshape(n_feat, size))
    driven = np.einsum("rfj,fj->rf", X.reshape(-1, n_feat, size), shape)  # each feature's shape, per row
    own_scales = np.einsum("rf,rn->rnf", driven, dummies / (1 - rho)).reshape(len(y), -1)  # an entity's own columns
    scaled, both = fit([own_scales]), fit([own_scales, moderated])
    width = q.shape[1]
    df_scaled, df_shared = n_feat * (size - 1) * width, n_feat * size * (width - 1)
    f_scaled = f_test(scaled, both, df_scaled, k + n * n_feat + df_scaled)
    f_shared = f_test(shared, full, df_shared, k + n_feat * size * width)
    theta = np.einsum("fjm,nm->nfj", full.params[k:].reshape(n_feat, size, -1), q)
    kstar = effective_lag(lag_profile(np.einsum("nfj,kj->nfk", theta, design.basis)))
    return (f_scaled, df_scaled), (f_shared, df_shared), kstar, shape, scaled.params[k:].reshape(n, n_feat)


def test_the_f_statistics_are_statsmodels_wls_on_the_quasi_differenced_panel(small):
    design, q, errors = small
    row, curves = gls.interaction_test(design, q, errors, 0, np.random.default_rng(0), draws=0)
    (f_scaled, df_scaled), (f_shared, df_shared), kstar_by_hand, _, _ = by_hand(design, q, errors)
    assert row["df_vs_entity_scaled"] == df_scaled and row["df_vs_shared"] == df_shared
    assert row["f_vs_entity_scaled"] == pytest.approx(f_scaled, rel=1e-6)  # scipy's optimiser's precision
    assert row["f_vs_shared"] == pytest.approx(f_shared, rel=1e-8)
    np.testing.assert_allclose(effective_lag(lag_profile(curves)), kstar_by_hand, rtol=1e-8)


def test_the_common_shock_fits_are_statsmodels_wls_with_each_entitys_loading(small):
    """Where the entities share shocks the GLS tests take out each entity's loading on the cross-sectional mean of the
    target (with_common_shocks): the same F statistics as statsmodels with one more column per entity in every
    model, and the entity-scaled shape fitted with them (scipy, from the shared curve)."""
    design, q, errors = small
    shocked = gls.with_common_shocks(design)
    assert shocked.common.shape == (design.y.shape[1],)
    row, curves = gls.interaction_test(shocked, q, errors, 0, np.random.default_rng(0), draws=0)
    (f_scaled, _), (f_shared, _), kstar_by_hand, _, _ = by_hand(shocked, q, errors)
    assert row["f_vs_shared"] == pytest.approx(f_shared, rel=1e-8)
    assert row["f_vs_entity_scaled"] == pytest.approx(f_scaled, rel=1e-5)
    np.testing.assert_allclose(effective_lag(lag_profile(curves)), kstar_by_hand, rtol=1e-8)


def test_the_bootstrap_and_the_permutation_p_are_the_brute_force_counts(small):
    """p = (1 + #{F_b >= F}) / (B + 1): against the entity-scaled shape over the bootstrap's panels (the fitted null,
    each entity's scales of the shapes by statsmodels, plus the AR(1) noise of a stream spawned from the generator;
    each draw's error model, shapes and scales fitted again, its F_b from statsmodels given the draw's shapes: the fit
    of the shapes is not convex, and scipy's optimiser, started where the alternating fit starts, ends in another
    optimum in some draws), against the shared curve over the proxy permutations the generator itself draws, as it
    did before the bootstrap (so the tests that go on with it draw what they drew)."""
    design, q, _ = small
    errors = persistence.error_model(design)
    row, _ = gls.interaction_test(design, q, errors, 19, np.random.default_rng(5), draws=9)
    (f_scaled, _), (f_shared, _), _, shape, scales = by_hand(design, q, errors)
    rng = np.random.default_rng(5)
    lagged = np.einsum("nsfj,fj,nf->ns", design.U, shape, scales)
    f_draws = [by_hand(drawn, q, again, gls.scaled_shape(gls.Moments.of(drawn, again), 2))[0][0]
               for drawn, again in gls._null_draws(design, lagged, errors, 9, rng.spawn(1)[0])]
    exceed_shared = sum(by_hand(design, q[rng.permutation(len(q))], errors, shape)[1][0] >= f_shared
                        for _ in range(19))
    exceed_scaled = sum(f >= f_scaled for f in f_draws)
    assert 0 < exceed_scaled < 9 and 0 < exceed_shared < 19  # the counts are not all or nothing
    assert min(abs(f / f_scaled - 1) for f in f_draws) > 1e-4  # no draw ties the panel's F within rounding
    assert (row["p_vs_entity_scaled"], row["p_vs_shared"]) == ((1 + exceed_scaled) / 10, (1 + exceed_shared) / 20)


def test_the_bootstrap_draws_from_the_whole_fitted_null_common_shock_included(small):
    """The fitted null a bootstrap draws from is each entity's level (the mean of what the lagged part leaves) and,
    where the design takes a common shock, its loading on the shock (numpy's lstsq of what the level leaves on the
    shock centred on the entity's rows; the shock is the cross-sectional mean of what the levels leave, centred),
    plus the lagged part. The draws scatter around each entity's level plus the lagged part (their mean over 400
    draws within five standard errors of it at every observed step), and each draw carries a shock series of its own
    with the fitted loadings: the draws' cross-sectional means are not the panel's (median absolute correlation with
    it below 0.5; it was above 0.99 when every draw carried the panel's own shock), and each entity's least squares
    on its draw's cross-sectional mean recovers the panel's loadings up to their mean (correlation above 0.95)."""
    design, _, errors = small
    n, s_len = design.y.shape
    rng = np.random.default_rng(8)
    shock = 2 * rng.normal(size=s_len)
    loading = np.linspace(1, 3, n)
    y = np.where(design.rows, rng.normal(size=(n, 1)) + loading[:, None] * shock[None, :], 0.0)
    lagged = np.where(design.rows, 0.1 * rng.normal(size=(n, s_len)), 0.0)
    shocked = gls.with_common_shocks(gls.LagDesign(design.U, y, design.rows, design.basis))
    left = [(y - lagged)[i, on] for i, on in enumerate(design.rows)]
    level = np.array([values.mean() for values in left])
    mean = np.array([np.mean([left[i][design.rows[i, :t + 1].sum() - 1] - level[i] for i in range(n)
                              if design.rows[i, t]]) for t in range(s_len)])
    by_lstsq = np.array([np.linalg.lstsq((mean[on] - mean[on].mean())[:, None], left[i] - level[i], rcond=None)[0][0]
                         for i, on in enumerate(design.rows)])
    fit = gls._null_fit(shocked, lagged, errors)
    np.testing.assert_allclose(fit.level, level, atol=1e-10)
    np.testing.assert_allclose(fit.loading, by_lstsq, atol=1e-10)
    unit = dataclasses.replace(errors, rho=0.0, sigma=np.full(n, 0.5))
    draws = [drawn for drawn, _ in gls._null_draws(shocked, lagged, unit, 400, rng)]
    spread = np.std([drawn.y for drawn in draws], axis=0)
    centre = np.mean([drawn.y for drawn in draws], axis=0)
    assert np.all((np.abs(centre - level[:, None] - lagged) < 5 * spread / np.sqrt(400))[design.rows])
    assert np.median([abs(np.corrcoef(drawn.common, shocked.common)[0, 1]) for drawn in draws]) < 0.5
    drawn = draws[0]
    recovered = [np.polyfit(drawn.common[on], drawn.y[i, on], 1)[0] for i, on in enumerate(design.rows)]
    assert np.corrcoef(recovered, fit.loading)[0, 1] > 0.95


def test_the_bootstraps_draws_are_as_noisy_and_persistent_as_the_panel():
    """On a panel whose noise is a persistent common shock (AR(1) 0.8, loadings 0.5 to 1.5) plus idiosyncratic AR(1)
    0.5 noise, the bootstrap's draws (the true lagged part as the null) read the noise as the panel reads it: the
    median entity scale of their error model within 15 % of the panel's and their rho within 0.1 of it (averages over
    60 draws), and their common series' AR(1) coefficient within 0.15 of the panel's. Draws that added a new shock
    to noise of the panel's own scales counted the shock twice (scales 25-40 % too large)."""
    rng = np.random.default_rng(11)
    n, s_len = 60, 40
    U = rng.normal(size=(n, s_len, 2, J))
    rows = np.ones((n, s_len), dtype=bool)
    lagged = 0.3 * U[:, :, 0, 0]
    shock = np.zeros(s_len)
    noise = np.zeros((n, s_len))
    for t in range(s_len):
        shock[t] = 0.8 * shock[t - 1] + rng.normal() if t else rng.normal() / 0.6
        noise[:, t] = 0.5 * noise[:, t - 1] + 0.5 * rng.normal(size=n) if t else rng.normal(size=n) * 0.5 / 0.87
    y = rng.normal(size=(n, 1)) + lagged + np.linspace(0.5, 1.5, n)[:, None] * shock[None, :] + noise
    design = gls.LagDesign(U, y, rows, lag_basis(K, J))
    errors = persistence.error_model(design)
    shocked = gls.with_common_shocks(design)
    draws = list(gls._null_draws(shocked, lagged, errors, 60, np.random.default_rng(12)))
    sigma = np.mean([np.median(again.sigma) for _, again in draws])
    assert sigma == pytest.approx(np.median(errors.sigma), rel=0.15)
    assert np.mean([again.rho for _, again in draws]) == pytest.approx(errors.rho, abs=0.1)
    drawn_ar1 = np.mean([persistence.ar1(drawn.common - drawn.common.mean(), rows[0]) for drawn, _ in draws])
    assert drawn_ar1 == pytest.approx(persistence.ar1(shocked.common - shocked.common.mean(), rows[0]), abs=0.15)


def test_a_stack_of_draws_is_fitted_as_each_draw_alone(small, monkeypatch):
    """The bootstrap fits its draws' shapes and scales as one stack: the same shapes, scales and sums of squares as
    one draw at a time, each fit stopping where it would alone; and the same p in stacks of one draw, with and
    without the common shock."""
    design, q, _ = small
    errors = persistence.error_model(design)
    panels = [gls.Moments.of(*drawn) for drawn in gls._null_draws(design, design.y * 0.3, errors, 6,
                                                                   np.random.default_rng(2))]
    stack = gls._stacked(panels)
    shapes = gls.scaled_shape(stack, 2)
    partials, scales = gls._entity_scaled(stack, shapes)
    for b, alone in enumerate(panels):
        shape = gls.scaled_shape(alone, 2)
        partial, scale = gls._entity_scaled(alone, shape)
        np.testing.assert_allclose(shapes[b], shape, rtol=0, atol=1e-12)
        np.testing.assert_allclose(scales[b], scale, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(partials.yy[b], partial.yy, rtol=1e-9)
    for tested in (design, gls.with_common_shocks(design)):
        stacked = gls.interaction_test(tested, q, errors, 0, np.random.default_rng(4), draws=19)[0]
        with monkeypatch.context() as patched:
            patched.setattr(gls, "DRAW_BYTES", 1)  # one draw a stack
            alone = gls.interaction_test(tested, q, errors, 0, np.random.default_rng(4), draws=19)[0]
        assert stacked["p_vs_entity_scaled"] == alone["p_vs_entity_scaled"] < 1


@pytest.mark.parametrize("rho", [0.5, 0.9])
def test_the_error_model_recovers_rho_and_the_entity_scales_where_the_lags_differ(rho):
    """Every entity its own lag curve (in the basis), AR(1) noise with entity scales 0.5 to 2: the per-entity fits hold
    the lag differences, so the noise model is the noise's, not the lags' (a one-curve fit would fold them in)."""
    rng = np.random.default_rng(11)
    n, t_len = 150, 36
    basis = lag_basis(K, 4)
    curves = basis @ rng.normal(0, 0.5, size=(4, n))  # (K, N)
    x = np.zeros((n, t_len))
    for t in range(1, t_len):
        x[:, t] = 0.5 * x[:, t - 1] + rng.normal(size=n)
    sigma = rng.uniform(0.5, 2.0, n)
    noise = np.zeros((n, t_len))
    noise[:, 0] = rng.normal(size=n) * sigma / np.sqrt(1 - rho**2)
    for t in range(1, t_len):
        noise[:, t] = rho * noise[:, t - 1] + sigma * rng.normal(size=n)
    windows = np.stack([x[:, K - k:t_len - k] for k in range(1, K + 1)], axis=-1)  # (N, S, K)
    y = rng.normal(size=(n, 1)) + np.einsum("nsk,kn->ns", windows, curves) + noise[:, K:]
    U = np.einsum("nsk,kj->nsj", windows, basis)[:, :, None, :]
    design = gls.LagDesign(U, y, np.ones(y.shape, dtype=bool), basis)
    errors = persistence.error_model(design)
    assert errors.rho == pytest.approx(rho, abs=0.05) and errors.rho_raw < rho - 0.05  # the raw estimate is biased
    assert np.corrcoef(errors.sigma, sigma)[0, 1] > 0.9
    assert np.median(errors.sigma / sigma) == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize(("scenario", "differ"), [("random_lags", True), ("linear", True), ("effect_size", False),
                                                  ("homogeneous_lags", False), ("noise_scale", False)])
def test_lags_differ_whatever_the_proxies_say(scenario, differ):
    """The pooled shape test finds lags that differ, with or without the proxies' help, and not a shared lag whose
    size or noise the proxies set (one calibration panel each; tables/audit_calibration has the rates)."""
    params = load_params(ROOT / "params" / "audit_calibration.yaml")
    panel = calibration.draw_panel(scenario, params, 11)
    design = gls.lag_design(panel, params.model.max_lag)
    found = gls.shape_test(design, persistence.error_model(design), gls.SHAPE_DRAWS, np.random.default_rng(0))
    assert found["entities"] == panel.n_entities
    assert (found["p"] < 0.05) == differ, found


def test_own_residuals_are_each_entitys_least_squares_with_its_intercept_whatever_its_rows():
    """Each entity's residuals are numpy's least squares on its own lags and an intercept over its rows, for an
    entity with fewer rows than coefficients (rank-deficient) and one whose lag does not vary, too."""
    rng = np.random.default_rng(5)
    U, y = rng.normal(size=(6, 30, 4)), rng.normal(size=(6, 30))
    rows = rng.random((6, 30)) > 0.2
    rows[1] = False
    rows[1, :3] = True  # three rows for five coefficients
    U[2, :, 3] = 1.5  # a lag that does not vary: collinear with the intercept
    residual, dof = persistence.own_residuals(U, y, rows)
    for i in range(len(U)):
        X = np.column_stack([U[i][rows[i]], np.ones(rows[i].sum())])
        expected = y[i][rows[i]] - X @ np.linalg.lstsq(X, y[i][rows[i]], rcond=None)[0]
        assert np.allclose(residual[i][rows[i]], expected, atol=1e-10), i
        assert np.all(residual[i][~rows[i]] == 0)
    assert list(dof) == [max(int(r) - 5, 0) for r in rows.sum(axis=1)]


def test_the_stability_f_is_statsmodels_wls_with_curves_for_each_half(small):
    """The stability test's F, written out: the quasi-differenced rows of each half with an intercept per entity and
    half, statsmodels WLS of the moderated curves shared by both halves against the curves of each half apart."""
    design, q, errors = small
    row = gls.stability_test(design, q, errors, 0, np.random.default_rng(0))
    n, s_len, n_feat, size = design.U.shape
    y, X, late, dummies = [], [], [], []
    for i in range(n):
        for s in range(1, s_len):
            if design.rows[i, s] and design.rows[i, s - 1]:
                y.append(design.y[i, s] - RHO * design.y[i, s - 1])
                X.append(np.outer(design.U[i, s] - RHO * design.U[i, s - 1], q[i]).reshape(-1))
                late.append(s >= row["first_late_step"])
                dummies.append(np.eye(2 * n)[2 * i + late[-1]])
    y, X, late, dummies = np.array(y), np.array(X), np.array(late)[:, None], np.array(dummies)
    entity = np.argmax(dummies, axis=1) // 2
    w = 1 / errors.sigma[entity] ** 2
    one = sm.WLS(y, np.hstack([dummies, X]), weights=w).fit()
    apart = sm.WLS(y, np.hstack([dummies, X * ~late, X * late]), weights=w).fit()
    p_mod = X.shape[1]
    assert row["df_extra"] == p_mod and abs(np.sum(late) - len(y) / 2) <= n  # the halves split the rows near half
    assert row["f"] == pytest.approx(f_test(one, apart, p_mod, 2 * n + 2 * p_mod), rel=1e-8)


def lag_panel(lag: np.ndarray, rng: np.random.Generator) -> gls.LagDesign:
    """The design of a panel whose entity i's target at step t is x_i,t-lag[i, t] plus AR(1) 0.5 noise (lag (N, T))."""
    n, t_len = lag.shape
    x, noise = np.zeros((n, t_len)), np.zeros((n, t_len))
    for t in range(1, t_len):
        x[:, t] = 0.5 * x[:, t - 1] + rng.normal(size=n)
        noise[:, t] = 0.5 * noise[:, t - 1] + 0.5 * rng.normal(size=n)
    y = np.stack([x[np.arange(n), t - lag[:, t]] if t >= K else np.zeros(n) for t in range(t_len)], axis=1) + noise
    windows = np.stack([x[:, K - k:t_len - k] for k in range(1, K + 1)], axis=-1)  # (N, S, K)
    basis = lag_basis(K, 4)
    U = np.einsum("nsk,kj->nsj", windows, basis)[:, :, None, :]
    return gls.LagDesign(U, y[:, K:], np.ones((n, t_len - K), dtype=bool), basis)


@pytest.mark.parametrize("breaks", [False, True])
def test_a_lag_map_that_changes_mid_sample_is_found_and_a_stable_one_is_not(breaks):
    """Every entity's lag at 2 throughout, or at 2 in the first half of the panel and at 5 in the second (AR(1) 0.5
    noise): the stability test rejects the break, with the late half's k* the longer, and not the stable map."""
    rng = np.random.default_rng(8)
    n, t_len = 60, 40
    lag = np.broadcast_to(np.where((np.arange(t_len) >= t_len // 2) & breaks, 5, 2), (n, t_len))
    design = lag_panel(lag, rng)
    q = moderators(rng.normal(size=(n, 2)), shared=False)
    found = gls.stability_test(design, q, persistence.error_model(design), 49, np.random.default_rng(1))
    assert (found["p"] < 0.05) == breaks, found
    if breaks:
        assert found["kstar_late"] > found["kstar_early"] + 1.5, found
    table = pd.DataFrame([{f"stable_{k}" if k != "first_late_step" else "stable_first_late": v
                           for k, v in found.items()}])
    assert bool(verdicts.lags_changed(0.05, table)) == breaks
    assert bool(verdicts.stability_warning(0.05, table)) == breaks


def test_lags_that_differ_apart_from_the_proxies_are_not_read_as_changing_over_time():
    """The calibration's random_lags panels: each entity's lag centre drawn at random and held throughout, apart from
    the proxies, so the moderated curves miss the lags in both halves. Against one moderated set of curves the test
    rejected on almost every such panel (50 of 50 in the calibration; p 0.02 on two of these three); against each
    entity's own stable curves it does not."""
    from acgate.audit import calibration
    from acgate.config import load_params
    from acgate.data.panel import Normalisers

    params = load_params(Path(__file__).resolve().parents[2] / "params" / "audit_calibration.yaml")
    found = []
    for seed in range(3):
        panel = calibration.draw_panel("random_lags", params, 1_000 * (seed + 1))
        design = gls.lag_design(panel, params.model.max_lag)
        q = moderators(Normalisers.fit(panel).P.transform(panel.P), shared=False)
        errors = persistence.error_model(design)
        found.append(gls.stability_test(design, q, errors, 49, np.random.default_rng(seed))["p"])
    assert min(found) >= 0.05, found


def test_the_ar1_series_are_the_stationary_recursion():
    """The noise of the surrogates and of the bootstraps' draws: x_0 = sigma z_0 / sqrt(1 - rho^2), then
    x_t = rho x_t-1 + sigma z_t, by hand from the same normal stream; a long draw has the stationary variance and
    lag-1 autocorrelation (statsmodels' acf)."""
    sigma, rho = np.array([1.0, 2.0, 0.5]), 0.6
    z = np.random.default_rng(0).normal(size=(5, 3))
    by_hand = [z[0] * sigma / np.sqrt(1 - rho**2)]
    for t in range(1, 5):
        by_hand.append(rho * by_hand[-1] + sigma * z[t])
    drawn = persistence.ar1_series(np.random.default_rng(0), (3, 5), rho, sigma)
    np.testing.assert_array_equal(drawn, np.array(by_hand).T)
    long = persistence.ar1_series(np.random.default_rng(1), (400, 500), 0.9, 0.5)
    assert long.var() == pytest.approx(0.25 / (1 - 0.81), rel=0.05)
    assert np.mean([sm.tsa.acf(row, nlags=1)[1] for row in long]) == pytest.approx(0.9, abs=0.02)
