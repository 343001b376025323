"""In-sample lag tests under the errors a persistent panel has: feasible GLS with AR(1) errors and entity noise scales.

    design = lag_design(panel, max_lag)
    q = moderators(proxies, shared=False)
    errors = error_model(design)
    proxies_hold, curves = interaction_test(design, q, errors, 2000, rng)    # L1 of the classical reference
    lags_differ = shape_test(design, errors, draws=99, rng=rng)            # the lags-differ statement

Country panels are short and persistent (economics' residuals are AR(1) about 0.95). A test that ignores the
autocorrelation rejects on every null (the lag windows of a persistent target explain its own inertia), and a test on
held-out loss over a few test years sees nothing. These tests use every observed target step, in the standardised
units and the lag basis of the classical fits (``acgate.models.classical``):

    y_it = a_i + sum_f u_if,t . theta_if + e_it,    e_it = rho e_i,t-1 + sigma_i v_it,    v ~ iid (0, 1)

where u_if,t (J,) is feature f's lag window reduced to the J-function orthonormal polynomial basis. The error model
(:func:`acgate.audit.persistence.error_model`): rho from the residuals of each entity's own lag curves (a fit that
holds every lag difference, so none reaches the noise, and that does not read the proxies, so permuting them leaves
the error model as it is), corrected for the bias of centring and fitting short series; then every series is
quasi-differenced on consecutive observed steps (Cochrane-Orcutt: z_t - rho z_t-1, an entity's first step and a step
after a gap dropped), centred on its entity's mean (the entity intercepts, a_i (1 - rho)) and divided by sigma_i, its
entity's innovation scale (from the same per-entity fits on the quasi-differenced series). Least squares on the
transformed series is the feasible GLS fit.

- :func:`interaction_test`: do the proxies hold the lags? Lag curves moderated by the proxies against one shape
  scaled for each entity (theta_if = s_if b_f, the shapes b fitted with non-negative scales by :func:`scaled_shape`,
  each entity's scales of them then free: anything, the proxies included, may set the size of an entity's lagged
  effect, not its lags) and against the shared curve (theta_if = b_f), each by its GLS F statistic. The first p
  comes from a parametric bootstrap of the entity-scaled fit (every draw's shapes fitted again), the second from
  permuting the proxies across entities (the same error model throughout), so curve differences the proxies do not
  explain stay in the null distribution instead of inflating the statistic.
- :func:`shape_test`: do the lags differ at all, whatever the proxies say? Every entity's own curves against the
  shared shape scaled for it (theta_if = s_if b_f), one F statistic pooled over the entities; its p from a
  parametric bootstrap of the fitted null, which carries the uncertainty of rho.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from scipy import stats

from acgate.audit import normal_equations
from acgate.audit.persistence import ErrorModel, ar1, ar1_bias, ar1_series, error_model
from acgate.data.panel import Normalisers, Panel
from acgate.models.classical import (
    lag_basis,
    lag_profile,
    lag_windows,
    within,
)
from acgate.models.lags import effective_lag

BASIS_SIZE = 4  # J of the lag curves the tests compare (at most K), as the classical fits' smallest usual choice
PERMUTATION_BYTES = 2**26  # _vs_shared refits its permutations in stacks of at most this many bytes


@dataclass
class LagDesign:
    """A panel's regression inputs over every observed target step, standardised as the classical fits are: the
    basis-reduced lags ``U`` (N, S, F, J) and targets ``y`` (N, S) of the S = T - K target steps (zero outside
    ``rows``), ``rows`` (N, S) the steps whose target and lag window are observed, and the ``basis`` (K, J);
    ``common`` (S,), where given, a common shock whose loading every GLS fit takes out of each entity
    (:func:`with_common_shocks`)."""

    U: np.ndarray
    y: np.ndarray
    rows: np.ndarray
    basis: np.ndarray
    common: np.ndarray | None = None


def with_common_shocks(design: LagDesign) -> LagDesign:
    """``design`` whose GLS fits take out each entity's own loading on the cross-sectional mean of the target at each
    step (Pesaran's common correlated effects, with the target's mean as the common factor's proxy): shocks the
    entities share, with loadings of their own, then stay out of the lag curves. Without it a shock that richer
    entities feel more passed for lags that follow the proxies (the calibrated L1 said "supported" in 27 of 40 such
    surrogates of economics)."""
    count = design.rows.sum(axis=0)
    mean = np.where(design.rows, design.y, 0.0).sum(axis=0) / np.maximum(count, 1)
    return dataclasses.replace(design, common=mean)


def lag_design(panel: Panel, max_lag: int, basis_size: int = BASIS_SIZE) -> LagDesign:
    """The :class:`LagDesign` of ``panel`` with lags 1..``max_lag`` and a basis of ``basis_size`` functions (at most
    K); standardised on the training window, as every fit of the project is."""
    norm = Normalisers.fit(panel)
    windows = lag_windows(norm.X.transform(panel.X).astype(float), max_lag)  # (N, S, F, K)
    y = norm.Y.transform(panel.Y).astype(float)[:, max_lag:]
    rows = np.isfinite(y) & np.isfinite(windows).all(axis=(2, 3))
    basis = lag_basis(max_lag, min(basis_size, max_lag))
    U = np.where(rows[..., None, None], np.einsum("nsfk,kj->nsfj", np.nan_to_num(windows), basis), 0.0)
    return LagDesign(U, np.where(rows, np.nan_to_num(y), 0.0), rows, basis)


@dataclass
class Moments:
    """Per-entity cross-products of the GLS-transformed design: ``G`` (N, P, P) of the lags (P = F * J), ``h`` (N, P)
    of the lags with the target, ``yy`` (N,) of the target, ``count`` (N,) of the transformed rows."""

    G: np.ndarray
    h: np.ndarray
    yy: np.ndarray
    count: np.ndarray

    @classmethod
    def of(cls, design: LagDesign, errors: ErrorModel) -> Moments:
        """The moments of ``design`` under ``errors`` (:func:`transformed`)."""
        U, y, count = transformed(design, errors)
        return cls(np.einsum("nsp,nsr->npr", U, U), np.einsum("nsp,ns->np", U, y), np.sum(y**2, axis=1), count)

    def one(self, index: int) -> Moments:
        """The moments at ``index`` of a stack of them (:func:`_stacked`)."""
        return Moments(self.G[index], self.h[index], self.yy[index], self.count[index])


def transformed(design: LagDesign, errors: ErrorModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The GLS-transformed lags U (N, S, P) and target y (N, S) of ``design`` under ``errors``, and each entity's
    count of transformed rows (N,); with ``design.common``, what each entity's least squares on the transformed common
    shock leaves of both (the shock's loading taken out of every fit alike: one more coefficient per entity, so a row
    fewer of residual degrees of freedom)."""
    n, s, n_feat, size = design.U.shape
    U = errors.transform(design.U).reshape(n, s, n_feat * size)
    y = errors.transform(design.y)
    count = errors.rows.sum(axis=1)
    if design.common is not None:
        c = errors.transform(np.broadcast_to(design.common, design.y.shape).copy())  # (N, S)
        cc = np.maximum(np.sum(c**2, axis=1), 1e-300)
        y = y - c * (np.sum(c * y, axis=1) / cc)[:, None]
        U = U - c[:, :, None] * (np.einsum("ns,nsp->np", c, U) / cc[:, None])[:, None, :]
        count = count - 1
    return U, y, count


def _moderated(m: Moments, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gram (..., P Q, P Q) and moment (..., P Q) of the moderated curves' regressors (the columns of
    :func:`interactions`) for moderators q (..., N, Q): one per leading index, e.g. a stack of permutations."""
    p, width = m.G.shape[1], q.shape[-1]
    # sum_i G_i (x) q_i q_i' on the upper triangles of G_i and q_i q_i' (both symmetric): one matrix product per
    # stack (..., P (P + 1) / 2, Q (Q + 1) / 2), a third of the full one's
    rows_p, cols_p = np.triu_indices(p)
    rows_q, cols_q = np.triu_indices(width)
    upper = m.G[:, rows_p, cols_p].T @ (q[..., rows_q] * q[..., cols_q])
    # where each entry of the gram, row (f, m) and column (g, k), lies in those triangles
    place_p, place_q = np.empty((p, p), dtype=int), np.empty((width, width), dtype=int)
    place_p[rows_p, cols_p] = place_p[cols_p, rows_p] = np.arange(len(rows_p))
    place_q[rows_q, cols_q] = place_q[cols_q, rows_q] = np.arange(len(rows_q))
    where = (place_p[:, None, :, None] * len(rows_q) + place_q[None, :, None, :]).reshape(p * width, p * width)
    gram = upper.reshape(*q.shape[:-2], -1)[..., where]
    return gram, np.einsum("np,...nq->...pq", m.h, q).reshape(*q.shape[:-2], p * width)


def _shape_columns(shape: np.ndarray) -> np.ndarray:
    """(..., P, F) the shapes b (..., F, J) as the columns of a block-diagonal matrix: an entity's lags (P,) times it
    are its regressors u_if . b_f."""
    n_feat, size = shape.shape[-2:]
    return (shape[..., :, :, None] * np.eye(n_feat)[:, None, :]).reshape(*shape.shape[:-2], n_feat * size, n_feat)


def _entity_scaled(m: Moments, shape: np.ndarray) -> tuple[Moments, np.ndarray]:
    """What each entity's lags leave after its own scales of the shapes b (..., F, J): the regressors u_if . b_f of
    entity i partialled out of its lags and its target (least squares within the entity), the lags kept in the
    P - F directions of the basis that the shapes leave (so nothing is collinear). Returns their moments (the lags'
    (..., N, P - F, P - F), the lags' with the target (..., N, P - F), the target's (..., N), whose sum is the
    residual sum of squares of the entity-scaled curves theta_if = s_if b_f) and the scales s (..., N, F) of that
    fit. A leading stack of ``m`` and ``shape`` (draws of a bootstrap) is fitted at once."""
    n_feat = shape.shape[-2]
    B = _shape_columns(shape)
    W = np.linalg.svd(B, full_matrices=True)[0][..., n_feat:]  # (..., P, P - F): the directions the shapes leave
    GB = m.G @ B[..., None, :, :]  # (..., N, P, F)
    inverse = np.linalg.pinv(np.einsum("...pf,...npg->...nfg", B, GB))  # (..., N, F, F)
    hB = np.einsum("...np,...pf->...nf", m.h, B)
    G = m.G - np.einsum("...npf,...nfg,...nrg->...npr", GB, inverse, GB)
    h = m.h - np.einsum("...npf,...nfg,...ng->...np", GB, inverse, hB)
    left = np.swapaxes(W, -1, -2)[..., None, :, :]
    partial = Moments(left @ G @ W[..., None, :, :], np.einsum("...np,...pk->...nk", h, W),
                      m.yy - np.einsum("...nf,...nfg,...ng->...n", hB, inverse, hB), m.count)
    return partial, np.einsum("...nfg,...ng->...nf", inverse, hB)


def shared_shape(m: Moments, n_feat: int, entities: np.ndarray | None = None) -> np.ndarray:
    """(..., F, J) the shared curve of the GLS fit (over ``entities``, a mask; all by default), each feature's curve
    scaled to norm 1 (its size goes to the entity scales); one per leading index of a stack of moments."""
    G, h = (m.G, m.h) if entities is None else (m.G[..., entities, :, :], m.h[..., entities, :])
    beta = normal_equations.solve(G.sum(axis=-3), h.sum(axis=-2))
    beta = beta.reshape(*beta.shape[:-1], n_feat, -1)
    norm = np.linalg.norm(beta, axis=-1, keepdims=True)
    return beta / np.where(norm > 0, norm, 1.0)


def nonnegative_scales(m: Moments, shape: np.ndarray) -> np.ndarray:
    """(..., N, F) each entity's least-squares scales s_if >= 0 of the shapes b_f (..., F, J), given the shapes: of
    the unconstrained least-squares scales on each set of features (2^F - 1 of them; F is a few), the feasible ones of
    lowest residual sum of squares (the constrained optimum is the unconstrained one on its own support); zero where
    no feasible one lowers it."""
    *lead, n, width, _ = m.G.shape
    n_feat = shape.shape[-2]
    B = _shape_columns(shape)[..., None, :, :]  # (..., 1, P, F): matrix products, far faster here than einsum
    driven = np.swapaxes(B, -1, -2) @ (m.G @ B)  # (..., N, F, F)
    moment = (m.h[..., None, :] @ B)[..., 0, :]  # (..., N, F)
    best, lowest = np.zeros((*lead, n, n_feat)), np.zeros((*lead, n))  # all zero: the sum of squares gained is 0
    for support in itertools.chain.from_iterable(itertools.combinations(range(n_feat), k)
                                                 for k in range(1, n_feat + 1)):
        on = list(support)
        scale = np.zeros((*lead, n, n_feat))
        scale[..., on] = normal_equations.solve(driven[(..., *np.ix_(on, on))], moment[..., on])
        change = -np.einsum("...f,...f->...", scale, moment)  # s'Ds - 2 s'm, where D s = m on the support
        better = (scale[..., on] >= 0).all(axis=-1) & (change < lowest)
        np.copyto(best, scale, where=better[..., None])
        np.copyto(lowest, change, where=better)
    return best


SHAPE_ITERATIONS = 500  # scaled_shape's alternating steps at most; they stop once no shape moves by 1e-10


def scaled_shape(m: Moments, n_feat: int) -> np.ndarray:
    """(..., F, J) the shapes b_f of the entity-scaled curves theta_if = s_if b_f, s_if >= 0, fitted by least squares
    on the GLS moments: the shapes and every entity's scales together, by alternating least squares from the shared
    curve (:func:`shared_shape`; each step lowers the residual sum of squares), each shape of norm 1. The shared
    curve, an average of curves of different sizes, misfits every entity in proportion to its scale, and moderators
    that follow the scales pick the misfit up. The scales may not change sign: a curve turned over is another lag
    profile, and with free signs the fit takes two groups of entities with different lags for one shape scaled up
    and down. :func:`interaction_test` then lets each entity's scales of these shapes take any value (a linear
    projection). The fit stops when no shape moves by 1e-10, or after :data:`SHAPE_ITERATIONS` steps; each step
    lowers the residual sum of squares, so an unfinished fit is still closer to the null model's least squares than
    the shared curve it starts from. A leading stack of moments (draws of a bootstrap) is fitted at once, one shape
    each; a fit that has stopped is not stepped again (most stop within 100 steps, a few run to hundreds), so each
    ends where it would alone, up to rounding."""
    *lead, n, width = m.h.shape
    size = width // n_feat
    flat = Moments(m.G.reshape(-1, n, width, width), m.h.reshape(-1, n, width), m.yy.reshape(-1, n),
                   m.count.reshape(-1, n))
    shape = shared_shape(flat, n_feat)
    moving = np.arange(len(shape))  # the fits of the stack that have not stopped: only they are stepped again
    sub = flat
    # each entity's gram blocks of every pair of features, stacked along the entities (B, F, F, N, J J): the shapes'
    # gram in each step is then one matrix product per pair (an einsum's sum over the entities is many times slower)
    blocks = flat.G.reshape(-1, n, n_feat, size, n_feat, size).transpose(0, 2, 4, 1, 3, 5)
    blocks = np.ascontiguousarray(blocks).reshape(len(shape), n_feat, n_feat, n, size * size)
    for _ in range(SHAPE_ITERATIONS):
        scale = nonnegative_scales(sub, shape[moving])
        weight = scale[..., :, None] * scale[..., None, :]  # (B, N, F, F): s_if s_ig, each entity's block's weight
        gram = (np.moveaxis(weight, 1, -1)[..., None, :] @ blocks).reshape(len(moving), n_feat, n_feat, size, size)
        gram = gram.transpose(0, 1, 3, 2, 4).reshape(len(moving), width, width)
        moment = np.einsum("...nf,...nfj->...fj", scale, sub.h.reshape(len(moving), n, n_feat, size))
        beta = normal_equations.solve(gram, moment.reshape(len(moving), width)).reshape(len(moving), n_feat, size)
        norm = np.linalg.norm(beta, axis=-1, keepdims=True)
        beta = np.where(norm > 0, beta / np.where(norm > 0, norm, 1.0), shape[moving])  # no entity drives it: kept
        still = np.max(np.abs(beta - shape[moving]), axis=(-2, -1)) >= 1e-10
        shape[moving] = beta
        if not still.all():
            moving = moving[still]
            sub = Moments(sub.G[still], sub.h[still], sub.yy[still], sub.count[still])
            blocks = blocks[still]
        if not len(moving):
            break
    return shape.reshape(*lead, n_feat, size)


INTERACTION_COLUMNS = ["entities", "rows", "rho", "rho_raw", "f_vs_entity_scaled", "df_vs_entity_scaled",
                       "p_vs_entity_scaled", "draws", "f_vs_shared", "df_vs_shared", "p_vs_shared", "permutations",
                       "df_residual", "kstar_sd", "note"]
SCALED_DRAWS = 99  # parametric bootstrap draws of the test against the entity-scaled shape: p down to 0.01
DRAW_BYTES = 2**27  # ... fitted in stacks of at most this many bytes of moments


def _f_vs_scaled(partial: Moments, q: np.ndarray, df_scaled: int, scaled_df: int) -> float:
    """The GLS F statistic of the shapes' other directions moderated by q (N, Q), on what each entity's own scales of
    the shapes leave (``partial``, :func:`_entity_scaled`)."""
    rss_scaled = float(partial.yy.sum())
    rss_both = float(normal_equations.rss(*_moderated(partial, q), rss_scaled))
    return (rss_scaled - rss_both) / df_scaled / (max(rss_both, 1e-300) / scaled_df)


def _stacked(moments: list[Moments]) -> Moments:
    """One :class:`Moments` whose arrays stack those of ``moments`` along a new first axis."""
    return Moments(*(np.stack([getattr(m, f.name) for m in moments]) for f in dataclasses.fields(Moments)))


def _scaled_null_f(design: LagDesign, errors: ErrorModel, lagged: np.ndarray, q: np.ndarray, df: tuple[int, int],
                   draws: int, rng: np.random.Generator) -> np.ndarray:
    """(draws,) the F statistics against the entity-scaled shape (:func:`_f_vs_scaled`, degrees of freedom ``df``) of
    a parametric bootstrap's panels: the fitted null's lagged part ``lagged`` (N, S) plus noise (:func:`_null_draws`),
    each draw's shapes and scales fitted again, in stacks of at most :data:`DRAW_BYTES` of moments."""
    n, _, n_feat, size = design.U.shape
    chunk = max(1, DRAW_BYTES // (8 * n * (n_feat * size)**2 * 6))  # G, its partial and their products, per draw
    panels = _null_draws(design, lagged, errors, draws, rng)
    found = []
    for start in range(0, draws, chunk):
        stack = _stacked([Moments.of(*next(panels)) for _ in range(min(chunk, draws - start))])
        partials, _ = _entity_scaled(stack, scaled_shape(stack, n_feat))
        found += [_f_vs_scaled(partials.one(b), q, *df) for b in range(len(stack.G))]
    return np.array(found)


def interaction_test(design: LagDesign, q: np.ndarray, errors: ErrorModel, permutations: int,
                     rng: np.random.Generator, draws: int = SCALED_DRAWS) -> tuple[dict, np.ndarray]:
    """Do the proxies hold the lags? Two GLS F statistics of lag curves moderated by q (N, Q):

    - against the entity-scaled shape: each entity's own scale of one shape per feature (:func:`scaled_shape`:
      anything may set the size of an entity's lagged effect) plus the shape's other directions moderated by q,
      against the scales alone (a size that follows the proxies in any form, linear or not, stays in the null model).
      Its p is a parametric bootstrap's (``draws`` panels, as :func:`shape_test`'s): the fitted null (each entity's
      scales of the shapes, its level) plus Gaussian AR(1) noise and, where the design takes one, a common shock of its
      own (:func:`_null_draws`), every draw fitted as the panel is (its error model, its shapes, its scales). Where the
      proxies set the size of the effect, the shapes' estimation error, scaled by each entity's size, moves with the
      proxies: permuting them took that out of the null distribution and the test rejected in 7 % of such panels at
      0.05;
    - against the shared curve: the moderated curves theta_if = C_f q_i against one curve for every entity, its p
      from ``permutations`` draws of the proxies' rows across entities, every draw refitting both models under the
      same error model.

    Each p is (1 + #{F_b >= F}) / (B + 1); not the F distribution's: the entity scales, estimated on a few steps
    each, make it reject far too often (14 to 17 of 30 pure-noise panels at 0.05).

    Returns the row (:data:`INTERACTION_COLUMNS`; NaN statistics and a ``note`` when the panel cannot be tested) and
    each entity's moderated GLS lag curves (N, F, K) (NaN when untested; their lag profile is
    :func:`acgate.models.classical.lag_profile` of them, its k* :func:`acgate.models.lags.effective_lag` of that)."""
    n, _, n_feat, size = design.U.shape
    m = Moments.of(design, errors)
    rows, width = int(m.count.sum()), q.shape[1]
    coef_moderated, coef_shared = n_feat * size * width, n_feat * size
    df_scaled = n_feat * (size - 1) * width  # the shape's other directions, times q
    residual_df, scaled_df = rows - n - coef_moderated, rows - n - n * n_feat - df_scaled
    row = {"entities": n, "rows": rows, "rho": errors.rho, "rho_raw": errors.rho_raw, "permutations": permutations,
           "draws": draws, "df_vs_entity_scaled": df_scaled, "df_vs_shared": coef_moderated - coef_shared,
           "df_residual": residual_df}
    if width < 2 or size < 2 or min(residual_df, scaled_df) < 1 or n < width + 2:
        note = ("no proxies to moderate the lags" if width < 2 else "one basis function: no lag shape to test"
                if size < 2 else f"too few entities ({n}) or observed steps ({rows}) for {coef_moderated} curve "
                f"coefficients and {n * n_feat} entity scales")
        return ({**row, **{c: np.nan for c in INTERACTION_COLUMNS if c not in row}, "note": note},
                np.full((n, n_feat, len(design.basis)), np.nan))
    f_scaled, p_scaled = _vs_entity_scaled(design, m, q, errors, (df_scaled, scaled_df), draws, rng)
    f_shared, p_shared = _vs_shared(m, q, (coef_moderated - coef_shared, residual_df), permutations, rng)
    curves = np.einsum("nfj,kj->nfk", _moderated_theta(m, q, n_feat), design.basis)
    return {**row, "f_vs_entity_scaled": f_scaled, "p_vs_entity_scaled": p_scaled, "f_vs_shared": f_shared,
            "p_vs_shared": p_shared, "kstar_sd": float(np.std(effective_lag(lag_profile(curves)))),
            "note": ""}, curves


def _vs_entity_scaled(design: LagDesign, m: Moments, q: np.ndarray, errors: ErrorModel, df: tuple[int, int],
                      draws: int, rng: np.random.Generator) -> tuple[float, float]:
    """:func:`interaction_test`'s F against the entity-scaled shape (``df``: its numerator and residual degrees of
    freedom) and its parametric bootstrap p over ``draws`` panels of the fitted null."""
    n_feat = design.U.shape[2]
    shape = scaled_shape(m, n_feat)
    partial, scale = _entity_scaled(m, shape)
    f_scaled = _f_vs_scaled(partial, q, *df)
    # the draws' noise from a stream of its own: the proxy permutations (_vs_shared), and the tests that go on with
    # ``rng`` (shape_test, stability_test), draw what they drew before the bootstrap was added
    draws_f = _scaled_null_f(design, errors, np.einsum("nsfj,fj,nf->ns", design.U, shape, scale), q, df, draws,
                             rng.spawn(1)[0])
    return f_scaled, (1 + int(np.sum(draws_f >= f_scaled * (1 - 1e-12)))) / (draws + 1)


def _vs_shared(m: Moments, q: np.ndarray, df: tuple[int, int], permutations: int,
               rng: np.random.Generator) -> tuple[float, float]:
    """:func:`interaction_test`'s F against the shared curve (``df``: its numerator and residual degrees of freedom)
    and its p over ``permutations`` draws of the proxies' rows across entities, every draw refitting both models."""
    n, width = q.shape
    total = float(m.yy.sum())
    rss_shared = float(normal_equations.rss(m.G.sum(axis=0), m.h.sum(axis=0), total))

    def f_vs_shared(moderators: np.ndarray) -> np.ndarray:
        """(B,) the F statistics against the shared curve of moderators (B, N, Q)."""
        rss_moderated = normal_equations.rss(*_moderated(m, moderators), total)
        return (rss_shared - rss_moderated) / df[0] / (np.maximum(rss_moderated, 1e-300) / df[1])

    f_shared = float(f_vs_shared(q[None])[0])
    orders = np.array([rng.permutation(n) for _ in range(permutations)], dtype=int).reshape(-1, n)
    coef_moderated = m.G.shape[1] * width
    step = max(1, PERMUTATION_BYTES // (8 * (coef_moderated**2 + n * width * width)))  # permutations refitted at once
    permuted = np.concatenate([f_vs_shared(q[orders[i:i + step]]) for i in range(0, permutations, step)]
                              or [np.empty(0)])
    return f_shared, float((1 + np.sum(permuted >= f_shared * (1 - 1e-12))) / (permutations + 1))


def _moderated_theta(m: Moments, q: np.ndarray, n_feat: int) -> np.ndarray:
    """(N, F, J) each entity's basis coefficients theta_if = C_f q_i of the moderated GLS fit with moments ``m`` and
    moderators q (N, Q)."""
    gram, moment = _moderated(m, q)
    coef = np.linalg.lstsq(gram, moment, rcond=None)[0].reshape(n_feat, m.G.shape[1] // n_feat, q.shape[1])
    return np.einsum("fjm,nm->nfj", coef, q)


def _stable_curves(m: Moments, q: np.ndarray, n_feat: int) -> np.ndarray:
    """(N, P) each entity's basis coefficients under a lag map stable over time: the moderated fit's theta_i plus the
    part of the entity's own GLS fit beyond it, shrunk as a random coefficient's best linear predictor,
    T (T + V_i)^-1 (b_i - theta_i), with V_i = G_i^-1 the own fit's sampling covariance and T the spread of the
    entities' departures beyond their mean V (its negative directions set to zero). Where the proxies hold the lags,
    T is about zero and the null is the moderated curves; where lags differ apart from them, it keeps those lags.
    An entity with too few steps for its own fit keeps theta_i."""
    theta = _moderated_theta(m, q, n_feat).reshape(len(q), -1)
    V = np.linalg.pinv(m.G, hermitian=True)
    departure = np.einsum("npr,nr->np", V, m.h) - theta
    usable = m.count > theta.shape[1] + 1
    if usable.sum() < 2:
        return theta
    spread = np.cov(departure[usable].T).reshape(theta.shape[1], -1) - V[usable].mean(axis=0)
    values, vectors = np.linalg.eigh((spread + spread.T) / 2)
    T = (vectors * np.clip(values, 0, None)) @ vectors.T
    shrunk = np.einsum("pr,nrs,ns->np", T, np.linalg.pinv(T[None] + V, hermitian=True), departure)
    return theta + np.where(usable[:, None], shrunk, 0.0)


@dataclass
class _NullFit:
    """What a parametric bootstrap draws beyond the fitted null's lagged part: each entity's ``level`` (N,), the
    ``noise`` it carries (AR(1) coefficient and entity scales) and, where the design takes a common shock, each
    entity's ``loading`` (N,) on a shared AR(1) series of coefficient ``phi`` and innovation sd ``innovation``."""

    level: np.ndarray
    noise: ErrorModel
    loading: np.ndarray | None = None
    phi: float = 0.0
    innovation: float = 0.0


def _null_fit(design: LagDesign, lagged: np.ndarray, errors: ErrorModel) -> _NullFit:
    """The fitted null of a bootstrap beyond its lagged part ``lagged`` (N, S), for a panel whose error model (read
    as every test reads it) is ``errors``: each entity's level, the mean of what the lagged part leaves over its rows.
    Where ``design`` takes a common shock, the shock is what the null leaves beyond the levels, averaged over the
    entities at each observed step (centred): each entity's loading on it by least squares over its rows; its AR(1)
    coefficient :func:`ar1`, corrected for a short series by Kendall's (1 + 3 phi) / S, and the sd of its innovations;
    and the noise the draws carry is the error model of what the shock's part leaves (its rho debiased for fits that
    take the loading out too), so that the shock is not in both. Every GLS fit takes a loading on the common shock out;
    draws built without one had no common shock where the panel has one, and the test against the entity-scaled shape
    said "supported" in 34 of 600 economics surrogates whose proxies set the effect's size (21 with the panel's own
    shock in every draw, rules 10)."""
    rows = design.rows
    left = np.where(rows, design.y - lagged, 0.0)
    count = np.maximum(rows.sum(axis=1), 1)
    level = left.sum(axis=1) / count
    if design.common is None:
        return _NullFit(level, errors)
    seen = rows.any(axis=0)
    left = np.where(rows, left - level[:, None], 0.0)
    shock = np.where(seen, left.sum(axis=0) / np.maximum(rows.sum(axis=0), 1), 0.0)
    shock = np.where(seen, shock - shock[seen].mean(), 0.0)
    mine = np.where(rows, shock[None, :], 0.0)
    mine = np.where(rows, mine - (mine.sum(axis=1) / count)[:, None], 0.0)
    spread = np.sum(mine**2, axis=1)
    loading = np.where(spread > 0, np.sum(mine * left, axis=1) / np.where(spread > 0, spread, 1.0), 0.0)
    raw = np.nan_to_num(ar1(shock, seen))
    phi = float(np.clip(raw + (1 + 3 * raw) / max(int(seen.sum()), 1), -0.99, 0.99))
    pairs = seen[1:] & seen[:-1]
    innovation = float(np.sqrt(np.mean((shock[1:] - phi * shock[:-1])[pairs]**2))) if pairs.any() else 0.0
    idiosyncratic = LagDesign(design.U, np.where(rows, design.y - loading[:, None] * mine, 0.0), rows, design.basis)
    n, s_len = rows.shape
    regressors = np.concatenate([within(design.U.reshape(n, s_len, -1), rows), mine[..., None]], axis=-1)
    return _NullFit(level, error_model(idiosyncratic, ar1_bias(rows, regressors)), loading, phi, innovation)


def _null_draws(design: LagDesign, lagged: np.ndarray, errors: ErrorModel, draws: int,
                rng: np.random.Generator) -> Iterator[tuple[LagDesign, ErrorModel]]:
    """A parametric bootstrap's panels: ``draws`` designs whose targets are the fitted null (:func:`_null_fit`: its
    lagged part (N, S), each entity's level) plus Gaussian AR(1) noise, each with its error model estimated again
    from ``errors``' table of bias (so the uncertainty of rho is in the null distribution). The noise is of
    ``errors``' rho and entity scales where the design takes no common shock.

    Where it takes one, every draw carries a shock series of its own (the fitted loadings times a stationary AR(1)
    series of the shock's fitted coefficient and innovations) beside the noise beyond the shock, and the shock is
    taken again as the draw's cross-sectional mean. Draws that carried the panel's own cross-sectional mean let
    their fits take it out almost exactly, while the panel's fit takes out a noisy proxy of its shock: on 200 energy
    surrogates whose shock loadings follow the proxies the lags-differ test rejected 22 (11 %) with them (rules 10)."""
    n, s_len = design.y.shape
    fit = _null_fit(design, lagged, errors)
    for _ in range(draws):
        y = fit.level[:, None] + lagged + ar1_series(rng, (n, s_len), fit.noise.rho, fit.noise.sigma)
        if fit.loading is not None:
            y = y + fit.loading[:, None] * ar1_series(rng, (1, s_len), fit.phi, fit.innovation)
        drawn = LagDesign(design.U, np.where(design.rows, y, 0.0), design.rows, design.basis)
        drawn = with_common_shocks(drawn) if design.common is not None else drawn
        yield drawn, error_model(drawn, errors.bias)


STABILITY_COLUMNS = ["entities", "rows", "first_late_step", "f", "df_extra", "df_residual", "p", "draws",
                     "kstar_early", "kstar_late", "kstar_mean_abs_change", "kstar_rank_agreement", "note"]
STABILITY_DRAWS = 99  # parametric bootstrap draws of the stability test: p down to 0.01


def stability_test(design: LagDesign, q: np.ndarray, errors: ErrorModel, draws: int, rng: np.random.Generator
                   ) -> dict:
    """Do the lags hold over time? The moderated lag curves (theta_if = C_f q_i, as :func:`interaction_test` fits
    them) fitted apart on the early and the late half of the observed steps (each entity its own level in each half)
    against one set of them for both halves, by the GLS F statistic: a lag map that changes mid-sample (a shift of
    every lag, or a change in how the proxies set them) makes the two halves' curves differ.

    Its p is a parametric bootstrap's (``draws`` panels), as :func:`shape_test`'s: the null, curves stable over time
    that keep what each entity's own fit holds beyond the moderated ones as far as the entities differ beyond noise
    (:func:`_stable_curves`), plus Gaussian AR(1) noise and, where the design takes one, a common shock of its own
    (:func:`_null_draws`), the error model estimated again in every draw. A null of the moderated curves alone rejected
    wherever the panel's lags hold structure they miss, as the two halves' regressors weigh that misfit differently (50
    of 50 calibration panels whose lags differ apart from the proxies); each entity's own curves unshrunk took the noise
    they fit into the null and with it the power (0 of 40 breaks on surrogates of economics). With the p, the mean k* of
    each half's curves, the mean absolute change of an entity's k* and the Spearman of the entities' k* between the
    halves
    (evidence of what changed). The halves split the observed steps where half of the transformed rows lie before;
    ``first_late_step`` is the first target step (0-based, of the design's S) of the late half.

    Returns a row of :data:`STABILITY_COLUMNS`; NaN statistics and a ``note`` when the panel cannot be tested."""
    n, s_len, n_feat, size = design.U.shape
    width = q.shape[1]
    counts = np.cumsum(errors.rows.sum(axis=0))
    first_late = int(np.searchsorted(counts, counts[-1] / 2, side="right")) if counts[-1] else 0
    late = np.arange(s_len) >= first_late
    p_mod = n_feat * size * width
    row = {"entities": n, "rows": int(errors.rows.sum()), "first_late_step": first_late, "draws": draws,
           "df_extra": p_mod}

    def halves(drawn: LagDesign, fitted: ErrorModel) -> tuple[Moments, Moments]:
        return (Moments.of(drawn, dataclasses.replace(fitted, rows=fitted.rows & ~late[None, :])),
                Moments.of(drawn, dataclasses.replace(fitted, rows=fitted.rows & late[None, :])))

    early, later = halves(design, errors)
    residual_df = int(early.count.sum() + later.count.sum()) - 2 * n - 2 * p_mod  # the same in every draw
    if min(int(early.count.sum()), int(later.count.sum())) < p_mod + n or residual_df < 1:
        note = (f"too few observed steps in each half ({int(early.count.sum())} and {int(later.count.sum())} "
                f"transformed rows) for {p_mod} curve coefficients and {n} entity levels in each")
        return {**row, **{c: np.nan for c in STABILITY_COLUMNS if c not in row}, "note": note}

    def statistic(early: Moments, later: Moments) -> float:
        (gram_early, moment_early), (gram_late, moment_late) = _moderated(early, q), _moderated(later, q)
        total = float(early.yy.sum() + later.yy.sum())
        rss_one = float(normal_equations.rss(gram_early + gram_late, moment_early + moment_late, total))
        rss_apart = sum(float(normal_equations.rss(*_moderated(m, q), float(m.yy.sum()))) for m in (early, later))
        return (rss_one - rss_apart) / p_mod / (max(rss_apart, 1e-300) / residual_df)

    observed = statistic(early, later)
    curves = np.concatenate([np.einsum("nfj,kj->nfk", _moderated_theta(m, q, n_feat), design.basis)
                             for m in (early, later)])  # (2N, F, K)
    kstar = effective_lag(lag_profile(curves)).reshape(2, n)  # one orientation of the features for both halves
    # the null: lag curves stable over time, the moderated ones plus what each entity's own holds beyond them as far
    # as the entities differ beyond their fits' noise (so that lag structure the moderated curves miss is in every
    # draw as it is in the panel)
    lagged = np.einsum("nsp,np->ns", design.U.reshape(n, s_len, -1), _stable_curves(Moments.of(design, errors), q,
                                                                                    n_feat))
    exceed = sum(statistic(*halves(drawn, again)) >= observed * (1 - 1e-12)
                 for drawn, again in _null_draws(design, lagged, errors, draws, rng))
    return {**row, "f": observed, "df_residual": residual_df, "p": (1 + exceed) / (draws + 1),
            "kstar_early": float(kstar[0].mean()), "kstar_late": float(kstar[1].mean()),
            "kstar_mean_abs_change": float(np.mean(np.abs(kstar[1] - kstar[0]))),
            "kstar_rank_agreement": float(stats.spearmanr(kstar[0], kstar[1]).statistic)
            if np.ptp(kstar[0]) > 0 and np.ptp(kstar[1]) > 0 else np.nan, "note": ""}


SHAPE_COLUMNS = ["entities", "rows", "rho", "f", "df_extra", "df_residual", "p", "draws", "share_below_05", "note"]
SHAPE_DRAWS = 99  # parametric bootstrap draws of the lags-differ test: p down to 0.01


@dataclass
class _EntityShapes:
    """The per-entity fits of :func:`shape_test` on one transformed panel: which entities are ``usable``, the shared
    ``shape`` (F, J), each entity's ``scale`` (N, F) of it, and the residual sums of squares of each usable entity's
    own curves and of its scaled shared shape, with their residual degrees of freedom."""

    usable: np.ndarray
    shape: np.ndarray
    scale: np.ndarray
    rss_own: np.ndarray
    rss_scaled: np.ndarray
    residual_df: np.ndarray

    @classmethod
    def fit(cls, m: Moments, n_feat: int) -> _EntityShapes:
        width = m.G.shape[1]
        size = width // n_feat
        usable = (m.count >= width + 3) & (np.linalg.matrix_rank(m.G) == width)
        shape = shared_shape(m, n_feat, usable if usable.any() else None)
        driven = np.einsum("nfjgk,fj,gk->nfg", m.G.reshape(-1, n_feat, size, n_feat, size), shape, shape)  # (N, F, F)
        moment = np.einsum("nfj,fj->nf", m.h.reshape(-1, n_feat, size), shape)
        scale = np.einsum("nfg,ng->nf", np.linalg.pinv(driven), moment)
        G, h, yy = m.G[usable], m.h[usable], m.yy[usable]
        rss_own = yy - np.einsum("np,np->n", h, np.linalg.solve(G, h[..., None])[..., 0])
        rss_scaled = np.maximum(yy - np.einsum("nf,nf->n", moment[usable], scale[usable]), rss_own)
        return cls(usable, shape, scale, rss_own, rss_scaled, m.count[usable] - width - 1)

    def f(self, extra: int) -> float:
        """The pooled F statistic: the entities' sums of squares added up, ``extra`` more coefficients each."""
        return float((np.sum(self.rss_scaled - self.rss_own) / (extra * self.usable.sum()))
                     / max(np.sum(self.rss_own) / self.residual_df.sum(), 1e-300))


def shape_test(design: LagDesign, errors: ErrorModel, draws: int, rng: np.random.Generator) -> dict:
    """Do the entities' lags differ at all, whatever the proxies say? Each testable entity's own curves (J numbers
    per feature) against the shared shape scaled for it (one number per feature: the size of the lagged effect may
    differ, the lags may not), on the GLS-transformed series; one F statistic pooled over the entities (their sums of
    squares added up). An entity is testable with P + 3 transformed steps or more (P = F J) and lags that vary; a
    target its own curves fit exactly (constant, or without noise) leaves nothing to test.

    Its p is a parametric bootstrap's (``draws`` panels): the fitted null (each entity's scaled shared shape, its
    intercept) plus Gaussian AR(1) noise and, where the design takes one, a common shock of its own
    (:func:`_null_draws`), each draw tested as the panel is (its error model estimated again); so the uncertainty of
    rho, which near a unit root makes the F distribution reject too often (3 of 20 economics nulls at 0.05), is in the
    null distribution. ``share_below_05`` is the share of entities whose own F has p < 0.05 by the F distribution
    (evidence only).

    Returns a row of :data:`SHAPE_COLUMNS`; NaN statistics and a ``note`` when no entity can be tested."""
    n, s_len, n_feat, size = design.U.shape
    fits = _EntityShapes.fit(Moments.of(design, errors), n_feat)
    row = {"entities": int(fits.usable.sum()), "rows": int(errors.rows[fits.usable].sum()), "rho": errors.rho,
           "draws": draws}
    exact = np.sum(fits.rss_own) <= 1e-12 * max(float(np.sum(design.y**2)), 1e-12)
    if fits.usable.sum() < 2 or size < 2 or exact:
        note = ("one basis function: no lag shape to compare" if size < 2 else
                f"fewer than two entities with {n_feat * size + 3} or more quasi-differenced steps and lags that vary"
                if fits.usable.sum() < 2 else "the entities' own curves fit the target exactly (a constant or "
                "noiseless target): no noise to test against")
        return {**row, **{c: np.nan for c in SHAPE_COLUMNS if c not in row}, "note": note}
    extra = n_feat * size - n_feat
    observed = fits.f(extra)
    lagged = np.einsum("nsfj,fj,nf->ns", design.U, fits.shape, fits.scale)
    exceed = 0
    for drawn, again in _null_draws(design, lagged, errors, draws, rng):
        redrawn = _EntityShapes.fit(Moments.of(drawn, again), n_feat)
        exceed += redrawn.usable.sum() >= 2 and redrawn.f(extra) >= observed * (1 - 1e-12)
    f_entity = ((fits.rss_scaled - fits.rss_own) / extra) / np.maximum(fits.rss_own / fits.residual_df, 1e-300)
    df_extra, df_residual = extra * int(fits.usable.sum()), int(fits.residual_df.sum())
    return {**row, "f": observed, "df_extra": df_extra, "df_residual": df_residual, "p": (1 + exceed) / (draws + 1),
            "share_below_05": float(np.mean(stats.f.sf(f_entity, extra, fits.residual_df) < 0.05)), "note": ""}
