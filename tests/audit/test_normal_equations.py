"""Least squares on stacks of small normal equations, against numpy's least squares one system at a time."""

import numpy as np

from acgate.audit import normal_equations


def test_stacked_residual_sums_are_least_squares_whatever_the_rank():
    """The permutations are refitted as one stack: each residual sum of squares is numpy's least squares on its
    own, for well-conditioned grams (solved directly) and for a gram with two identical columns (pseudo-inverse)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(5, 40, 6))
    X[4, :, 5] = X[4, :, 4]  # collinear: the gram is singular
    y = rng.normal(size=(5, 40))
    grams, moments, totals = X.transpose(0, 2, 1) @ X, np.einsum("bsd,bs->bd", X, y), np.sum(y**2, axis=1)
    found = normal_equations.rss(grams, moments, totals)
    expected = [np.sum((y[b] - X[b] @ np.linalg.lstsq(X[b], y[b], rcond=None)[0]) ** 2) for b in range(5)]
    assert np.allclose(found, expected, rtol=1e-9)
    one = normal_equations.rss(grams[0], moments[0], totals[0])  # one gram, no stack
    assert np.isclose(one, expected[0], rtol=1e-9)


def test_long_stacks_of_small_grams_are_least_squares_whatever_the_rank():
    """A long stack of small grams (the entities' scales of every bootstrap draw) is factorised and solved a column
    of the whole stack at a time: each fit is still numpy's least squares on its own, for well-conditioned grams and
    for singular ones (two identical columns, a column of zeros), which fall back to the pseudo-inverse alone."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(1600, 12, 3))
    X[7, :, 2] = X[7, :, 1]
    X[8, :, 0] = 0.0
    y = rng.normal(size=(1600, 12))
    found = normal_equations.solve(X.transpose(0, 2, 1) @ X, np.einsum("bsd,bs->bd", X, y))
    expected = np.stack([np.linalg.lstsq(X[b], y[b], rcond=None)[0] for b in range(len(X))])
    assert np.allclose(np.einsum("bsd,bd->bs", X, found), np.einsum("bsd,bd->bs", X, expected), rtol=1e-9,
                       atol=1e-12)
    assert np.allclose(found[:7], expected[:7], rtol=1e-9)  # full rank: the one solution
