"""The tests behind the audit's verdicts: permutation, Wilcoxon, Fisher, Holm, the entity block bootstrap, the
lag-free reference distribution for stratifier alignment, joint circularity and seed-to-seed agreement.

Each function is small and checked in ``tests/test_statistics.py`` against an independent computation (scipy, an
exact enumeration or a hand-worked example). p-values of resampling tests carry the +1 of a valid Monte Carlo p,
so the smallest p a test with B draws can give is 1/(B + 1); :func:`format_p` prints that floor as such.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

# scipy.stats is imported in the functions that call it: its import takes about 0.6 s, and a training process (whose
# L3 recovery takes spearman from here) calls none of them

TIE_TOLERANCE = 1e-12  # |statistic| ties with the observed one count as exceeding it


def average_ranks(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """``scipy.stats.rankdata(values, axis=axis)``: 1-based ranks along ``axis``, tied values sharing the mean of
    their positions, NaN for every element of a slice that holds a NaN. The same numbers (ranks are whole or half
    numbers, exact in float64; a test compares), in numpy alone: scipy's call costs about 1 ms whatever the size,
    and an audit ranks thousands of small vectors."""
    x = np.ascontiguousarray(np.moveaxis(np.asarray(values, dtype=float), axis, -1))
    if x.size == 0:
        return np.moveaxis(x, -1, axis)
    order = np.argsort(x, axis=-1)  # the order among equal values does not matter: they share one rank
    ordered = np.take_along_axis(x, order, axis=-1)
    position = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    differs = ordered[..., 1:] != ordered[..., :-1]  # from the value before it
    if differs.all():  # no ties: the ranks are the positions
        in_order = position + 1.0
    else:
        starts, ends = np.ones(x.shape, dtype=bool), np.ones(x.shape, dtype=bool)  # of the runs of equal values
        starts[..., 1:], ends[..., :-1] = differs, differs
        first = np.maximum.accumulate(np.where(starts, position, 0), axis=-1)  # each value's run: its first position
        last = np.minimum.accumulate(np.where(ends, position, x.shape[-1])[..., ::-1], axis=-1)[..., ::-1]
        in_order = (first + last) / 2 + 1  # whole or half numbers: exact
    ranks = np.empty(x.shape)
    np.put_along_axis(ranks, order, in_order, axis=-1)
    ranks[np.isnan(x).any(axis=-1)] = np.nan
    return np.moveaxis(ranks, -1, axis)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """``scipy.stats.spearmanr(a, b).statistic`` for two vectors: the Pearson correlation (``np.corrcoef``, as scipy
    takes it) of their average ranks, without the p-value and scipy's per-call cost. NaN when either holds a NaN
    or is constant (scipy warns there; the callers here check first)."""
    ranks = np.ascontiguousarray(average_ranks(np.column_stack((a, b)), axis=0))
    if np.isnan(ranks).any() or np.ptp(ranks[:, 0]) == 0 or np.ptp(ranks[:, 1]) == 0:
        return float("nan")
    return float(np.corrcoef(ranks, rowvar=False)[1, 0])


def _centred_ranks(values: np.ndarray) -> np.ndarray:
    r = average_ranks(values)
    r = r - r.mean()
    return r / np.sqrt(np.sum(r**2))


def permutation_spearman(kstar: np.ndarray, stratifier: np.ndarray, permutations: int,
                         rng: np.random.Generator) -> tuple[float, float]:
    """Spearman rho of k* (N,) and a stratifier (N,), and its entity-label permutation p-value
    p = (1 + #{b : |rho_b| >= |rho|}) / (B + 1), with the stratifier's labels shuffled B times.
    Both are NaN when either variable is constant."""
    if np.ptp(kstar) == 0 or np.ptp(stratifier) == 0:
        return float("nan"), float("nan")
    k, s = _centred_ranks(kstar), _centred_ranks(stratifier)  # Spearman = Pearson of (average) ranks
    rho = float(k @ s)
    shuffled = rng.permuted(np.broadcast_to(s, (permutations, len(s))), axis=1)  # (B, N)
    null = shuffled @ k
    exceed = int(np.sum(np.abs(null) >= abs(rho) - TIE_TOLERANCE))
    return rho, (1 + exceed) / (permutations + 1)


def lag_free_p(kstar: np.ndarray, stratifier: np.ndarray, proxies: np.ndarray, draws: int,
               rng: np.random.Generator, references: dict | None = None) -> tuple[float, float]:
    """Alignment of k* (N,) with a stratifier (N,) against lag-free k*: fixed random functions of the proxies.

    k* of a proxy-conditioned gate is a function of the proxies (N, M) by construction, so a stratifier that the
    proxies predict aligns with almost any such function. The reference distribution is |Spearman| of the
    stratifier with B random directions in the standardised proxy space (w uniform on the unit sphere, k*_b =
    P_std w); p = (1 + #{b : |rho_b| >= |rho|}) / (B + 1) asks whether the learned k* is more aligned than a k*
    that knows nothing about lags. Returns (median |rho_b|, p); NaN when k* or the stratifier is constant.

    ``references``: a dict the caller keeps between calls, which then holds the ranked projections per
    (proxies, directions drawn): calls that draw the same directions for the same proxies (the methods of one seed
    in an audit, whose generators are seeded alike) rank the (N, B) projections once. The same numbers either way;
    the directions are drawn in every call, so ``rng`` ends where it would without it."""
    if np.ptp(kstar) == 0 or np.ptp(stratifier) == 0:
        return float("nan"), float("nan")
    spread = proxies.std(axis=0)
    standard = (proxies - proxies.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
    directions = rng.normal(size=(proxies.shape[1], draws))
    key = (standard.shape, standard.tobytes(), directions.tobytes())
    ranks = None if references is None else references.get(key)
    if ranks is None:
        projections = standard @ (directions / np.linalg.norm(directions, axis=0))  # (N, B)
        ranks = average_ranks(projections, axis=0)
        ranks -= ranks.mean(axis=0)
        ranks /= np.sqrt(np.sum(ranks**2, axis=0))
        if references is not None:
            references[key] = ranks
    s = _centred_ranks(stratifier)
    null = np.abs(s @ ranks)
    rho = abs(float(_centred_ranks(kstar) @ s))
    return float(np.median(null)), (1 + int(np.sum(null >= rho - TIE_TOLERANCE))) / (draws + 1)


def fisher_combined(pvalues: np.ndarray) -> float:
    """Fisher's combination of independent p-values (scipy); NaN when there are none."""
    from scipy import stats

    pvalues = np.asarray(pvalues, dtype=float)
    pvalues = pvalues[np.isfinite(pvalues)]
    return float(stats.combine_pvalues(pvalues, method="fisher").pvalue) if len(pvalues) else float("nan")


def paired_wilcoxon(values: pd.Series, reference: pd.Series) -> dict:
    """Two-sided paired Wilcoxon signed-rank test (scipy) of ``values - reference`` over the seeds (index)
    both have. W is scipy's statistic, min(W+, W-); differences are method minus reference; ``nonzero_pairs``
    counts the pairs that differ (zero differences carry no rank); ``hodges_lehmann`` is the median of the
    Walsh averages of the differences, the estimate that goes with the test. No p where every seed has the same
    difference: two deterministic fits on one shared panel, whose seeds replicate nothing."""
    from scipy import stats

    both = pd.concat({"m": values, "r": reference}, axis=1).dropna()
    diff = both.m - both.r
    row = {"n_pairs": len(both), "nonzero_pairs": int((diff != 0).sum()),
           "mean_diff": diff.mean() if len(both) else np.nan, "median_diff": diff.median() if len(both) else np.nan,
           "hodges_lehmann": hodges_lehmann(diff.to_numpy()), "W": np.nan, "p": np.nan, "note": ""}
    if len(both) == 0:
        row["note"] = "no common seeds"
    elif (diff == 0).all():
        row["note"] = "identical on every seed"
    elif unreplicated(diff.to_numpy()):
        row["note"] = "the same difference on every seed (deterministic fits on one panel): the seeds replicate nothing"
    else:
        test = stats.wilcoxon(both.m, both.r)
        row.update(W=float(test.statistic), p=float(test.pvalue))
    return row


def unreplicated(diff: np.ndarray) -> bool:
    """True when every pair differs by the same amount (two deterministic fits on one shared panel): the pairs are
    then no replicates, and a test over them measures nothing."""
    diff = np.asarray(diff, dtype=float)
    return len(diff) > 1 and np.ptp(diff) == 0


def hodges_lehmann(diff: np.ndarray) -> float:
    """Median of the Walsh averages (d_i + d_j) / 2, i <= j; NaN for no differences."""
    if len(diff) == 0:
        return float("nan")
    i, j = np.triu_indices(len(diff))
    return float(np.median((diff[i] + diff[j]) / 2))


def wilcoxon_greater(diff: np.ndarray) -> float:
    """One-sided Wilcoxon signed-rank p for H1: the differences are shifted above 0 (scipy; zeros dropped).
    1 when no difference is non-zero."""
    from scipy import stats

    diff = np.asarray(diff, dtype=float)
    diff = diff[np.isfinite(diff)]
    if not np.any(diff != 0):
        return 1.0
    return float(stats.wilcoxon(diff, alternative="greater").pvalue)


def smallest_wilcoxon_p(pairs: int, two_sided: bool = False) -> float:
    """The smallest p a Wilcoxon test of ``pairs`` non-zero differences can give: 1 / 2^pairs one-sided, twice that
    (at most 1) two-sided."""
    return min(1.0, (2 if two_sided else 1) * 0.5**pairs)


def entity_bootstrap(diff_by_entity: np.ndarray, draws: int, rng: np.random.Generator) -> tuple[float, float]:
    """One-sided p-values that the mean of the entity-level differences (E,) is above 0 and below 0, from B
    bootstrap resamples of entities (each entity a block: its seeds and time steps travel together). The bootstrap
    distribution of the centred mean stands in for the null: p_above = (1 + #{mean_b - mean >= mean}) / (B + 1),
    p_below likewise with <=. NaN for fewer than two entities."""
    diff = np.asarray(diff_by_entity, dtype=float)
    diff = diff[np.isfinite(diff)]
    if len(diff) < 2:
        return float("nan"), float("nan")
    mean = diff.mean()
    centred = diff[rng.integers(0, len(diff), size=(draws, len(diff)))].mean(axis=1) - mean
    above = (1 + int(np.sum(centred >= mean - TIE_TOLERANCE))) / (draws + 1)
    below = (1 + int(np.sum(centred <= mean + TIE_TOLERANCE))) / (draws + 1)
    return above, below


def holm(pvalues: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (family-wise error), NaN p-values left out of the family."""
    finite = sorted(((p, k) for k, p in pvalues.items() if np.isfinite(p)))
    adjusted, running = {k: float("nan") for k in pvalues}, 0.0
    for i, (p, k) in enumerate(finite):
        running = max(running, min(1.0, (len(finite) - i) * p))
        adjusted[k] = running
    return adjusted


def rank_multiple_correlation(target: np.ndarray, predictors: np.ndarray) -> float:
    """Multiple correlation R of the ranks of ``target`` (N,) with the ranks of all ``predictors`` (N, M) jointly
    (least squares with an intercept): how much of the target's ordering the predictors carry together."""
    y = average_ranks(target)
    design = np.column_stack([np.ones(len(y)), average_ranks(predictors, axis=0)])
    fitted = design @ np.linalg.lstsq(design, y, rcond=None)[0]
    total = np.sum((y - y.mean()) ** 2)
    return float(np.sqrt(max(0.0, 1 - np.sum((y - fitted) ** 2) / total))) if total > 0 else float("nan")


def seed_agreement(kstar: pd.DataFrame) -> dict[str, float]:
    """Seed-to-seed agreement of an entity ordering: ``kstar`` is entity x seed. Spearman of every pair of seeds
    on the entities both have; median, smallest and the share of negative pairs. NaN for fewer than two seeds or
    a constant seed."""
    rhos, values = [], kstar.to_numpy(dtype=float)
    for a, b in itertools.combinations(range(values.shape[1]), 2):
        both = values[~np.isnan(values[:, a]) & ~np.isnan(values[:, b])][:, [a, b]]
        if len(both) >= 3 and np.ptp(both[:, 0]) > 0 and np.ptp(both[:, 1]) > 0:
            rhos.append(spearman(both[:, 0], both[:, 1]))
    if not rhos:
        return {"seed_pairs": 0, "median_rho": float("nan"), "min_rho": float("nan"), "share_negative": float("nan")}
    rhos = np.array(rhos)
    return {"seed_pairs": len(rhos), "median_rho": float(np.median(rhos)), "min_rho": float(rhos.min()),
            "share_negative": float(np.mean(rhos < 0))}


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) confidence interval of a binomial proportion (scipy)."""
    from scipy import stats

    interval = stats.binomtest(successes, trials).proportion_ci(confidence_level=level, method="exact")
    return float(interval.low), float(interval.high)


def format_p(p: float, draws: int | None = None) -> str:
    """A p-value for print, to two significant digits (trailing zeros kept: 0.40, 1.0); a resampling p at its floor
    1/(B + 1) prints as '<= 1/(B+1)'."""
    if not np.isfinite(p):
        return "n/a"
    if draws and p <= 1 / (draws + 1) + TIE_TOLERANCE:
        return f"<= 1/{draws + 1}"
    return f"{p:#.2g}"


def p_text(p: float, draws: int | None = None) -> str:
    """A p-value as a figure prints it: "p = 0.0085", or at a resampling test's floor "p ≤ 1/2001" (the digits of
    :func:`format_p`; one notation in every figure)."""
    formatted = format_p(p, draws)
    return f"p ≤ {formatted.removeprefix('<= ')}" if formatted.startswith("<=") else f"p = {formatted}"
