"""The classical yardstick: moderated distributed-lag regressions, the linear form of the paper's "conditional
moderated distributed lag". Every claim of neural gain is measured against them (docs/design.md, "The classical
yardstick").

    fit = fit_classical(panel, params, "moderated_dl")
    fit.predictions(), fit.lag_table(), fit.facts

Shared by every method here, as for the neural models: the K-lag windows of the features (lags 1..K, never X_t),
the chronological splits, the training-window standardisation, estimation on the training targets only and tuning
on the validation targets only. Lag curves are smooth: each feature's coefficients over lags 1..K are a polynomial
of degree J - 1 in k (an orthonormal basis, J chosen on validation), so a curve has J free numbers, not K.

- ``moderated_dl``: pooled over entities, with entity intercepts; each entity's lag curve is a linear function of
  its moderators q(p_i) = [1, standardised proxies, their standardised squares]. The interaction coefficients carry a
  ridge penalty (chosen on validation with J; 0 is a candidate), the shared curve none:

      y_it = a_i + sum_f sum_k beta_ifk x_f,i,t-k + e_it,   beta_if. = B (b_f + C_f q(p_i)),   B: (K, J)

- ``shared_dl``: the same with q(p) = [1]: one lag curve for every entity (the shared-gate twin);
- ``shuffled_dl``: ``moderated_dl`` on proxies permuted across entities (the shuffled-proxy twin; the runner permutes
  them as for AC-GATE's ``shuffled_proxies``);
- ``proxy_scaled_dl``: one lag-curve shape per feature for every entity, whose size (and sign) the moderators scale,
  beta_if. = (c_f . q(p_i)) B b_f: the proxies may set the level and the size of the lagged effect, not the lags
  (the proxy twin); fitted by alternating least squares from the shared curve, the scale's interactions ridge-
  penalised as ``moderated_dl``'s;
- ``two_stage_dl``: the multi-city two-stage model: stage 1 fits each entity's curve by OLS on its own training
  targets; stage 2 meta-regresses the curves on q(p_i) by multivariate GLS, with a between-entity covariance
  estimated by the method of moments (scaled by a factor chosen on validation), and shrinks each entity's curve
  toward its proxy-predicted one (the best linear unbiased predictor). An entity with too few training targets for
  stage 1 takes its predicted curve.

The lag profile omega and k* come from each entity's curves in standardised units: each feature's curve is oriented
by the sign of its total effect pooled over entities (so a feature that lowers the target counts like one that
raises it), the oriented curves are summed over features, negative weights are set to zero and the rest normalised
to sum to one (the profile of the absolute curve where no weight is positive). k*_i = sum_k k omega_ik, a
structural output as AC-GATE's is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from acgate.config import Params
from acgate.data.panel import Normalisers, Panel
from acgate.models.lags import effective_lag, lag_frame

BASIS_SIZES = (3, 4, 5, 6)  # J, the polynomial lag curve's free numbers, chosen on validation (at most K)
RIDGE_SHARES = (0.0, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # ridge penalty per training row, chosen on validation
SHRINK_SCALES = (0.0, 0.1, 0.3, 1.0)  # two-stage: the between-entity covariance's scale, chosen on validation


def lag_basis(max_lag: int, size: int) -> np.ndarray:
    """(K, J) orthonormal polynomial basis over lags 1..K (degree 0..J-1), from the QR of the Vandermonde matrix."""
    k = np.linspace(-1.0, 1.0, max_lag)
    q, _ = np.linalg.qr(np.vander(k, size, increasing=True))
    return q


def lag_windows(x: np.ndarray, max_lag: int) -> np.ndarray:
    """(N, T-K, F, K): the lag windows of x (N, T, F); [i, s, f, k-1] = x[i, K + s - k, f], target step K + s."""
    t_len = x.shape[1]
    return np.stack([x[:, max_lag - k:t_len - k] for k in range(1, max_lag + 1)], axis=-1)


def moderators(proxies: np.ndarray, shared: bool) -> np.ndarray:
    """(N, 1 + 2M) moderators q(p): 1, the proxies (standardised across entities) and their squares (standardised
    likewise); (N, 1) for the shared-lag model."""
    ones = np.ones((len(proxies), 1))
    if shared:
        return ones
    standard = standardise(proxies)
    return np.hstack([ones, standard, standardise(standard**2)])


def standardise(values: np.ndarray) -> np.ndarray:
    """Each column of ``values`` (a vector: the vector) centred and scaled to sd 1 across its rows; a constant one
    centred only."""
    sd = values.std(axis=0)
    return (values - values.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


@dataclass
class Design:
    """A panel's regression inputs in standardised units: the basis-reduced lags ``U`` (N, S, F, J) of the S = T - K
    target steps, the targets ``y`` (N, S) and masks (N, S) of the training and validation targets."""

    U: np.ndarray
    y: np.ndarray
    train: np.ndarray
    val: np.ndarray


def design(windows: np.ndarray, y: np.ndarray, basis: np.ndarray, labels: np.ndarray) -> Design:
    """The :class:`Design` of lag windows (N, S, F, K), targets (N, S) and each step's split label (S,)."""
    observed = np.isfinite(y)
    return Design(np.einsum("nsfk,kj->nsfj", windows, basis), y, observed & (labels == "train")[None, :],
                  observed & (labels == "val")[None, :])


def within(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """values (N, S, ...) minus each entity's mean over its ``rows`` (N, S); zero outside them."""
    mask = rows.reshape(rows.shape + (1,) * (values.ndim - 2))
    count = np.maximum(rows.sum(axis=1), 1).reshape((-1,) + (1,) * (values.ndim - 2))
    mean = np.where(mask, values, 0.0).sum(axis=1) / count
    return np.where(mask, values - mean[:, None], 0.0)


def interactions(U: np.ndarray, q: np.ndarray) -> np.ndarray:
    """(N, S, F * J * Q) regressors of the moderated model: every basis-reduced lag times every moderator."""
    n, s = U.shape[:2]
    return np.einsum("nsfj,nm->nsfjm", U, q).reshape(n, s, -1)


def ridge_within(Z: np.ndarray, y: np.ndarray, rows: np.ndarray, penalised: np.ndarray,
                 penalties: tuple[float, ...]) -> list[np.ndarray]:
    """Coefficients (C,) of y on the regressors Z (N, S, C) with entity intercepts, over the ``rows`` (N, S), for
    each ridge penalty (per training row) on the ``penalised`` (C,) coefficients: the within-entity least squares
    with penalty  n_rows * penalty * ||beta[penalised]||^2. Penalty 0 is ordinary least squares with entity
    dummies (a test checks it against statsmodels)."""
    Zw, yw = within(Z, rows)[rows], within(y, rows)[rows]
    gram, moment = Zw.T @ Zw, Zw.T @ yw
    return [np.linalg.lstsq(gram + len(yw) * share * np.diag(penalised.astype(float)), moment, rcond=None)[0]
            for share in penalties]


def intercepts(residual: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(N,) each entity's mean of ``residual`` (N, S) over its ``rows``; 0 (the training mean of the standardised
    target) for an entity without one."""
    count = rows.sum(axis=1)
    return np.where(count > 0, np.where(rows, residual, 0.0).sum(axis=1) / np.maximum(count, 1), 0.0)


def _val_mse(y_hat: np.ndarray, d: Design) -> float:
    return float(np.mean((y_hat - d.y)[d.val] ** 2))


@dataclass
class CurveFit:
    """One fitted lag model: each entity's lag curves ``theta`` (N, F, J) in the basis, its intercepts (N,), and
    what was chosen on validation."""

    theta: np.ndarray
    intercept: np.ndarray
    facts: dict

    def predict(self, U: np.ndarray) -> np.ndarray:
        """(N, S) standardised predictions from basis-reduced lags U (N, S, F, J)."""
        return self.intercept[:, None] + np.einsum("nsfj,nfj->ns", U, self.theta)


def best_on_validation(d: Design, candidates) -> CurveFit:
    """Of the candidate curves, (theta (N, F, J), facts) pairs, the fit (with each entity's intercept on its training
    targets) whose validation MSE is lowest; the first of equals."""
    best = None
    for theta, facts in candidates:
        fitted = np.einsum("nsfj,nfj->ns", d.U, theta)
        candidate = CurveFit(theta, intercepts(d.y - fitted, d.train), facts)
        mse = _val_mse(candidate.predict(d.U), d)
        if best is None or mse < best[0]:
            best = (mse, candidate)
    return best[1]


def fit_moderated(d: Design, q: np.ndarray, shares: tuple[float, ...] = RIDGE_SHARES) -> CurveFit:
    """The pooled moderated distributed lag on moderators q (N, Q), for the :class:`Design` of one basis size; the
    ridge penalty the best on validation of ``shares``."""
    n_feat, size = d.U.shape[2:]
    Z = interactions(d.U, q)
    penalised = np.tile(np.arange(q.shape[1]) > 0, n_feat * size)  # the interactions, not the shared curve
    betas = ridge_within(Z, d.y, d.train, penalised, shares)
    return best_on_validation(d, ((np.einsum("fjm,nm->nfj", beta.reshape(n_feat, size, -1), q), {"ridge": share})
                                  for share, beta in zip(shares, betas, strict=True)))


def stage_one(d: Design) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each entity's own lag curve by OLS on its training targets (with its intercept): which entities have one
    (N,) (two residual degrees of freedom or more), their coefficients (N, P) and sampling covariances (N, P, P),
    P = F * J; zero for the others."""
    n, _, n_feat, size = d.U.shape
    width = n_feat * size
    X = within(d.U.reshape(n, -1, width), d.train)  # (N, S, P)
    y = within(d.y, d.train)
    gram = np.einsum("nsp,nsr->npr", X, X)
    rows = d.train.sum(axis=1)
    usable = (rows >= width + 3) & (np.linalg.matrix_rank(gram) == width)
    theta, cov = np.zeros((n, width)), np.zeros((n, width, width))
    if usable.any():
        inverse = np.linalg.inv(gram[usable])
        theta[usable] = np.einsum("npr,nr->np", inverse, np.einsum("nsp,ns->np", X[usable], y[usable]))
        residual = y[usable] - np.einsum("nsp,np->ns", X[usable], theta[usable])
        sigma2 = (residual**2).sum(axis=1) / (rows[usable] - width - 1)  # the intercept is one more coefficient
        cov[usable] = sigma2[:, None, None] * inverse
    return usable, theta, cov


def between_entity_covariance(q: np.ndarray, theta: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """Psi (P, P) by the method of moments from the entities' own curves theta (n, P), their sampling covariances
    (n, P, P) and moderators q (n, Q): the residual covariance of the OLS meta-regression less the mean sampling
    covariance, clipped to positive semi-definite."""
    spread = theta - q @ np.linalg.lstsq(q, theta, rcond=None)[0]
    excess = spread.T @ spread / max(len(theta) - q.shape[1], 1) - cov.mean(axis=0)
    values, vectors = np.linalg.eigh((excess + excess.T) / 2)
    return (vectors * np.clip(values, 0, None)) @ vectors.T


def shrunk_curves(q: np.ndarray, usable: np.ndarray, theta: np.ndarray, cov: np.ndarray, psi: np.ndarray
                  ) -> np.ndarray:
    """(N, P) curves: the multivariate GLS meta-regression of the entities' own curves on q (N, Q), weights
    (Psi + V_i)^-1, and each entity's curve its prediction plus Psi (Psi + V_i)^-1 times its own deviation (the best
    linear unbiased predictor); the prediction alone for an entity without its own curve."""
    qu, tu = q[usable], theta[usable]
    weights = np.linalg.pinv(psi + cov[usable])  # (n, P, P)
    width = theta.shape[1]
    lhs = np.einsum("nm,nl,npr->mplr", qu, qu, weights).reshape(q.shape[1] * width, -1)
    rhs = np.einsum("nm,npr,nr->mp", qu, weights, tu).reshape(-1)
    predicted = q @ np.linalg.lstsq(lhs, rhs, rcond=None)[0].reshape(q.shape[1], width)
    curves = predicted.copy()
    curves[usable] += np.einsum("pr,nrs,ns->np", psi, weights, tu - predicted[usable])
    return curves


def fit_two_stage(d: Design, q: np.ndarray) -> CurveFit | None:
    """Per-entity OLS curves, a multivariate GLS meta-regression on q (N, Q) and each curve shrunk toward its
    prediction, for the :class:`Design` of one basis size; the between-entity covariance is the method of moments'
    times a scale chosen on validation (0: the meta-regression's prediction alone; short, noisy series make the
    moment estimate large). None when too few entities have their own curve (more than Q are needed)."""
    n, _, n_feat, size = d.U.shape
    usable, theta_own, cov_own = stage_one(d)
    if usable.sum() <= q.shape[1]:
        return None
    psi = between_entity_covariance(q[usable], theta_own[usable], cov_own[usable])
    return best_on_validation(d, ((shrunk_curves(q, usable, theta_own, cov_own, scale * psi).reshape(n, n_feat, size),
                                   {"entities_own_fit": int(usable.sum()), "psi_scale": scale,
                                    "between_entity_variance": float(np.trace(scale * psi))})
                                  for scale in SHRINK_SCALES))


SCALED_ITERATIONS = 50  # alternating least squares of proxy_scaled_dl: at most this many rounds
SCALED_TOLERANCE = 1e-8  # ... stopping when the training sum of squares improves by less than this share


def fit_proxy_scaled(d: Design, q: np.ndarray) -> CurveFit:
    """One curve shape b_f (J,) per feature shared by every entity, scaled per entity by s_if = c_f . q_i:
    theta_if = s_if b_f. Alternating least squares from the shared curve: the scales' coefficients c (F, Q) given
    the shapes (ridge on the interactions, as :func:`fit_moderated`), then the shapes given the scales (unit norm,
    the size going to c), until the training sum of squares settles; for each ridge penalty, the best on
    validation kept."""
    shared = fit_moderated(d, np.ones((len(q), 1))).theta[0]  # (F, J)
    return best_on_validation(d, ((_scaled_curves(d, q, shared, share), {"ridge": share}) for share in RIDGE_SHARES))


def _scaled_curves(d: Design, q: np.ndarray, shape: np.ndarray, share: float) -> np.ndarray:
    """theta (N, F, J) of :func:`fit_proxy_scaled` for one ridge penalty, by alternating least squares from the
    shapes ``shape`` (F, J)."""
    n_feat, size = d.U.shape[2:]
    penalised = np.tile(np.arange(q.shape[1]) > 0, n_feat)
    last = np.inf
    for _ in range(SCALED_ITERATIONS):
        norm = np.linalg.norm(shape, axis=1, keepdims=True)
        shape = shape / np.where(norm > 0, norm, 1.0)
        driven = np.einsum("nsfj,fj->nsf", d.U, shape)
        c = ridge_within(np.einsum("nsf,nm->nsfm", driven, q).reshape(*driven.shape[:2], -1), d.y, d.train,
                         penalised, (share,))[0].reshape(n_feat, -1)
        scale = q @ c.T  # (N, F)
        flat = ridge_within(np.einsum("nsfj,nf->nsfj", d.U, scale).reshape(*d.U.shape[:2], -1), d.y, d.train,
                            np.zeros(n_feat * size, dtype=bool), (0.0,))[0]
        shape = flat.reshape(n_feat, size)
        theta = np.einsum("nf,fj->nfj", scale, shape)
        residual = within(d.y - np.einsum("nsfj,nfj->ns", d.U, theta), d.train)
        rss = float(np.sum(residual[d.train] ** 2))
        if last - rss <= SCALED_TOLERANCE * max(rss, 1e-12):
            break
        last = rss
    return theta


FITTERS = {"moderated_dl": (fit_moderated, False), "shared_dl": (fit_moderated, True),
           "shuffled_dl": (fit_moderated, False), "proxy_scaled_dl": (fit_proxy_scaled, False),
           "two_stage_dl": (fit_two_stage, False)}


def lag_profile(curves: np.ndarray) -> np.ndarray:
    """omega (N, K) from each entity's lag curves (N, F, K): every feature's curve oriented by the sign of its total
    effect pooled over entities, summed over features, negative weights set to zero, normalised; the absolute curve's
    profile where no weight is positive (and uniform where that too is zero)."""
    sign = np.sign(curves.sum(axis=2).mean(axis=0))  # (F,)
    oriented = np.einsum("nfk,f->nk", curves, np.where(sign == 0, 1.0, sign))
    weights = np.clip(oriented, 0, None)
    none_positive = weights.sum(axis=1) <= 0
    weights[none_positive] = np.abs(curves[none_positive]).sum(axis=1)
    weights[weights.sum(axis=1) <= 0] = 1.0
    return weights / weights.sum(axis=1, keepdims=True)


def feature_lags(curves: np.ndarray) -> np.ndarray:
    """(N, F) each feature's own k*: the k* of :func:`lag_profile` of that feature's curves (N, F, K) alone."""
    return np.stack([effective_lag(lag_profile(curves[:, [f]])) for f in range(curves.shape[1])], axis=1)


@dataclass
class ClassicalFit:
    panel: Panel
    max_lag: int
    method: str
    curves: np.ndarray  # (N, F, K) each entity's lag curve per feature, standardised units
    y_hat: np.ndarray  # (N, T-K) predictions in original units
    facts: dict  # metrics.json: the basis size and what else was chosen on validation
    seconds: float

    def predictions(self) -> pd.DataFrame:
        return self.panel.prediction_frame(self.max_lag, self.y_hat)

    def lag_table(self) -> pd.DataFrame:
        return lag_frame(self.panel, lag_profile(self.curves), "structural")

    def curve_table(self) -> pd.DataFrame:
        """coefficients.csv: one row per entity and feature, its lag curve over lags 1..K (standardised units)."""
        n, n_feat, _ = self.curves.shape
        table = pd.DataFrame({"entity": np.repeat(self.panel.entities, n_feat),
                              "feature": np.tile(self.panel.feature_names, n)})
        for k in range(self.max_lag):
            table[f"lag_{k + 1}"] = self.curves[:, :, k].reshape(-1)
        return table


def fit_classical(panel: Panel, params: Params, method: str) -> ClassicalFit:
    """Fit ``method`` (one of :data:`FITTERS`) on ``panel``, the basis size (and ridge) chosen by validation MSE."""
    fitter, shared = FITTERS[method]
    return fit_curves(panel, params, method, fitter, shared)


def fit_curves(panel: Panel, params: Params, method: str, fitter: Callable[[Design, np.ndarray], CurveFit | None],
               shared: bool) -> ClassicalFit:
    """``fitter`` (a :class:`Design` and the moderators q (N, Q) to a :class:`CurveFit`, or None where it cannot fit)
    on ``panel`` for each basis size, in the standardised units of the classical fits; the size whose fit has the
    lowest validation MSE kept. ``shared``: q is the constant alone."""
    start = time.perf_counter()
    K = params.model.max_lag
    norm = Normalisers.fit(panel)
    windows = lag_windows(norm.X.transform(panel.X), K)
    y = norm.Y.transform(panel.Y)[:, K:]
    labels = panel.target_split(K)
    q = moderators(norm.P.transform(panel.P), shared)
    best = None
    for size in [j for j in BASIS_SIZES if j <= K] or [K]:
        basis = lag_basis(K, size)
        d = design(windows, y, basis, labels)
        fit = fitter(d, q)
        mse = np.inf if fit is None else _val_mse(fit.predict(d.U), d)
        if fit is not None and (best is None or mse < best[0]):
            best = (mse, fit, basis, d)
    if best is None:
        raise ValueError(f"{method} on domain '{params.domain}': no entity has enough training targets for its own "
                         f"lag curve ({min(BASIS_SIZES, default=K) * len(panel.feature_names) + 3} or more are "
                         "needed); use moderated_dl, which pools entities")
    mse, fit, basis, d = best
    facts = {"best_epoch": None, "epochs_run": None, "fit": f"closed form ({method})", "basis_size": basis.shape[1],
             "val_mse_standardised": mse, **fit.facts}
    return ClassicalFit(panel, K, method, np.einsum("nfj,kj->nfk", fit.theta, basis),
                        norm.Y.inverse(fit.predict(d.U)), facts, time.perf_counter() - start)
