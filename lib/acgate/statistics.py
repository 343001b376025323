"""The tests behind the audit's verdicts: permutation, Wilcoxon, Fisher, Holm, the entity block bootstrap, the
lag-free reference distribution for stratifier alignment, joint circularity, seed-to-seed agreement and Pesaran's
test of cross-sectional dependence.

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
    """1-based average ranks along an axis, the numbers of ``scipy.stats.rankdata(values, axis=axis)``.

    Tied values share the mean of their positions; every element of a slice (the values along ``axis``, the other
    indices fixed) that holds a NaN is NaN. The same numbers as scipy's (ranks are whole or half numbers, exact in
    float64; a test compares), in numpy alone: scipy's call costs about 1 ms whatever the size, and an audit ranks
    thousands of small vectors.

    Parameters
    ----------
    values : array_like of float, any shape
        The values to rank; converted to float64.
    axis : int, default 0
        The axis to rank along: each slice along it is ranked on its own.

    Returns
    -------
    ndarray of float64, the shape of ``values``
        Ranks 1 to n along ``axis`` (n its length); NaN across every slice that holds a NaN. An empty input comes back
        empty.
    """
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
    """Spearman's rank correlation of two vectors, the number of ``scipy.stats.spearmanr(a, b).statistic``.

    The Pearson correlation (``np.corrcoef``, as scipy takes it) of their average ranks (:func:`average_ranks`),
    without the p-value and scipy's per-call cost.

    Parameters
    ----------
    a, b : (N,) array of float
        The two variables, paired by position.

    Returns
    -------
    float
        rho, in [-1, 1]; NaN when either vector holds a NaN or is constant (scipy warns there; the callers here check
        first).
    """
    ranks = np.ascontiguousarray(average_ranks(np.column_stack((a, b)), axis=0))
    if np.isnan(ranks).any() or np.ptp(ranks[:, 0]) == 0 or np.ptp(ranks[:, 1]) == 0:
        return float("nan")
    return float(np.corrcoef(ranks, rowvar=False)[1, 0])


def _centred_ranks(values: np.ndarray) -> np.ndarray:
    r = average_ranks(values)
    r = r - r.mean()
    return r / np.sqrt(np.sum(r**2))


def _require_values(kstar: np.ndarray, stratifier: np.ndarray) -> None:
    """A NaN would give rho NaN, which no shuffle reaches, so p would sit at its floor 1/(B + 1): refuse it."""
    if not (np.isfinite(kstar).all() and np.isfinite(stratifier).all()):
        raise ValueError("k* or the stratifier holds NaN (or inf): pass only the entities that have both, i.e. drop "
                         "the entities that lack either")


def permutation_spearman(kstar: np.ndarray, stratifier: np.ndarray, permutations: int,
                         rng: np.random.Generator) -> tuple[float, float]:
    """Spearman's rho of k* and a stratifier, and its entity-label permutation p-value.

    The null shuffles the stratifier's values across entities B times; the p-value is two-sided and carries the +1 of a
    valid Monte Carlo p, so it is at least 1/(B + 1). Both numbers are NaN when either variable is constant.

    Parameters
    ----------
    kstar : (N,) array of float
        k* per entity, in lags; no NaN (the callers pass only the entities that have both values).
    stratifier : (N,) array of float
        The stratifier per entity, in the same entity order; no NaN.
    permutations : int
        B, the number of shuffles (``audit.permutations`` in the audit).
    rng : numpy.random.Generator
        Draws the shuffles; it is not used when either variable is constant.

    Returns
    -------
    rho : float
        Spearman's rho of ``kstar`` and ``stratifier`` (the Pearson correlation of their average ranks).
    p : float
        The permutation p-value (1 + #{b : |rho_b| >= |rho|}) / (B + 1), rho_b the rho of the b-th shuffle; a |rho_b|
        within ``TIE_TOLERANCE`` below |rho| counts as reaching it.

    Raises
    ------
    ValueError
        When ``kstar`` or ``stratifier`` holds NaN or inf.
    """
    _require_values(kstar, stratifier)
    if np.ptp(kstar) == 0 or np.ptp(stratifier) == 0:
        return float("nan"), float("nan")
    k, s = _centred_ranks(kstar), _centred_ranks(stratifier)  # Spearman = Pearson of (average) ranks
    rho = float(k @ s)
    shuffled = rng.permuted(np.broadcast_to(s, (permutations, len(s))), axis=1)  # (B, N)
    null = shuffled @ k
    exceed = int(np.sum(np.abs(null) >= abs(rho) - TIE_TOLERANCE))
    return rho, (1 + exceed) / (permutations + 1)


def whitened_scores(values: np.ndarray) -> np.ndarray:
    """(N, r) the orthonormal scores of the r independent dimensions of ``values`` (N, M) once centred: the left
    singular vectors whose singular values exceed 1e-8 of the largest (a repeated or constant column adds none)."""
    scores, spread, _ = np.linalg.svd(values - values.mean(axis=0), full_matrices=False)
    return scores[:, spread > 1e-8 * spread[0]]


def lag_free_p(kstar: np.ndarray, stratifier: np.ndarray, proxies: np.ndarray, draws: int,
               rng: np.random.Generator, references: dict | None = None) -> tuple[float, float]:
    """Alignment of k* with a stratifier beyond what the proxies give any k*: the learned k* against lag-free k*,
    random directions of what the proxies measure.

    k* of a proxy-conditioned model is a function of the proxies by construction, so a stratifier that the proxies
    predict aligns with any k* that moves with them. The question the proxies leave open is which of their directions
    orders the lags. The reference distribution is |Spearman| of the stratifier with B lag-free k*: random directions
    of the proxies' whitened scores (k*_b = U w_b, U the N x r left singular vectors of the centred, standardised
    proxies with singular values above 1e-8 of the largest, w_b uniform on the unit sphere of R^r), so that each
    independent dimension the proxies measure is equally likely, however many proxies repeat it (a duplicated proxy
    changes nothing). The p-value asks whether the learned k* follows the stratifier's direction more closely than a
    random one. With r = 1 (one proxy, or proxies that are one another's multiples) every lag-free k* orders the
    entities as the proxies do, and p is 1: the stratifier cannot be told from the proxies. Both numbers are NaN when
    ``kstar`` or ``stratifier`` is constant, or every proxy is (there is no lag-free k* then).

    Parameters
    ----------
    kstar : (N,) array of float
        The learned k* per entity, in lags; no NaN.
    stratifier : (N,) array of float
        The stratifier per entity, in the same entity order; no NaN.
    proxies : (N, M) array of float
        The M proxies per entity, in the same entity order; no NaN.
    draws : int
        B, the number of random directions (``audit.permutations`` in the audit).
    rng : numpy.random.Generator
        Draws the (M, B) standard normal directions (the first r rows are used). They are drawn in every call where
        neither ``kstar`` nor ``stratifier`` is constant and some proxy varies, cached or not, so ``rng`` ends where it
        would without ``references``.
    references : dict or None, default None
        A cache the caller keeps between calls (None: no cache). It holds the centred, normalised ranks of the (N, B)
        projections, keyed by the standardised proxies and the directions drawn: calls that draw the same directions
        for the same proxies (the methods of one seed in an audit, whose generators are seeded alike) rank the
        projections once. The numbers are the same either way.

    Returns
    -------
    median_abs_rho : float
        The median of |rho_b| over the B lag-free k*.
    p : float
        (1 + #{b : |rho_b| >= |rho|}) / (B + 1), rho the Spearman rho of ``kstar`` and ``stratifier``; a |rho_b| within
        ``TIE_TOLERANCE`` below |rho| counts as reaching it.

    Raises
    ------
    ValueError
        When ``kstar`` or ``stratifier`` holds NaN or inf.
    """
    _require_values(kstar, stratifier)
    spread = proxies.std(axis=0)
    if np.ptp(kstar) == 0 or np.ptp(stratifier) == 0 or not (spread > 0).any():  # no proxy varies: no lag-free k*
        return float("nan"), float("nan")
    standard = (proxies - proxies.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
    directions = rng.normal(size=(proxies.shape[1], draws))
    key = (standard.shape, standard.tobytes(), directions.tobytes())
    ranks = None if references is None else references.get(key)
    if ranks is None:
        scores = whitened_scores(standard)
        chosen = directions[:scores.shape[1]]
        projections = scores @ (chosen / np.linalg.norm(chosen, axis=0))  # (N, B)
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
    """Fisher's combination of independent p-values (``scipy.stats.combine_pvalues``, method "fisher").

    Parameters
    ----------
    pvalues : (n,) array_like of float
        The p-values (an array or a Series); NaN and infinite entries are left out.

    Returns
    -------
    float
        The combined p-value: the upper tail of -2 sum(log p) in the chi-squared distribution with 2n degrees of
        freedom, n the number of finite p-values; NaN when there are none.
    """
    from scipy import stats

    pvalues = np.asarray(pvalues, dtype=float)
    pvalues = pvalues[np.isfinite(pvalues)]
    return float(stats.combine_pvalues(pvalues, method="fisher").pvalue) if len(pvalues) else float("nan")


def paired_wilcoxon(values: pd.Series, reference: pd.Series) -> dict:
    """Two-sided paired Wilcoxon signed-rank test (scipy) of ``values - reference`` over the seeds both have.

    The pairs are matched on the index (the seeds); a seed that either Series lacks or holds NaN for is left out. There
    is no test (W and p NaN) where there are no pairs, every difference is zero, or every pair has the same
    difference (:func:`unreplicated`: two deterministic fits on one shared panel, whose seeds replicate nothing).

    Parameters
    ----------
    values : pandas.Series of float
        One metric of a method, indexed by seed.
    reference : pandas.Series of float
        The same metric of the reference method, indexed by seed.

    Returns
    -------
    dict
        - ``n_pairs`` (int): the seeds both have;
        - ``nonzero_pairs`` (int): the pairs that differ (zero differences carry no rank in the test);
        - ``mean_diff``, ``median_diff`` (float): of the differences, method minus reference; NaN without pairs;
        - ``hodges_lehmann`` (float): the median of the Walsh averages of the differences, zeros included
          (:func:`hodges_lehmann`), the estimate that goes with the test;
        - ``W`` (float): scipy's statistic, min(W+, W-); NaN without a test;
        - ``p`` (float): the two-sided p-value; NaN without a test;
        - ``note`` (str): why there is no test ("no common seeds", "identical on every seed", or the same difference
          on every seed); empty when there is one.
    """
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
    """Whether every pair differs by the same amount, so that the pairs are no replicates.

    Two deterministic fits on one shared panel differ by the same amount in every seed: a test over such pairs
    measures nothing.

    Parameters
    ----------
    diff : (n,) array_like of float
        The paired differences, one per seed.

    Returns
    -------
    bool
        True when there are at least two differences and all are equal (all zero included); False for fewer than two,
        or when one is NaN.
    """
    diff = np.asarray(diff, dtype=float)
    return len(diff) > 1 and np.ptp(diff) == 0


def hodges_lehmann(diff: np.ndarray) -> float:
    """The Hodges-Lehmann estimate of the centre of paired differences: the median of their Walsh averages.

    Parameters
    ----------
    diff : (n,) ndarray of float
        The differences; a NaN makes the estimate NaN (the callers drop them first).

    Returns
    -------
    float
        The median of (d_i + d_j) / 2 over i <= j (each d_i with itself included); NaN for no differences.
    """
    if len(diff) == 0:
        return float("nan")
    i, j = np.triu_indices(len(diff))
    return float(np.median((diff[i] + diff[j]) / 2))


def wilcoxon_greater(diff: np.ndarray) -> float:
    """One-sided Wilcoxon signed-rank p-value for H1: the differences are shifted above 0 (scipy).

    Parameters
    ----------
    diff : (n,) array_like of float
        The paired differences (in the audit, comparator minus reference per seed); NaN and infinite entries are left
        out, and the test drops zeros.

    Returns
    -------
    float
        The p-value of ``scipy.stats.wilcoxon(diff, alternative="greater")``; 1.0 when no difference is non-zero (or
        none is left).
    """
    from scipy import stats

    diff = np.asarray(diff, dtype=float)
    diff = diff[np.isfinite(diff)]
    if not np.any(diff != 0):
        return 1.0
    return float(stats.wilcoxon(diff, alternative="greater").pvalue)


def smallest_wilcoxon_p(pairs: int, two_sided: bool = False) -> float:
    """The smallest p a Wilcoxon signed-rank test of ``pairs`` non-zero differences can give.

    Parameters
    ----------
    pairs : int
        n, the number of non-zero differences.
    two_sided : bool, default False
        Whether the test is two-sided.

    Returns
    -------
    float
        1 / 2^n one-sided, twice that two-sided, at most 1 (1 for n = 0).
    """
    return min(1.0, (2 if two_sided else 1) * 0.5**pairs)


def entity_bootstrap(diff_by_entity: np.ndarray, draws: int, rng: np.random.Generator) -> tuple[float, float]:
    """One-sided p-values that the mean of entity-level differences is above 0 and below 0, by an entity bootstrap.

    Entities are resampled with replacement B times, each entity a block: its seeds and time steps travel together,
    averaged into its one difference. The bootstrap distribution of the centred mean, mean_b - mean, stands in for
    the null. Both p-values are NaN for fewer than two entities.

    Parameters
    ----------
    diff_by_entity : (E,) array_like of float
        One difference per entity (in the audit: comparator minus reference test MSE, averaged over seeds); NaN and
        infinite entries are left out.
    draws : int
        B, the number of bootstrap resamples (``audit.bootstrap`` in the audit).
    rng : numpy.random.Generator
        Draws the resamples; it is not used for fewer than two entities.

    Returns
    -------
    p_above : float
        (1 + #{b : mean_b - mean >= mean}) / (B + 1): small when the mean is above 0.
    p_below : float
        (1 + #{b : mean_b - mean <= mean}) / (B + 1): small when the mean is below 0.
        In both, a value within ``TIE_TOLERANCE`` of the bound counts.
    """
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
    """Holm's step-down adjusted p-values, which hold the family-wise error rate.

    With the m finite p-values sorted, p_(1) <= ... <= p_(m), the i-th adjusted value is
    max over j <= i of min(1, (m - j + 1) p_(j)).

    Parameters
    ----------
    pvalues : dict
        The p-value of each hypothesis (keys: stratifier or comparator names, or row labels); NaN and infinite values
        are left out of the family.

    Returns
    -------
    dict
        The adjusted p-values under the same keys; NaN for the keys left out.
    """
    finite = sorted(((p, k) for k, p in pvalues.items() if np.isfinite(p)))
    adjusted, running = {k: float("nan") for k in pvalues}, 0.0
    for i, (p, k) in enumerate(finite):
        running = max(running, min(1.0, (len(finite) - i) * p))
        adjusted[k] = running
    return adjusted


def rank_multiple_correlation(target: np.ndarray, predictors: np.ndarray) -> float:
    """Multiple correlation R of the ranks of ``target`` with the ranks of all ``predictors`` jointly.

    Least squares, with an intercept, of the target's average ranks on each predictor's average ranks: how much of the
    target's ordering the predictors carry together. The audit calls a stratifier jointly circular when R with the
    proxies reaches ``audit.circular_threshold`` in some seed.

    Parameters
    ----------
    target : (N,) array of float
        The variable to explain (in the audit, a stratifier per entity); no NaN.
    predictors : (N, M) array of float
        The predictors (in the audit, the proxies per entity), in the same order; no NaN.

    Returns
    -------
    float
        R = sqrt(max(0, 1 - RSS / TSS)), in [0, 1]; NaN when the target is constant.
    """
    y = average_ranks(target)
    design = np.column_stack([np.ones(len(y)), average_ranks(predictors, axis=0)])
    fitted = design @ np.linalg.lstsq(design, y, rcond=None)[0]
    total = np.sum((y - y.mean()) ** 2)
    return float(np.sqrt(max(0.0, 1 - np.sum((y - fitted) ** 2) / total))) if total > 0 else float("nan")


def seed_agreement(kstar: pd.DataFrame) -> dict[str, float]:
    """Seed-to-seed agreement of an entity ordering: Spearman's rho of k* between every pair of seeds.

    Each pair is compared on the entities both seeds have (no NaN in either); a pair with fewer than three such
    entities, or on which either seed is constant, is left out.

    Parameters
    ----------
    kstar : pandas.DataFrame
        k* with one row per entity and one column per seed, NaN where a seed lacks an entity. An empty frame (what the
        audit passes where seeds do not share entities) has no pairs.

    Returns
    -------
    dict
        ``seed_pairs`` (int): the number of pairs compared; ``median_rho`` and ``min_rho`` (float): the median and the
        smallest rho over them; ``share_negative`` (float): the share of pairs with rho < 0. The three floats are NaN,
        and ``seed_pairs`` 0, when no pair is compared: fewer than two seeds, or every pair left out as above.
    """
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
    """Exact (Clopper-Pearson) confidence interval of a binomial proportion (``scipy.stats.binomtest``).

    Parameters
    ----------
    successes : int
        k, the number of successes, 0 <= k <= n.
    trials : int
        n, the number of trials; at least 1 (scipy raises ValueError otherwise; the callers check).
    level : float, default 0.95
        The confidence level.

    Returns
    -------
    low : float
        The lower bound, in [0, 1].
    high : float
        The upper bound, in [0, 1].
    """
    from scipy import stats

    interval = stats.binomtest(successes, trials).proportion_ci(confidence_level=level, method="exact")
    return float(interval.low), float(interval.high)


def pesaran_cd(residual: np.ndarray, observed: np.ndarray) -> dict[str, float]:
    """Pesaran's test of cross-sectional dependence in a panel's residuals, for unbalanced panels (Pesaran 2015):

        CD = sqrt(2 / (N (N - 1))) sum_{i<j} sqrt(T_ij) rho_ij,

    rho_ij the correlation of entities i and j over the T_ij steps both observe, each series centred on its mean
    over those steps; pairs with fewer than 3 common steps, or a constant series there, are left out (N counts the
    entities of the pairs kept). Under no cross-sectional dependence CD is about N(0, 1): common shocks (recessions
    shared by countries) make it large and positive.

    Parameters
    ----------
    residual : (N, T) array
        The residuals; values outside ``observed`` are ignored.
    observed : (N, T) bool array
        The steps observed for each entity.

    Returns
    -------
    dict
        ``cd``, its two-sided normal ``p``, ``pairs`` kept and ``mean_rho`` (their mean correlation); NaN without a
        pair.
    """
    from scipy import stats

    values = np.where(observed, residual, 0.0).astype(float)
    mask = observed.astype(float)
    common = mask @ mask.T  # T_ij
    sums = values @ mask.T  # sum over the common steps of i's values (row i, column j)
    squares = (values**2) @ mask.T
    cross = values @ values.T
    count = np.maximum(common, 1)
    cov = cross - sums * sums.T / count
    var_i, var_j = squares - sums**2 / count, (squares - sums**2 / count).T
    upper = np.triu(np.ones_like(common, dtype=bool), k=1)
    kept = upper & (common >= 3) & (var_i > 1e-12 * (1 + squares)) & (var_j > 1e-12 * (1 + squares.T))
    if not kept.any():
        return {"cd": float("nan"), "p": float("nan"), "pairs": 0, "mean_rho": float("nan")}
    rho = cov[kept] / np.sqrt(var_i[kept] * var_j[kept])
    entities = len(np.union1d(*np.nonzero(kept)))
    cd = float(np.sqrt(2 / (entities * (entities - 1))) * np.sum(np.sqrt(common[kept]) * rho))
    return {"cd": cd, "p": float(2 * stats.norm.sf(abs(cd))), "pairs": int(kept.sum()), "mean_rho": float(rho.mean())}


def proxy_shocks(residual: np.ndarray, observed: np.ndarray, proxies: np.ndarray, permutations: int,
                 rng: np.random.Generator) -> dict[str, float]:
    """Do a panel's shocks follow its proxies, step by step? The mean over steps of R², the share of each step's
    cross-section of residuals (centred over the entities observed then) that least squares on the proxies explains,
    against the same statistic with the proxies' rows permuted across entities (one permutation for every step).

    Shocks whose cross-section follows the proxies (a recession that hits rich countries harder, a boom that lifts
    poor ones) pass for lag curves that the proxies moderate. The test does not tell a new pattern each step from one
    factor whose loadings follow the proxies, nor from lag curves the fit misses. Steps with fewer than Q + 3 observed
    entities are left out.

    Parameters
    ----------
    residual : (N, S) array
        The residuals; values outside ``observed`` are ignored.
    observed : (N, S) bool array
        The steps observed for each entity.
    proxies : (N, Q) array
        What may pattern the shocks (e.g. the proxies and their squares), without a constant column.
    permutations : int
        B, the permutations of the proxies' rows.
    rng : numpy.random.Generator
        Draws the permutations.

    Returns
    -------
    dict
        ``r2`` (the mean R² over the steps kept), ``r2_null`` (its mean over the permutations), ``p``
        ((1 + #{permuted >= observed}) / (B + 1)) and ``steps`` kept; NaN (steps 0) without a step to read.
    """
    proxies = np.asarray(proxies, dtype=float).reshape(len(residual), -1)
    steps = [s for s in range(residual.shape[1]) if observed[:, s].sum() >= proxies.shape[1] + 3]
    if not steps:
        return {"r2": float("nan"), "r2_null": float("nan"), "p": float("nan"), "steps": 0}

    groups: dict[bytes, list[int]] = {}  # steps that observe the same entities share one fit per permutation
    for s in steps:
        groups.setdefault(observed[:, s].tobytes(), []).append(s)
    parts = []
    for columns in groups.values():
        on = observed[:, columns[0]]
        y = residual[np.ix_(on, columns)]
        y = y - y.mean(axis=0)
        total = np.sum(y**2, axis=0)
        parts.append((on, y[:, total > 0], total[total > 0]))

    def mean_r2(rows: np.ndarray) -> float:
        found = []
        for on, y, total in parts:
            x = proxies[rows][on]
            x = x - x.mean(axis=0)
            fitted = x @ np.linalg.lstsq(x, y, rcond=None)[0]
            found.append(np.sum(fitted**2, axis=0) / total)
        values = np.concatenate(found)
        return float(values.mean()) if len(values) else float("nan")

    n = len(residual)
    observed_r2 = mean_r2(np.arange(n))
    if not np.isfinite(observed_r2):  # no step with variance, or a missing value: nothing to read
        return {"r2": float("nan"), "r2_null": float("nan"), "p": float("nan"), "steps": 0}
    permuted = np.array([mean_r2(rng.permutation(n)) for _ in range(permutations)])
    return {"r2": observed_r2, "r2_null": float(np.mean(permuted)),
            "p": float((1 + np.sum(permuted >= observed_r2 * (1 - 1e-12))) / (permutations + 1)), "steps": len(steps)}


def format_p(p: float, draws: int | None = None) -> str:
    """A p-value for print, to two significant digits.

    Trailing zeros are kept (0.40, 1.0), and very small values print in exponent form (1.0e-05). A resampling p at its
    floor 1/(B + 1) prints as such: "<= 1/2001" for B = 2000.

    Parameters
    ----------
    p : float
        The p-value.
    draws : int or None, default None
        B, the permutations or bootstrap draws behind ``p``; None (or 0) for a p without that floor.

    Returns
    -------
    str
        "n/a" for a NaN or infinite p; "<= 1/(B+1)", the number filled in, when ``draws`` is given and p is at most
        1/(B + 1) (within ``TIE_TOLERANCE``); otherwise ``f"{p:#.2g}"``.
    """
    if not np.isfinite(p):
        return "n/a"
    if draws and p <= 1 / (draws + 1) + TIE_TOLERANCE:
        return f"<= 1/{draws + 1}"
    return f"{p:#.2g}"


def p_text(p: float, draws: int | None = None) -> str:
    """A p-value as a figure prints it: "p = 0.0085", or at a resampling test's floor "p ≤ 1/2001".

    The digits are those of :func:`format_p`, so that every figure has one notation.

    Parameters
    ----------
    p : float
        The p-value.
    draws : int or None, default None
        B of a resampling test, as in :func:`format_p`; None for a p without that floor.

    Returns
    -------
    str
        "p ≤ 1/(B+1)", the number filled in, at the floor; otherwise "p = " and :func:`format_p`'s text ("p = n/a" for a
        NaN p).
    """
    formatted = format_p(p, draws)
    return f"p ≤ {formatted.removeprefix('<= ')}" if formatted.startswith("<=") else f"p = {formatted}"
