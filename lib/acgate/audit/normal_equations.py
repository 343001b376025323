"""Least squares from normal equations, for stacks of many small systems at once (each entity's fit, each
bootstrap draw's, each permutation's), as the GLS lag tests (:mod:`acgate.audit.gls`) solve them:

    coef = solve(gram, moment)          # (..., d) from grams (..., d, d) and moments (..., d)
    left = rss(gram, moment, total)     # (...,) residual sums of squares

Rank-safe: a column that is empty gets the coefficient 0 and an ill-conditioned gram is solved by pseudo-inverse, so
that each result is a least-squares solution whatever the rank. Numpy solves one small system per LAPACK call; a long
stack of them is factorised and solved a column of the whole stack at a time instead.
"""

from __future__ import annotations

import numpy as np


def _cholesky_solve(factor: np.ndarray, gram: np.ndarray, moment: np.ndarray) -> np.ndarray:
    """(B, d) the solutions of the systems gram x = moment (B, d, d), (B, d), given the grams' lower Cholesky factors
    (B, d, d): by forward and back substitution, one column of the whole stack at a time, where the stack holds d
    systems or more (numpy has no batched triangular solve; a second factorisation by LU costs more than these d
    steps of numpy calls on a long stack, less on a short one, which LU solves instead)."""
    d = factor.shape[-1]
    if len(factor) < d:
        return np.linalg.solve(gram, moment[..., None])[..., 0]
    pivots = np.diagonal(factor, axis1=1, axis2=2)
    z = np.empty_like(moment)
    for j in range(d):
        z[:, j] = (moment[:, j] - np.einsum("bi,bi->b", factor[:, j, :j], z[:, :j])) / pivots[:, j]
    x = np.empty_like(moment)
    for j in reversed(range(d)):
        x[:, j] = (z[:, j] - np.einsum("bi,bi->b", factor[:, j + 1:, j], x[:, j + 1:])) / pivots[:, j]
    return x


def _cholesky(gram: np.ndarray) -> np.ndarray:
    """(B, d, d) the lower Cholesky factors of a stack of grams (B, d, d), a NaN or zero pivot where one is not
    positive definite. By LAPACK, which raises where one is not (:class:`numpy.linalg.LinAlgError`), but column by
    column across the stack where it holds 500 d grams or more: LAPACK's call per gram then costs more than these d
    steps of numpy calls on the whole stack (the many entities' 2 or 3 scales of
    :func:`acgate.audit.gls.nonnegative_scales`)."""
    d = gram.shape[-1]
    if len(gram) < 500 * d:
        return np.linalg.cholesky(gram)
    factor = np.zeros_like(gram)
    with np.errstate(invalid="ignore", divide="ignore"):
        for j in range(d):
            done = factor[:, j, :j]
            pivot = np.sqrt(gram[:, j, j] - np.einsum("bi,bi->b", done, done))
            factor[:, j, j] = pivot
            factor[:, j + 1:, j] = (gram[:, j + 1:, j] - np.einsum("bri,bi->br", factor[:, j + 1:, :j], done)
                                    ) / pivot[:, None]
    return factor


def solve(gram: np.ndarray, moment: np.ndarray) -> np.ndarray:
    """(..., d) the least-squares coefficients of normal equations with these gram matrices (..., d, d) and moment
    vectors (..., d), one per leading index. Each is solved by its gram's Cholesky factor where that shows the gram,
    scaled to a unit diagonal, well conditioned (a pivot ratio above 1e-5), by pseudo-inverse of the scaled system
    otherwise (collinear columns: a least-squares solution all the same). A column whose diagonal is at most 1e-12 of
    its gram's largest (empty, or rounding: a feature that does not vary) gets the coefficient 0."""
    if gram.shape[-1] == 1:  # one column (an entity's scale of one shape): the ratio, 0 where the column is empty
        return np.where(gram[..., 0] > 0, moment / np.where(gram[..., 0] > 0, gram[..., 0], 1.0), 0.0)
    lead, d = gram.shape[:-2], gram.shape[-1]
    gram, moment = gram.reshape(-1, d, d), moment.reshape(-1, d)
    # diagonals and pivots as contiguous (d, B): numpy reduces over a short leading axis many times faster than over
    # a short trailing one, and the stacks here are of many small grams
    diagonal = np.diagonal(gram, axis1=1, axis2=2).T.copy()
    used = diagonal > 1e-12 * diagonal.max(axis=0)
    scale = np.where(used, 1 / np.sqrt(np.where(used, diagonal, 1.0)), 1.0)  # 1 for the unit columns below
    if not used.all():  # a unit column in place of each one left out: it gets 0, the others are solved as they are
        kept = used.T[:, :, None] & used.T[:, None, :]
        gram, moment = np.where(kept, gram, np.eye(d)), np.where(used.T, moment, 0.0)
    try:  # the stack at once
        factor = _cholesky(gram)
        # the factor of the gram scaled to a unit diagonal is this one's, its rows scaled: so are its pivots
        pivots = np.diagonal(factor, axis1=1, axis2=2).T.copy()
        pivots *= scale
        stable = np.isfinite(pivots).all(axis=0) & (pivots.min(axis=0) > 1e-5 * pivots.max(axis=0))
    except np.linalg.LinAlgError:  # one of the stack is not positive definite: all by pseudo-inverse
        stable = np.zeros(len(gram), dtype=bool)
    coef = np.empty_like(moment)
    if stable.all():  # the usual case: nothing copied out of the stack
        coef = _cholesky_solve(factor, gram, moment)
    elif stable.any():
        coef[stable] = _cholesky_solve(factor[stable], gram[stable], moment[stable])
    if not stable.all():
        rest = scale.T[~stable]
        scaled = gram[~stable] * (rest[:, :, None] * rest[:, None, :])
        coef[~stable] = rest * (np.linalg.pinv(scaled, hermitian=True) @ (moment[~stable] * rest)[..., None])[..., 0]
    return coef.reshape(*lead, d)


def rss(gram: np.ndarray, moment: np.ndarray, total: float | np.ndarray) -> np.ndarray:
    """The residual sums of squares of least squares with these gram matrices (..., d, d) and moment vectors (..., d),
    the target's sum of squares ``total``: stacked, one per leading index (:func:`solve`)."""
    return total - np.einsum("...d,...d->...", moment, solve(gram, moment))
