"""The persistence of a panel's noise around its lag curves, as the GLS lag tests (:mod:`acgate.audit.gls`) model it:
AR(1) errors with one coefficient for the panel and a noise scale for each entity,

    e_it = rho e_i,t-1 + sigma_i v_it,    v ~ iid (0, 1)

    errors = error_model(design)     # design: gls.lag_design(panel, K)
    errors.rho, errors.sigma, errors.transform(values)

:func:`error_model` reads rho from the residuals of each entity's own lag curves (a fit that holds every lag
difference, so none reaches the noise, and that does not read the proxies, so permuting them leaves the error model
as it is), corrected for the bias of centring and fitting short series (:func:`ar1_bias`), and sigma_i from the same
fits on the quasi-differenced series. :meth:`ErrorModel.transform` is the GLS transformation. :func:`ar1_series`
draws such noise (the surrogates' and the parametric bootstraps').
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from acgate.audit import normal_equations
from acgate.models.classical import within


class Design(Protocol):
    """What :func:`error_model` reads of a design (:class:`acgate.audit.gls.LagDesign`): the lag windows ``U``
    (N, S, F, J), the targets ``y`` (N, S) and the observed ``rows`` (N, S)."""

    U: np.ndarray
    y: np.ndarray
    rows: np.ndarray

RHO_GRID = np.round(np.arange(-0.9, 0.9901, 0.01), 2)  # the AR(1) coefficients ar1_bias tries
RHO_DRAWS = 20  # ... each on this many simulated panels (the same shocks for all: a smooth, monotone search)
BIAS_ENTITIES = 500  # ... of at most this many of the panel's entities (a fixed sample): the bias is per entity
SALT = 7_919  # ar1_bias's simulated shocks, apart from every other random stream of the project


def ar1(residual: np.ndarray, rows: np.ndarray) -> float:
    """The AR(1) coefficient of ``residual`` (..., S), pooled over every pair of consecutive ``rows`` (NaN: none)."""
    pairs = rows[..., 1:] & rows[..., :-1]
    before, after = residual[..., :-1][pairs], residual[..., 1:][pairs]
    return float(np.sum(before * after) / np.sum(before**2)) if np.sum(before**2) > 0 else float("nan")


def ar1_bias(rows: np.ndarray, regressors: np.ndarray) -> np.ndarray:
    """(len(RHO_GRID),) the mean :func:`ar1` estimate that AR(1) noise of each coefficient in :data:`RHO_GRID` gives
    when seen on ``rows`` (N, S), centred on each entity's mean over them and, with ``regressors`` (N, S, P: each
    entity's own, within-centred, zero outside ``rows``), left as the residual of each entity's least squares on its
    own: as the residuals of :func:`error_model`'s per-entity fits are. Each coefficient is tried on
    :data:`RHO_DRAWS` simulated panels of the same shape, the same shocks for all (so the table is smooth and
    monotone), on at most :data:`BIAS_ENTITIES` of them. Centring a short series biases the estimate toward zero
    (Nickell's bias, about (1 + rho) / S: AR(1) 0.95 reads as 0.87 on 34 steps), and a fit of each entity's own lag
    curves takes more of the noise's persistence."""
    if len(rows) > BIAS_ENTITIES:
        chosen = np.sort(np.random.default_rng([SALT, 2]).choice(len(rows), BIAS_ENTITIES, replace=False))
        rows, regressors = rows[chosen], regressors[chosen]
    shocks = np.random.default_rng([SALT, 1]).normal(size=(RHO_DRAWS, *rows.shape))
    count = np.maximum(rows.sum(axis=1), 1)[None, :]
    projector = np.linalg.pinv(regressors)  # (N, P, S)
    table = np.empty(len(RHO_GRID))
    for i, rho in enumerate(RHO_GRID):
        noise = np.empty_like(shocks)
        noise[..., 0] = shocks[..., 0] / np.sqrt(1 - rho**2)
        for t in range(1, rows.shape[1]):
            noise[..., t] = rho * noise[..., t - 1] + shocks[..., t]
        centred = np.where(rows, noise - (np.where(rows, noise, 0.0).sum(axis=-1) / count)[..., None], 0.0)
        # each entity's fit to every draw at once (N, P, D): two matrix products, not an einsum's path search per rho
        centred -= (regressors @ (projector @ centred.transpose(1, 2, 0))).transpose(2, 0, 1)
        table[i] = ar1(centred, np.broadcast_to(rows, centred.shape))
    return table


def debiased_ar1(estimate: float, bias: np.ndarray) -> float:
    """The coefficient of :data:`RHO_GRID` whose noise gives ``estimate`` on average, by the table ``bias``
    (:func:`ar1_bias`); 0 for a NaN estimate (no consecutive pair)."""
    return float(RHO_GRID[np.argmin(np.abs(bias - estimate))]) if np.isfinite(estimate) else 0.0


@dataclass
class ErrorModel:
    """The AR(1) coefficient ``rho`` (debiased), each entity's innovation scale ``sigma`` (N,), the quasi-differenced
    ``rows`` (N, S) (a step and the one before it observed), the raw estimate ``rho_raw`` and the table that debiased
    it (:func:`ar1_bias`, which depends on the design alone, so a bootstrap of the panel reuses it)."""

    rho: float
    sigma: np.ndarray
    rows: np.ndarray
    rho_raw: float
    bias: np.ndarray

    def transform(self, values: np.ndarray) -> np.ndarray:
        """values (N, S, ...) quasi-differenced, centred on each entity's mean over :attr:`rows` and divided by its
        sigma: the GLS transformation (zero outside :attr:`rows`)."""
        lagged = np.zeros_like(values)
        lagged[:, 1:] = values[:, :-1]
        return within(values - self.rho * lagged, self.rows) / self.sigma.reshape((-1,) + (1,) * (values.ndim - 1))


def own_residuals(U: np.ndarray, y: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each entity's residuals (N, S) of least squares on its own lags U (N, S, P) with its intercept, over its
    ``rows`` (zero elsewhere), and their degrees of freedom (N,) (count - P - 1, at least 0)."""
    X, target = within(U, rows), within(y, rows)
    # the normal equations (N, P, P) (a matrix product: einsum sums over S many times slower), solved rank-safe,
    # as an entity with few rows or a lag that does not vary needs, by Cholesky factors where the grams are well
    # conditioned (pseudo-inverses of all of them cost far more)
    coef = normal_equations.solve(np.swapaxes(X, 1, 2) @ X, np.einsum("nsp,ns->np", X, target))
    residual = np.where(rows, target - np.einsum("nsp,np->ns", X, coef), 0.0)
    return residual, np.maximum(rows.sum(axis=1) - U.shape[2] - 1, 0)


def error_model(design: Design, bias: np.ndarray | None = None) -> ErrorModel:
    """The :class:`ErrorModel` of a panel, from each entity's own lag curves (a fit that holds every lag difference,
    whatever explains it, so none reaches the noise, and that does not read the proxies, so a permutation of them
    leaves the error model as it is): rho from their residuals, pooled over consecutive steps and debiased by the
    table ``bias`` (:func:`ar1_bias` of this design; computed when None); sigma_i from the residuals of the same fits
    on the quasi-differenced series (the median over entities for an entity with no residual degree of freedom)."""
    n, s_len, n_feat, size = design.U.shape
    U = design.U.reshape(n, s_len, n_feat * size)
    residual, _ = own_residuals(U, design.y, design.rows)
    raw = ar1(residual, design.rows)
    bias = ar1_bias(design.rows, within(U, design.rows)) if bias is None else bias
    rho = debiased_ar1(raw, bias)
    pairs = np.zeros_like(design.rows)
    pairs[:, 1:] = design.rows[:, 1:] & design.rows[:, :-1]
    unit = ErrorModel(rho, np.ones(n), pairs, raw, bias)
    residual, dof = own_residuals(unit.transform(U), unit.transform(design.y), pairs)
    sigma = np.sqrt(np.sum(residual**2, axis=1) / np.maximum(dof, 1))
    usable = (dof > 0) & (sigma > 0)
    typical = float(np.median(sigma[usable])) if usable.any() else 1.0
    return ErrorModel(rho, np.where(usable, sigma, typical), pairs, raw, bias)


def ar1_series(rng: np.random.Generator, shape: tuple[int, int], rho: float, sigma: np.ndarray | float
               ) -> np.ndarray:
    """(R, S) stationary Gaussian AR(1) series, coefficient ``rho`` and innovation sd ``sigma`` (a number, or one
    per row (R,)), started from their stationary distribution."""
    series = np.empty(shape)
    series[:, 0] = rng.normal(size=shape[0]) * sigma / np.sqrt(1 - rho**2)
    for t in range(1, shape[1]):
        series[:, t] = rho * series[:, t - 1] + sigma * rng.normal(size=shape[0])
    return series
