"""The audit's statistics against independent computations: scipy, exact enumerations and hand-worked examples."""

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from acgate import statistics


def test_permutation_rho_is_scipy_spearman_with_ties():
    rng = np.random.default_rng(0)
    kstar = np.round(rng.normal(size=60), 1)  # ties
    strat = rng.integers(0, 5, 60).astype(float)  # many ties
    rho, _ = statistics.permutation_spearman(kstar, strat, 10, rng)
    assert rho == pytest.approx(stats.spearmanr(kstar, strat).statistic)


def test_permutation_p_matches_the_exact_permutation_distribution():
    kstar = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    strat = np.array([2.0, 1.0, 4.0, 3.0, 5.0])
    rho = stats.spearmanr(kstar, strat).statistic
    exact = np.mean([abs(stats.spearmanr(kstar, np.array(p)).statistic) >= abs(rho) - 1e-12
                     for p in itertools.permutations(strat)])  # all 120 relabellings
    B = 20000
    got_rho, p = statistics.permutation_spearman(kstar, strat, B, np.random.default_rng(1))
    assert got_rho == pytest.approx(rho)
    assert p == pytest.approx((1 + exact * B) / (B + 1), abs=0.01)


def test_permutation_p_has_the_plus_one():
    kstar = np.arange(200.0)
    _, p = statistics.permutation_spearman(kstar, kstar * 3, 99, np.random.default_rng(0))
    assert p == 1 / 100  # no relabelling of 200 entities reaches |rho| = 1; p is never 0
    assert np.isnan(statistics.permutation_spearman(np.ones(5), kstar[:5], 9, np.random.default_rng(0))[1])


def test_fisher_against_the_chi_square_formula():
    p = np.array([0.01, 0.2, 0.5, np.nan])
    finite = p[:3]
    expected = stats.chi2.sf(-2 * np.log(finite).sum(), df=2 * len(finite))
    assert statistics.fisher_combined(p) == pytest.approx(expected)
    assert np.isnan(statistics.fisher_combined(np.array([])))


def test_wilcoxon_sign_convention_and_hand_worked_p():
    seeds = pd.RangeIndex(6)
    ref = pd.Series([1.0, 1.0, 1.0, 1.0, 1.0, 1.0], index=seeds)
    worse = ref + pd.Series([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], index=seeds)
    row = statistics.paired_wilcoxon(worse, ref)
    # every difference positive: W = min(W+, W-) = 0; exact two-sided p = 2 / 2^6
    assert row["W"] == 0 and row["p"] == pytest.approx(2 / 64)
    assert row["mean_diff"] == pytest.approx(0.35) and row["median_diff"] == pytest.approx(0.35)
    mixed = ref + pd.Series([0.1, -0.2, 0.3, -0.4, 0.5, 0.6], index=seeds)
    # W+ = 1+3+5+6 = 15, W- = 2+4 = 6
    assert statistics.paired_wilcoxon(mixed, ref)["W"] == 6
    assert statistics.paired_wilcoxon(ref, ref)["note"] == "identical on every seed"
    partial = statistics.paired_wilcoxon(worse.drop([0, 1]), ref)
    assert partial["n_pairs"] == 4


    assert row["nonzero_pairs"] == 6 and row["hodges_lehmann"] == pytest.approx(0.35)


def test_hodges_lehmann_hand_worked():
    # Walsh averages of (1, 2, 6): 1, 1.5, 3.5, 2, 4, 6 -> sorted 1, 1.5, 2, 3.5, 4, 6 -> median 2.75
    assert statistics.hodges_lehmann(np.array([1.0, 2.0, 6.0])) == pytest.approx(2.75)
    assert np.isnan(statistics.hodges_lehmann(np.array([])))


def test_one_sided_wilcoxon_against_the_exact_distribution():
    diff = np.array([0.5, 1.2, -0.3, 2.0, 0.8])
    # exact: W+ over all 2^5 sign patterns of the ranks 1..5; observed W+ = 2+4+5+3 = 14 (rank 1 is negative)
    w_plus = sum(r for r, d in zip(stats.rankdata(np.abs(diff)), diff, strict=True) if d > 0)
    null = [sum(r for r, s in zip(range(1, 6), signs, strict=True) if s) for signs in
            itertools.product([0, 1], repeat=5)]
    assert statistics.wilcoxon_greater(diff) == pytest.approx(np.mean(np.array(null) >= w_plus))
    assert statistics.wilcoxon_greater(np.ones(5)) == pytest.approx(1 / 32) == statistics.smallest_wilcoxon_p(5)
    assert statistics.wilcoxon_greater(np.zeros(4)) == 1.0


def test_holm_hand_worked():
    # sorted 0.01, 0.02, 0.04 -> 3 x 0.01 = 0.03, 2 x 0.02 = 0.04, 1 x 0.04 = 0.04 (monotone)
    adjusted = statistics.holm({"a": 0.04, "b": 0.01, "c": 0.02, "d": np.nan})
    assert adjusted["b"] == pytest.approx(0.03) and adjusted["c"] == pytest.approx(0.04)
    assert adjusted["a"] == pytest.approx(0.04) and np.isnan(adjusted["d"])
    assert statistics.holm({"a": 0.5, "b": 0.6}) == {"a": 1.0, "b": 1.0}


def test_entity_bootstrap_rejects_a_clear_shift_and_not_a_null():
    rng = np.random.default_rng(0)
    shifted = rng.normal(0.5, 1.0, 200)
    above, below = statistics.entity_bootstrap(shifted, 2000, np.random.default_rng(1))
    assert above == 1 / 2001 and below > 0.99
    # under a symmetric null the one-sided p is close to uniform: about alpha of many nulls reject
    rejections = [statistics.entity_bootstrap(rng.normal(0, 1, 100), 400, rng)[0] < 0.05 for _ in range(400)]
    assert 0.02 < np.mean(rejections) < 0.09
    assert statistics.entity_bootstrap(np.zeros(10), 100, rng) == (1.0, 1.0)
    assert np.isnan(statistics.entity_bootstrap(np.array([1.0]), 100, rng)[0])


def test_lag_free_reference_is_uniform_for_random_functions_of_the_proxies():
    rng = np.random.default_rng(2)
    n = 80
    z = rng.uniform(size=n)
    proxies = np.column_stack([z, rng.normal(size=n), rng.normal(size=n)])
    stratifier = z + rng.normal(0, 0.1, n)  # carried by the first proxy
    # a k* that is a random direction in proxy space is no more aligned than the reference: p about uniform
    ps = []
    for _ in range(200):
        w = rng.normal(size=3)
        kstar = ((proxies - proxies.mean(0)) / proxies.std(0)) @ w
        ps.append(statistics.lag_free_p(kstar, stratifier, proxies, 200, rng)[1])
    # 200 such p-values: about 5 % below 0.05 (binomial sd 1.5 %) and quartiles near 0.25, 0.5, 0.75 (sd about 0.03)
    assert 0.01 <= np.mean(np.array(ps) < 0.05) <= 0.1
    np.testing.assert_allclose(np.quantile(ps, [0.25, 0.5, 0.75]), [0.25, 0.5, 0.75], atol=0.1)
    # the direction that carries the stratifier beats almost every random direction
    median, p = statistics.lag_free_p(z, stratifier, proxies, 1000, rng)
    assert p < 0.05 and median < abs(stats.spearmanr(z, stratifier).statistic)
    assert np.isnan(statistics.lag_free_p(np.ones(n), stratifier, proxies, 10, rng)[1])


def test_lag_free_references_kept_between_calls_give_the_same_numbers():
    """The ranked projections kept in ``references`` are reused only for the same proxies and the same directions
    (generators seeded alike), and the results and the generators' states are those of calls without them."""
    rng = np.random.default_rng(4)
    n = 60
    proxies, stratifier = rng.normal(size=(n, 3)), rng.normal(size=n)
    others = proxies[::-1].copy()
    calls = [(rng.normal(size=n), proxies, 7), (rng.normal(size=n), proxies, 7),  # two methods of one seed
             (rng.normal(size=n), proxies, 8), (rng.normal(size=n), others, 7)]  # another seed; other proxies
    references = {}
    for kstar, proxy_values, seed in calls:
        kept, alone = np.random.default_rng(seed), np.random.default_rng(seed)
        assert (statistics.lag_free_p(kstar, stratifier, proxy_values, 300, kept, references)
                == statistics.lag_free_p(kstar, stratifier, proxy_values, 300, alone))
        assert kept.bit_generator.state == alone.bit_generator.state
    assert len(references) == 3


def test_rank_multiple_correlation():
    rng = np.random.default_rng(3)
    p = rng.normal(size=(100, 2))
    assert statistics.rank_multiple_correlation(np.exp(p[:, 0]), p) == pytest.approx(1.0)  # a monotone map
    noisy = p[:, 0] + rng.normal(0, 0.5, 100)
    # one predictor: R of ranks on ranks is |Pearson of the ranks| = |Spearman|
    assert statistics.rank_multiple_correlation(noisy, p[:, :1]) == pytest.approx(
        abs(stats.spearmanr(noisy, p[:, 0]).statistic))
    # two predictors carry more of a target built from both than either alone
    both = p[:, 0] + p[:, 1]
    assert statistics.rank_multiple_correlation(both, p) > max(abs(stats.spearmanr(both, p[:, k]).statistic)
                                                              for k in range(2)) + 0.1
    assert statistics.rank_multiple_correlation(rng.normal(size=100), p) < 0.3


def test_seed_agreement_against_scipy():
    kstar = pd.DataFrame({0: [1.0, 2, 3, 4, 5], 1: [1.0, 3, 2, 4, 5], 2: [5.0, 4, 3, 2, 1]})
    got = statistics.seed_agreement(kstar)
    rhos = [stats.spearmanr(kstar[a], kstar[b]).statistic for a, b in ((0, 1), (0, 2), (1, 2))]
    assert got["seed_pairs"] == 3 and got["median_rho"] == pytest.approx(np.median(rhos))
    assert got["min_rho"] == pytest.approx(-1.0) and got["share_negative"] == pytest.approx(2 / 3)
    assert np.isnan(statistics.seed_agreement(kstar[[0]])["median_rho"])


def test_clopper_pearson_against_the_beta_quantiles():
    low, high = statistics.clopper_pearson(3, 20)
    assert low == pytest.approx(stats.beta.ppf(0.025, 3, 18)) and high == pytest.approx(stats.beta.ppf(0.975, 4, 17))
    assert statistics.clopper_pearson(0, 20) == (0.0, pytest.approx(1 - 0.025 ** (1 / 20)))


def test_p_at_the_permutation_floor_prints_as_such():
    assert statistics.format_p(1 / 2001, 2000) == "<= 1/2001"
    assert statistics.format_p(0.0123, 2000) == "0.012" and statistics.format_p(float("nan")) == "n/a"


def test_average_ranks_are_scipys_rankdata_to_the_bit():
    """The audit's ranks (numpy alone) are scipy.stats.rankdata's, exactly: ties, both axes, a NaN slice."""
    rng = np.random.default_rng(3)
    tied = rng.integers(0, 6, size=(40, 7)).astype(float)  # many ties in every column and row
    tied[5, 2] = np.nan  # column 2 and row 5 hold a NaN
    for values in (tied, rng.normal(size=(30, 4)), rng.integers(0, 3, size=25).astype(float), np.array([2.0])):
        for axis in range(values.ndim):
            np.testing.assert_array_equal(statistics.average_ranks(values, axis=axis),
                                          stats.rankdata(values, axis=axis))


def test_spearman_is_scipys_to_the_bit():
    rng = np.random.default_rng(4)
    for _ in range(20):
        a, b = rng.integers(0, 8, size=50).astype(float), rng.normal(size=50)
        assert statistics.spearman(a, b) == stats.spearmanr(a, b).statistic
        assert statistics.spearman(b, b[::-1] + a) == stats.spearmanr(b, b[::-1] + a).statistic
    assert np.isnan(statistics.spearman(np.ones(5), np.arange(5.0)))
    assert np.isnan(statistics.spearman(np.array([1.0, np.nan, 3.0]), np.arange(3.0)))


def test_pairs_that_all_differ_alike_are_no_replicates():
    assert statistics.unreplicated(np.full(20, 0.003)) and not statistics.unreplicated(np.array([0.003]))
    assert not statistics.unreplicated(np.array([0.003, 0.004]))
    row = statistics.paired_wilcoxon(pd.Series([1.0, 2.0, 3.0]), pd.Series([0.5, 1.5, 2.5]))
    assert np.isnan(row["p"]) and "replicate nothing" in row["note"]


@pytest.mark.parametrize("test", ["permutation", "lag_free"])
def test_a_missing_kstar_or_stratifier_is_refused_not_given_the_smallest_p(test):
    """A NaN gave rho NaN, which no shuffle reaches, so p came out at its floor 1/(B + 1): the strongest evidence
    from no evidence. The audit drops entities without both values first; a caller that does not is told."""
    rng = np.random.default_rng(0)
    kstar, stratifier = rng.normal(size=30), rng.normal(size=30)
    kstar[4] = np.nan
    with pytest.raises(ValueError, match="k\\* or the stratifier holds NaN .* entities that lack either"):
        if test == "permutation":
            statistics.permutation_spearman(kstar, stratifier, 99, rng)
        else:
            statistics.lag_free_p(kstar, stratifier, rng.normal(size=(30, 2)), 99, rng)


def test_lag_free_alignment_is_undefined_when_every_proxy_is_constant():
    """No proxy varies, so there is no lag-free k* to compare with: NaN, not the smallest p."""
    rng = np.random.default_rng(0)
    kstar, stratifier = rng.normal(size=30), rng.normal(size=30)
    median, p = statistics.lag_free_p(kstar, stratifier, np.ones((30, 2)), 99, rng)
    assert np.isnan(median) and np.isnan(p)


def _cd_by_pairs(residual: np.ndarray, observed: np.ndarray) -> float:
    """Pesaran's CD the long way: pandas, one pair of entities at a time, over the steps both observe."""
    frame = pd.DataFrame(np.where(observed, residual, np.nan).T)
    total, entities = 0.0, set()
    for i, j in itertools.combinations(frame.columns, 2):
        pair = frame[[i, j]].dropna()
        if len(pair) >= 3:
            total += np.sqrt(len(pair)) * pair[i].corr(pair[j])
            entities |= {i, j}
    n = len(entities)
    return float(np.sqrt(2 / (n * (n - 1))) * total)


def test_pesaran_cd_is_the_pairwise_formula_on_an_unbalanced_panel():
    rng = np.random.default_rng(3)
    shock = rng.normal(size=30)
    residual = 0.6 * shock[None, :] * rng.uniform(0.5, 1.5, (12, 1)) + rng.normal(size=(12, 30))
    observed = rng.uniform(size=(12, 30)) > 0.2
    observed[0, :28] = False  # an entity with 2 steps: in no pair
    found = statistics.pesaran_cd(residual, observed)
    assert found["cd"] == pytest.approx(_cd_by_pairs(residual, observed), rel=1e-10)
    assert found["pairs"] == 55 and found["cd"] > 10 and found["p"] < 1e-6  # a common shock: strong dependence


def test_pesaran_cd_is_about_standard_normal_without_dependence():
    rng = np.random.default_rng(4)
    cds = [statistics.pesaran_cd(rng.normal(size=(20, 15)), np.ones((20, 15), bool))["cd"] for _ in range(300)]
    assert abs(np.mean(cds)) < 0.2 and 0.85 < np.std(cds) < 1.15


def test_proxy_shocks_is_the_mean_of_each_steps_ols_r2_and_finds_shocks_that_follow_the_proxies():
    """The mean over steps of each step's R² on the proxies, against statsmodels' OLS with a constant on an
    unbalanced panel (a step observed by too few entities left out); its permutation p is small where every step's
    shock has a cross-section that follows the proxies (a new pattern each step: no common factor), and its
    permutations' mean R² is what pure noise gives."""
    import statsmodels.api as sm

    rng = np.random.default_rng(8)
    n, s, q = 60, 20, 4
    proxies = rng.normal(size=(n, q))
    observed = rng.uniform(size=(n, s)) > 0.1
    observed[q + 2:, 3] = False  # q + 2 entities at step 3: left out
    noise = rng.normal(size=(n, s))
    found = statistics.proxy_shocks(noise, observed, proxies, 199, np.random.default_rng(1))
    expected = [sm.OLS(noise[observed[:, t], t], sm.add_constant(proxies[observed[:, t]])).fit().rsquared
                for t in range(s) if t != 3]
    assert found["steps"] == s - 1 and found["r2"] == pytest.approx(np.mean(expected), rel=1e-9)
    assert found["p"] > 0.05 and found["r2_null"] == pytest.approx(q / n, abs=0.03)
    shocked = noise + 0.5 * proxies @ rng.normal(size=(q, s))
    planted = statistics.proxy_shocks(shocked, observed, proxies, 199, np.random.default_rng(1))
    assert planted["p"] == pytest.approx(1 / 200) and planted["r2"] > 0.3
    flat = statistics.proxy_shocks(np.zeros((n, s)), observed, proxies, 19, np.random.default_rng(1))
    assert np.isnan(flat["p"]) and flat["steps"] == 0  # nothing to read: no p at its floor (it read 1/20)
