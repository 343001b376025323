"""The noise of a panel's target around its lag curves, as its panel-matched surrogates reproduce it:

    e_it = lambda_i . f_t + u_it,    u_it = rho u_i,t-1 + sigma_i v_it,    v ~ N(0, 1)

    found = estimate(design, q, draws)  # design: gls.lag_design(panel, K); q: the proxies' moderators; draws 20-200
    found.rho, found.sigma, found.factors, found.loadings, found.about()

Estimated over every observed target step from the residuals of lag fits that spend few parameters on each entity,
so that the residuals keep the noise's persistence: the pooled fit, the classical L1's unrestricted model (every
basis-reduced lag times every moderator of the proxies, with entity intercepts), and the own fit, which adds each
entity's own level and tilt of each feature's lag curve (its coefficients on the first :data:`OWN_BASIS` functions
of the lag basis), so that lags that shift apart from the proxies leave less in the residuals. A fit of each entity's
own full curves (12 regressors on 24-34 steps of a country panel) keeps almost none of the persistence: its residual
AR(1) is about the same at a true 0.5 as at 0.95, and the surrogates of a 0.8 panel read it as anything from 0.3 to
the clip at 0.95. Lag differences that neither the own level and tilt nor the proxies carry still raise rho (0.19 on
a calibration panel with i.i.d. noise whose lags differ at random by up to 7 lags and hold most of the target's
variance; 0.05 or less on the real panels' surrogates, whose lags hold 5-16 % of it).

- Common shocks, from the pooled fit's residuals (the own fit's coefficients would take up much of them: energy's
  CD 7.7 falls to 2.9): where Pesaran's CD (:func:`acgate.statistics.pesaran_cd`) rejects their independence at
  :data:`CD_ALPHA`, one common factor f_t (1, S), the cross-sectional mean of the residuals at each target step (the
  proxy of common shocks in Pesaran's common correlated effects), and each entity's loading lambda_i, its least
  squares on f over its observed steps. It takes economics' CD from 18.8 to -2.9 and energy's from 7.7 to -1.1; the
  leading principal components of these short, persistent residuals are smooth trend shapes instead, that hold a
  third to a half of their variance (Ahn and Horenstein's eigenvalue ratio picks 2 on economics) and leave CD at 12.
  ``factor_share`` is the share of the residuals' variance (each entity's scaled to sd 1) the common part holds:
  22 % on economics, 28 % on energy. The surrogates carry the panel's own common shocks, f_t as it was, with each
  entity's loading. The loadings are fitted on the levels, where the slow common movement weighs most; the panels'
  yearly shocks load on the entities otherwise (fitted on the quasi-differenced series the loadings explain none of
  economics' levels variance), so the surrogates' common shock is stronger in the innovations than the panels' (20
  against 13 % of their variance) and the panels' yearly shocks follow their proxies, which the surrogates lack
  (:func:`tested_dependence`; docs/results.md).
- rho, of the idiosyncratic part u (the own fit's residuals once each entity's common part is taken out of its
  target): the pooled AR(1) of each entity's u scaled to sd 1, debiased by indirect inference: the same statistic
  computed on simulated AR(1) noise (``draws`` panels, ``audit.noise_draws``, of at most :data:`SIMULATED` of its
  entities, each at its own scale sigma_i, through the same fits and the same removal of the common part), the rho
  whose mean statistic equals the panel's found by bisection on [-0.9, :data:`MAX_RHO`]; then sigma_i at that rho,
  and rho once more. The simulated panels are the same for every reading on a layout, so their error is an offset
  all of them share. On surrogates of both real panels with known rho 0.5, 0.8 and 0.95 the mean estimate is within
  0.05 of the truth in 18 of 18 economics cells and 15 of 18 energy cells with 200 draws, both params' count
  (``tables/noise_recovery``; 16 and 12 with 20, energy +0.05-0.08 at 0.5-0.8).
- sigma_i: each entity's innovation scale, the sd of u_t - rho u_t-1 over its consecutive observed steps (the median
  over entities for an entity with fewer than 3 such steps).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from acgate import statistics
from acgate.audit.gls import LagDesign, transformed
from acgate.audit.persistence import ErrorModel, ar1
from acgate.models.classical import within

OWN_BASIS = 2  # each entity's own coefficients on the first functions of the lag basis (its curves' level and tilt)
MAX_RHO = 0.99  # the largest AR(1) coefficient the search gives: the noise stays stationary
CD_ENTITIES = 1_000  # Pesaran's CD over at most this many entities (a fixed sample): it compares every pair
CD_ALPHA = 0.05  # a common factor only where Pesaran's CD rejects the residuals' independence at this level
SIMULATED = 500  # ... of at most this many of the panel's entities (a fixed sample): its statistic is per entity
BISECTIONS = 12  # steps of the search for rho: a precision of about 0.0005
SALT = 7_919  # the simulated shocks, apart from every other random stream of the project
SHOCK_PERMUTATIONS = 999  # permutations of the proxies behind the p of tested_dependence's proxy_shock_p


@dataclass
class Noise:
    """A panel's noise model (:func:`estimate`): ``rho``, ``sigma`` (N,), the common ``factors`` (k, S; k is 0 or
    1) and each entity's ``loadings`` (N, k), with what the residuals showed: ``rho_raw`` (the pooled AR(1)
    statistic before debiasing), ``factor_share``, and Pesaran's CD of the residuals before and after the common
    part is taken out."""

    rho: float
    sigma: np.ndarray
    factors: np.ndarray
    loadings: np.ndarray
    rho_raw: float
    factor_share: float
    cd: dict
    cd_idiosyncratic: dict

    def common(self) -> np.ndarray:
        """(N, S) the common part lambda_i . f_t of every entity's noise."""
        return self.loadings @ self.factors

    def about(self) -> dict:
        """What a study's record says of the noise."""
        return {"residual_ar1": round(self.rho, 4), "residual_ar1_raw": round(self.rho_raw, 4),
                "innovation_sd_median": round(float(np.median(self.sigma)), 4), "common_factors": len(self.factors),
                "factor_share": round(self.factor_share, 4), "residual_cd": round(self.cd["cd"], 3),
                "idiosyncratic_cd": round(self.cd_idiosyncratic["cd"], 3)}


def estimate(design: LagDesign, q: np.ndarray, draws: int) -> Noise:
    """The :class:`Noise` of the panel of ``design`` (:func:`acgate.audit.gls.lag_design`) around its lag curves
    moderated by ``q`` (N, Q: :func:`acgate.models.classical.moderators` of the proxies), its rho found with ``draws``
    simulated panels (``audit.noise_draws``)."""
    rows = design.rows
    pooled = _LagFit(design, q, own=0)
    residual = pooled.residual(design.y[None])[0]
    cd = _cd(residual, rows)
    factors, loadings, share = _factors(residual, rows, cd)
    through = _Idiosyncratic(pooled, _LagFit(design, q, own=OWN_BASIS), factors, rows)
    idiosyncratic = through(design.y[None])[0]
    raw = _statistic(idiosyncratic[None], rows)[0]
    chosen = np.arange(len(rows))  # the simulation's entities: at most SIMULATED of them (its cost is per entity)
    if len(rows) > SIMULATED:
        chosen = np.sort(np.random.default_rng([SALT, 5]).choice(len(rows), SIMULATED, replace=False))
        sample = LagDesign(design.U[chosen], design.y[chosen], rows[chosen], design.basis)
        through = _Idiosyncratic(_LagFit(sample, q[chosen], own=0), _LagFit(sample, q[chosen], own=OWN_BASIS),
                                 factors, rows[chosen])
    shocks = np.random.default_rng([SALT, 4]).normal(size=(draws, len(chosen), rows.shape[1]))
    sigma = np.ones(len(rows))
    for _ in range(2):  # rho at unit scales, sigma at that rho, rho at those scales, sigma at that rho
        rho = _indirect_rho(raw, sigma[chosen], shocks, through, rows[chosen])
        sigma = _innovation_scales(idiosyncratic, rows, rho)
    return Noise(rho, sigma, factors, loadings, float(raw), share, cd, _cd(idiosyncratic, rows))


def common_shocks(design: LagDesign, q: np.ndarray) -> dict:
    """What the panel's entities share: Pesaran's CD of the pooled fit's residuals (``cd``, its ``p``) and the share
    of their variance the common factor holds (``common_share``; 0 where CD does not reject), as the audit reports
    them beside the classical L1, whose fit has entity effects only."""
    residual = _LagFit(design, q, own=0).residual(design.y[None])[0]
    found = _cd(residual, design.rows)
    return {"cd": found["cd"], "cd_p": found["p"], "common_share": _factors(residual, design.rows, found)[2]}


def tested_dependence(design: LagDesign, q: np.ndarray, errors: ErrorModel) -> dict:
    """What the residuals of the classical L1's unrestricted GLS fit (every lag times every moderator ``q``, pooled,
    on the series ``errors`` quasi-differenced and scaled, with each entity's loading on the common shock taken out
    where ``design`` has one: :func:`acgate.audit.gls.transformed`), which the tests treat as independent across
    entities, still share: Pesaran's CD (``cd_gls``, its ``p``: ``cd_gls_p``), and how far each step's shocks follow
    the proxies (:func:`acgate.statistics.proxy_shocks` on the moderators but the constant, :data:`SHOCK_PERMUTATIONS`
    permutations: ``proxy_shock_r2``, ``proxy_shock_r2_null``, ``proxy_shock_p``). Both real panels' do (mean R²
    0.14 against 0.09 on economics, p <= 0.001; 0.11 against 0.08 on energy, p 0.005), and on surrogates that carry
    their own shocks the L1 loses its size (docs/results.md)."""
    U, y, _ = transformed(design, errors)
    n, s = y.shape
    fitted = LagDesign(U.reshape(n, s, *design.U.shape[2:]), y, errors.rows, design.basis)
    residual = _LagFit(fitted, q, own=0).residual(y[None])[0]
    found = _cd(residual, errors.rows)
    shocks = statistics.proxy_shocks(residual, errors.rows, q[:, 1:], SHOCK_PERMUTATIONS,
                                     np.random.default_rng([SALT, 8]))
    return {"cd_gls": found["cd"], "cd_gls_p": found["p"], "proxy_shock_r2": shocks["r2"],
            "proxy_shock_r2_null": shocks["r2_null"], "proxy_shock_p": shocks["p"]}


def innovations(design: LagDesign, q: np.ndarray, rho: float) -> np.ndarray:
    """(N, C) the panel's own shocks: the residuals of the pooled fit (lags times the moderators ``q``, entity
    intercepts) quasi-differenced at ``rho`` (u_t - rho u_t-1), at each of the C steps where every entity has the step
    and the one before it, each entity's mean over them taken out. Each column is one step's cross-section whole: its
    common shock and how it falls across the entities, which :func:`acgate.audit.surrogates.own_shocks` re-times."""
    rows = design.rows
    residual = _LagFit(design, q, own=0).residual(design.y[None])[0]
    pairs = np.zeros_like(rows)
    pairs[:, 1:] = rows[:, 1:] & rows[:, :-1]
    lagged = np.zeros_like(residual)
    lagged[:, 1:] = residual[:, :-1]
    found = (residual - rho * lagged)[:, pairs.all(axis=0)]
    return found - found.mean(axis=1, keepdims=True)


def _cd(residual: np.ndarray, rows: np.ndarray) -> dict:
    """Pesaran's CD of the residuals (:func:`acgate.statistics.pesaran_cd`) over at most :data:`CD_ENTITIES` of the
    entities, a fixed sample: it compares every pair, so on 20,000 entities it would need gigabytes."""
    if len(rows) > CD_ENTITIES:
        chosen = np.sort(np.random.default_rng([SALT, 6]).choice(len(rows), CD_ENTITIES, replace=False))
        residual, rows = residual[chosen], rows[chosen]
    return statistics.pesaran_cd(residual, rows)


class _LagFit:
    """The residuals of a lag fit, for any targets: each entity's own intercept and own coefficients on the first
    ``own`` functions of the lag basis (the level and tilt of its curve of each feature, for ``own`` 2), partialled
    out first; then least squares on the lags times the moderators, u_it (x) q_i, pooled over entities through their
    cross-products (sum_i G_i (x) q_i q_i', never the regressors themselves, which a panel of 20,000 entities would
    need gigabytes for)."""

    def __init__(self, design: LagDesign, q: np.ndarray, own: int):
        n, s = design.rows.shape
        self.rows, self.q = design.rows, q
        own = within(design.U[..., :own].reshape(n, s, -1), self.rows)  # (N, S, R)
        self.own, self.solve = own, np.linalg.pinv(own)  # (N, S, R), (N, R, S); R may be 0
        lags = within(design.U.reshape(n, s, -1), self.rows)  # (N, S, P)
        self.U = np.where(self.rows[..., None], lags - own @ (self.solve @ lags), 0.0)  # the own part taken out
        G = np.einsum("nsp,nsr->npr", self.U, self.U)
        outer = np.einsum("na,nb->nab", q, q)
        gram = np.einsum("npr,nab->parb", G, outer).reshape(G.shape[1] * q.shape[1], -1)
        self.inverse = np.linalg.pinv(gram, hermitian=True)

    def residual(self, y: np.ndarray) -> np.ndarray:
        """(D, N, S) the residuals of each of the targets ``y`` (D, N, S); zero outside the rows."""
        values = within(np.moveaxis(y, 0, -1), self.rows)  # (N, S, D): each target centred within entities
        values = values - self.own @ (self.solve @ values)  # ... less its least squares on the entity's own regressors
        moment = np.tensordot(self.q, self.U.transpose(0, 2, 1) @ values, axes=(0, 0))  # (Q, P, D)
        coef = (moment.transpose(2, 1, 0).reshape(len(y), -1) @ self.inverse).reshape(len(y), -1, self.q.shape[1])
        fitted = self.U @ (coef @ self.q.T).transpose(2, 1, 0)  # (N, S, P) @ (N, P, D)
        return np.moveaxis(np.where(self.rows[..., None], values - fitted, 0.0), -1, 0)


class _Idiosyncratic:
    """What the noise model reads of any targets: each entity's least squares on the common factors over its
    observed steps, fitted to the pooled fit's residuals, taken out of its target, and the own fit's residuals of
    what is left."""

    def __init__(self, pooled: _LagFit, own: _LagFit, factors: np.ndarray, rows: np.ndarray):
        self.pooled, self.own, self.rows = pooled, own, rows
        self.F = np.where(rows[:, :, None], factors.T[None], 0.0)  # (N, S, k)
        self.solve = np.linalg.pinv(self.F) if len(factors) else None  # (N, k, S)

    def __call__(self, y: np.ndarray) -> np.ndarray:
        """(D, N, S) the idiosyncratic residuals of the targets ``y`` (D, N, S)."""
        if self.solve is not None:
            loadings = np.einsum("nks,dns->dnk", self.solve, self.pooled.residual(y))
            y = y - np.einsum("nsk,dnk->dns", self.F, loadings)
        return self.own.residual(y)


def _scaled(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(D, N, S) each entity's series divided by its root mean square over its rows (a zero series stays zero)."""
    count = np.maximum(rows.sum(axis=1), 1)
    scale = np.sqrt(np.sum(values**2, axis=-1) / count)
    return values / np.where(scale > 0, scale, 1.0)[..., None]


def _statistic(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(D,) the pooled AR(1) of each entity's scaled series, one per leading index."""
    scaled = _scaled(values, rows)
    return np.array([ar1(v, rows) for v in scaled])


def _factors(residual: np.ndarray, rows: np.ndarray, cd: dict) -> tuple[np.ndarray, np.ndarray, float]:
    """The common factor (1, S) of the residuals where Pesaran's CD (``cd``) rejects their independence at
    :data:`CD_ALPHA` (none, (0, S), otherwise), each entity's loading on it (N, 1 or 0), and the share of the scaled
    residuals' variance it holds: what each entity's least squares on the factor explains (module docstring)."""
    n, s = residual.shape
    if not cd["p"] < CD_ALPHA:
        return np.zeros((0, s)), np.zeros((n, 0)), 0.0
    factor = np.where(rows, residual, 0.0).sum(axis=0) / np.maximum(rows.sum(axis=0), 1)
    F = np.where(rows[:, :, None], factor[None, :, None], 0.0)  # (N, S, 1)
    solve = np.linalg.pinv(F)  # (N, 1, S)
    loadings = np.einsum("nks,ns->nk", solve, residual)
    scaled = _scaled(residual[None], rows)[0]
    left = scaled - np.einsum("nsk,nk->ns", F, np.einsum("nks,ns->nk", solve, scaled))
    return factor[None], loadings, float(1 - np.sum(left**2) / np.sum(scaled**2))


def _indirect_rho(raw: float, sigma: np.ndarray, shocks: np.ndarray, through: _Idiosyncratic,
                  rows: np.ndarray) -> float:
    """The rho in [-0.9, MAX_RHO] whose simulated noise (entity scales ``sigma``) gives ``raw`` on average through
    the same fits and factor removal; the bound where none does (the statistic rises with rho)."""

    def mean_statistic(rho: float) -> float:
        noise = np.empty_like(shocks)
        noise[..., 0] = shocks[..., 0] / np.sqrt(1 - rho**2)
        for t in range(1, shocks.shape[-1]):
            noise[..., t] = rho * noise[..., t - 1] + shocks[..., t]
        noise = np.where(rows, noise * sigma[:, None], 0.0)
        return float(np.nanmean(_statistic(through(noise), rows)))

    if not np.isfinite(raw):
        return 0.0
    low, high = -0.9, MAX_RHO
    if mean_statistic(high) <= raw:
        return high
    if mean_statistic(low) >= raw:
        return low
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        low, high = (middle, high) if mean_statistic(middle) < raw else (low, middle)
    return round((low + high) / 2, 4)


def _innovation_scales(idiosyncratic: np.ndarray, rows: np.ndarray, rho: float) -> np.ndarray:
    """(N,) each entity's innovation sd at ``rho`` over its consecutive observed steps (module docstring)."""
    pairs = np.zeros_like(rows)
    pairs[:, 1:] = rows[:, 1:] & rows[:, :-1]
    lagged = np.zeros_like(idiosyncratic)
    lagged[:, 1:] = idiosyncratic[:, :-1]
    innovation = np.where(pairs, idiosyncratic - rho * lagged, 0.0)
    count = pairs.sum(axis=1)
    sigma = np.sqrt(np.sum(innovation**2, axis=1) / np.maximum(count - 1, 1))
    usable = (count >= 3) & (sigma > 0)
    typical = float(np.median(sigma[usable])) if usable.any() else 1.0
    return np.where(usable, sigma, typical)
