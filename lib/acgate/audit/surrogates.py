"""Surrogate panels of a data domain: they keep its entities, time span, splits, features, proxies and
stratifiers, and replace only its target by one whose lags are known (the panel-matched study,
:mod:`acgate.audit.panel_matched`, measures the audit's error rates on them).

    source = fit_source(panel, params)
    panel = draw(source, "proxy_lags_one", seed=0)      # truth: panel.truth["kstar_true"]
    curves = surrogate_curves(source, "proxy_lags_one")  # (N, F, K) the true lag curves
    panel = draw(own_shocks(source), "one_curve", seed=0)  # the panel's own shocks re-timed, not Gaussian noise

The target of a surrogate is built in the standardised units of the classical fits (``acgate.models.classical``): each
entity's level from the pooled distributed lag, a lagged part, and the panel's noise:

    y_it = a_i + sum_f sum_k beta_ifk x_f,i,t-k + lambda_i f_t + u_it,   u_it = rho u_i,t-1 + sigma_i v_it,  v ~ N(0, 1)

where beta_f is the pooled curve that ``shared_dl`` fits to the panel (one lag curve for every entity), a_i its
entity intercepts, and lambda_i f_t (the panel's own common shocks, each entity's loading), rho and sigma_i the
panel's noise model (:func:`acgate.audit.noise.estimate`). Lags before the panel's first step read the features'
training mean (zero). Targets missing in the panel stay missing. The scenarios (:data:`SCENARIOS`):

- nulls, the same lags for every entity: ``one_curve`` (the pooled curve), ``effect_size`` (the proxies' direction
  sets the lagged part's size, times 0.25 to 1.75), ``noise_scale`` (it sets the noise's scale the same way) and
  ``common_shock`` (one more persistent shock common to the entities, AR(1) at rho and as large as the idiosyncratic
  noise, each entity's loading set by the proxies' direction the same way);
- positives, each entity's curve shifted by d_i lags (linear interpolation, zero beyond the window), d_i = c times a
  standardised score, c chosen so that the entities' true k* (of their shifted curves, as the classical models
  compute k*) have a spread (sd) of 0.25 to 3 lags (:data:`SPREADS`), or as close as the window allows:
  ``proxy_lags_*``, the score is the proxies' direction, so the proxies hold the lags (the truth of L1, L2 and L3 is
  "supported"); ``proxy_lags_unaligned`` (2 lags), the score is a direction of the proxies at 60 degrees from it
  (:func:`_unaligned`), so the proxies hold the lags (L1 and L3 "supported") but no stratifier's direction does
  (L2's truth "not supported": the test L2 exists for); ``stratifier_lags_*`` (0.5, 1 and 2 lags), the score is
  the part of a stratifier the proxies do not carry, so the lags differ (the truth of the lags-differ statement) but
  the proxies do not hold them (L1, L2 and L3 must not say so).

The proxies' direction is their least-squares fit to the ranks of the stratifier they carry best among those the
audit does not call circular (so that L2 has something to find when the lags follow it); the first principal
component of the standardised proxies when no stratifier is usable. The stratifier scenarios use the residual of
the stratifier the proxies carry least, and are left out (with the reason) when every stratifier is circular.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from acgate import statistics
from acgate.audit import calibration, gls, noise, persistence
from acgate.config import Params
from acgate.data.panel import Normalisers, Panel
from acgate.models.classical import fit_classical, intercepts, lag_profile, moderators, standardise
from acgate.models.lags import effective_lag

# positives: the sd of the entities' lag shifts, in lags, from a quarter lag to three (the smallest spread the audit
# detects on a panel is read off this grid); the stratifier nulls at three of them
SPREADS = {"quarter": 0.25, "half": 0.5, "one": 1.0, "one_and_half": 1.5, "two": 2.0, "three": 3.0}
STRATIFIER_SPREADS = ("half", "one", "two")
SIZE_FACTOR = (0.25, 1.5)  # effect_size, noise_scale, common_shock's loadings: 0.25 + 1.5 u, u the rank share
SALT = 7_919  # the surrogates' random streams, apart from every other stream of the project


@dataclass(frozen=True)
class Scenario:
    control: str  # negative or positive: whether the proxies hold lag information (the truth of L1, L2 and L3)
    lags_differ: bool  # whether the entities' lags differ (the truth of the lags-differ statement)
    moderator: str = ""  # what shifts the lags: "proxies", "stratifier", "other_proxies" or "" (no shift)
    spread: float = 0.0  # sd of the lag shifts across entities, in lags
    target: str = "one_curve"  # one_curve, effect_size, noise_scale or common_shock
    description: str = ""

    @property
    def l2_truth(self) -> bool:
        """Whether the lags follow a stratifier's direction among the proxies' (the truth of L2): the proxies' lags
        do, except where they follow another direction of the proxies."""
        return self.control == "positive" and self.moderator == "proxies"


SCENARIOS = {
    "one_curve": Scenario("negative", False, description="the pooled lag curve for every entity"),
    "effect_size": Scenario("negative", False, target="effect_size",
                            description="the pooled lag curve for every entity; the proxies' direction sets the size "
                                        "of the lagged effect (times 0.25 to 1.75)"),
    "noise_scale": Scenario("negative", False, target="noise_scale",
                            description="the pooled lag curve for every entity; the proxies' direction sets the scale "
                                        "of the noise (times 0.25 to 1.75)"),
    "common_shock": Scenario("negative", False, target="common_shock",
                             description="the pooled lag curve for every entity, and a persistent common shock whose "
                                         "loadings follow the proxies' direction (times 0.25 to 1.75; as large as "
                                         "the idiosyncratic noise)"),
    **{f"proxy_lags_{word}": Scenario("positive", True, "proxies", spread,
                                      description=f"the pooled curve shifted by the proxies' direction, spread "
                                                  f"{spread:g} lag{'s' if spread > 1 else ''}")
       for word, spread in SPREADS.items()},
    "proxy_lags_unaligned": Scenario("positive", True, "other_proxies", SPREADS["two"],
                                     description="the pooled curve shifted along a direction of the proxies at 60 "
                                                 "degrees from the stratifier's, spread 2 lags: the proxies hold the "
                                                 "lags, the stratifier shares only part of their direction (the truth "
                                                 "of L2 is \"not supported\")"),
    **{f"stratifier_lags_{word}": Scenario("negative", True, "stratifier", spread,
                                           description=f"the pooled curve shifted by a stratifier the proxies do not "
                                                       f"carry, spread {spread:g} lag{'s' if spread > 1 else ''}")
       for word, spread in SPREADS.items() if word in STRATIFIER_SPREADS},
}


@dataclass
class Source:
    """What the surrogates of one panel are made from (:func:`fit_source`), in the standardised units of the
    classical fits."""

    panel: Panel
    max_lag: int
    x: np.ndarray  # (N, T, F) the standardised features
    curve: np.ndarray  # (F, K) the pooled lag curve of shared_dl
    intercept: np.ndarray  # (N,) each entity's level
    rho: float  # AR(1) coefficient of the idiosyncratic noise, pooled over entities
    sigma: np.ndarray  # (N,) each entity's innovation sd
    common: np.ndarray  # (N, T) the panel's common shocks, loadings times factors (zero in the K warm-up steps)
    proxy_score: np.ndarray  # (N,) the proxies' direction, standardised
    stratifier_score: np.ndarray | None  # (N,) a stratifier's part the proxies do not carry, standardised; or None
    other_score: np.ndarray | None  # (N,) a direction of the proxies apart from the stratifiers', standardised; or None
    shifts: dict  # scenario -> (N,) each entity's lag shift d_i
    about: dict  # how the scores were chosen, and the residual scale, for the record
    innovations: np.ndarray | None = None  # (N, C) the panel's own shocks, re-timed for Gaussian ones: own_shocks

    def scenarios(self, wanted: list[str] | tuple = ()) -> list[str]:
        """The scenarios of ``wanted`` (empty: all) this panel allows: the stratifier ones only with a stratifier the
        proxies do not carry, ``proxy_lags_unaligned`` only where the proxies have a direction apart from the
        stratifiers'. A name that is no scenario stops with the list of them."""
        unknown = [name for name in wanted if name not in SCENARIOS]
        if unknown:
            raise ValueError(f"scenarios: unknown {', '.join(unknown)}; the scenarios: {', '.join(SCENARIOS)}")
        return [name for name, s in SCENARIOS.items() if (not wanted or name in wanted)
                and self.score(s.moderator) is not None]

    def score(self, moderator: str) -> np.ndarray | None:
        """The (N,) score that shifts the lags of a scenario with this moderator (zeros for none; None where the
        panel has no such direction)."""
        return {"": np.zeros(len(self.proxy_score)), "proxies": self.proxy_score, "stratifier": self.stratifier_score,
                "other_proxies": self.other_score}[moderator]


UNALIGNED_COSINE = 0.5  # proxy_lags_unaligned: the cosine of its lag direction with the stratifier's (60 degrees)


def _directions(panel: Panel, circular_threshold: float) -> tuple[np.ndarray, np.ndarray | None,
                                                                   np.ndarray | None, dict]:
    """The proxies' direction, a stratifier's part they do not carry and a direction of the proxies apart from the
    stratifiers' (see the module's docstring), with what was chosen and why."""
    proxies = standardise(panel.P)
    design = np.column_stack([np.ones(len(proxies)), proxies])
    fits = {}
    for name in panel.stratifiers.columns:
        values = panel.stratifiers[name].reindex(panel.entities).to_numpy(dtype=float)
        known = np.isfinite(values)
        ranks = standardise(statistics.average_ranks(values[known]))
        coef = np.linalg.lstsq(design[known], ranks, rcond=None)[0]
        fitted = design @ coef
        residual = np.zeros(len(values))
        residual[known] = ranks - fitted[known]
        r2 = 1 - np.sum(residual**2) / np.sum(ranks**2) if np.sum(ranks**2) > 0 else np.nan
        r = statistics.rank_multiple_correlation(values[known], panel.P[known])
        if name not in panel.proxy_names and np.isfinite(r) and r < circular_threshold:
            fits[name] = (float(r2), fitted, residual)
    if fits:
        carried = max(fits, key=lambda n: fits[n][0])
        least = min(fits, key=lambda n: fits[n][0])
        about = {"proxy_direction": f"the proxies' least-squares fit to the ranks of stratifier '{carried}' "
                                    f"(R2 {fits[carried][0]:.2f})", "aligned_stratifier": carried,
                 "stratifier": f"the part of stratifier '{least}' the proxies do not carry linearly (its residual on "
                               f"them; they carry R2 {fits[least][0]:.2f} of its ranks)"}
        aligned = standardise(fits[carried][1])
        other = _unaligned(proxies, aligned, [standardise(fit[1]) for fit in fits.values()])
        about["unaligned_direction"] = (
            f"a direction of the proxies at cosine {UNALIGNED_COSINE} with the proxies' direction (and no closer to "
            "any other stratifier's fit, where the proxies have the dimensions)" if other is not None else
            "none: the proxies measure one dimension, so proxy_lags_unaligned is left out")
        return aligned, standardise(fits[least][2]), other, about
    _, _, vt = np.linalg.svd(proxies, full_matrices=False)
    return standardise(proxies @ vt[0]), None, None, {
        "proxy_direction": "the first principal component of the standardised proxies (no stratifier that the audit "
                           "does not call circular)", "aligned_stratifier": None,
        "stratifier": "none: every stratifier is circular with the proxies, or there is none, so the stratifier "
                      "scenarios are left out", "unaligned_direction": "none: no stratifier to stand apart from"}


def _unaligned(proxies: np.ndarray, aligned: np.ndarray, fitted: list[np.ndarray]) -> np.ndarray | None:
    """(N,) a standardised direction of the proxies (N, M) whose correlation with ``aligned`` is
    :data:`UNALIGNED_COSINE`, its other part orthogonal to every stratifier's fit in ``fitted`` where the proxies span
    the dimensions (else to ``aligned`` alone); None where the proxies measure a single dimension."""
    scores = statistics.whitened_scores(proxies)  # (N, r): the proxies' dimensions, orthonormal
    if scores.shape[1] < 2:
        return None
    basis = np.column_stack(fitted) if scores.shape[1] > len(fitted) else aligned[:, None]
    taken, _ = np.linalg.qr(basis - basis.mean(axis=0))
    rest = scores - taken @ (taken.T @ scores)  # what each dimension leaves apart from the stratifiers' fits
    other = rest[:, np.argmax(np.linalg.norm(rest, axis=0))]
    unit = (aligned - aligned.mean()) / np.linalg.norm(aligned - aligned.mean())
    other = other - unit * (unit @ other)
    other /= np.linalg.norm(other)
    return standardise(UNALIGNED_COSINE * unit + np.sqrt(1 - UNALIGNED_COSINE**2) * other)


def fit_source(panel: Panel, params: Params) -> Source:
    """The pooled lag curve and entity levels of ``panel`` (shared_dl on its training targets), its noise model over
    every observed target step (:func:`acgate.audit.noise.estimate`: AR(1) idiosyncratic noise with entity scales,
    and the panel's common shocks), and the scores that moderate the surrogates' lags."""
    K = params.model.max_lag
    norm = Normalisers.fit(panel)
    x = norm.X.transform(panel.X).astype(float)
    y = norm.Y.transform(panel.Y).astype(float)
    curve = fit_classical(panel, params, "shared_dl").curves[0]  # (F, K): the same for every entity
    lagged = _lagged(x, np.broadcast_to(curve, (panel.n_entities, *curve.shape)))
    labels = panel.target_split(K)
    rows = np.zeros(y.shape, dtype=bool)
    rows[:, K:] = np.isfinite(y[:, K:]) & (labels != "test")[None, :]
    train = rows & np.concatenate([np.zeros(K, dtype=bool), labels == "train"])[None, :]
    intercept = intercepts(np.nan_to_num(y - lagged), train)
    found = noise_of(panel, params)
    common = np.zeros(y.shape)
    common[:, K:] = found.common()
    proxy_score, stratifier_score, other_score, about = _directions(panel, params.audit.circular_threshold)
    explained = np.var(lagged[rows]) / np.var(y[rows]) if np.var(y[rows]) > 0 else np.nan
    shifts, spreads = {}, {}
    scores = {"proxies": proxy_score, "stratifier": stratifier_score, "other_proxies": other_score}
    for name, scenario in SCENARIOS.items():
        score = scores.get(scenario.moderator)
        if score is not None:
            shifts[name], spreads[name] = _shift_forspread_text(curve, score, scenario.spread)
    about.update({**found.about(), "lagged_share_of_variance": round(float(explained), 4),
                  "pooled_curve": np.round(curve, 4).tolist(), "true_kstar_sd": spreads})
    return Source(panel, K, x, curve, intercept, found.rho, found.sigma, common, proxy_score, stratifier_score,
                  other_score, shifts, about)


def noise_of(panel: Panel, params: Params) -> noise.Noise:
    """The noise model of ``panel`` (:func:`acgate.audit.noise.estimate`, ``audit.noise_draws`` simulated panels) around
    its lag curves of lags 1..``model.max_lag`` moderated by its proxies, as :func:`fit_source` reads it."""
    return noise.estimate(gls.lag_design(panel, params.model.max_lag),
                          moderators(Normalisers.fit(panel).P.transform(panel.P), shared=False),
                          params.audit.noise_draws)


OWN_STEPS = 10  # own_shocks needs at least this many steps that every entity observes, with the one before


def own_shocks(source: Source) -> Source:
    """``source`` whose surrogates carry the panel's own shocks in place of Gaussian noise and the common factor: the
    innovations of each step's cross-section (:func:`acgate.audit.noise.innovations`, at the noise model's rho) kept
    whole, the steps permuted at random over the last of the surrogate's steps (drawn with replacement before them),
    and made persistent at rho. What the Gaussian surrogates lack, each year's shock falling across the entities as
    it did (along the proxies, on both real panels), they then have; its common shocks come with it. A measurement
    (``python -m acgate.tools.yardstick --noise own``), not the study's surrogates: every surrogate re-uses the same
    C cross-sections. Stops where fewer than :data:`OWN_STEPS` steps are observed by every entity."""
    design = gls.lag_design(source.panel, source.max_lag)
    q = moderators(Normalisers.fit(source.panel).P.transform(source.panel.P), shared=False)
    found = noise.innovations(design, q, source.rho)
    if found.shape[1] < OWN_STEPS:
        raise ValueError(f"own shocks: {found.shape[1]} steps of the panel are observed by every entity (with the "
                         f"step before), and re-timing needs {OWN_STEPS}; use the Gaussian surrogates")
    return dataclasses.replace(source, common=np.zeros_like(source.common), innovations=found)


def _retimed(rng: np.random.Generator, innovations: np.ndarray, steps: int, rho: float,
             scale: np.ndarray) -> np.ndarray:
    """(N, steps) AR(1) series at ``rho`` whose innovations are the columns of ``innovations`` (N, C), each entity's
    times ``scale`` (N,): a random permutation of the columns over the last C steps, columns drawn with replacement
    before them."""
    chosen = rng.integers(0, innovations.shape[1], size=steps)
    kept = min(steps, innovations.shape[1])
    chosen[steps - kept:] = rng.permutation(innovations.shape[1])[:kept]
    shocks = innovations[:, chosen] * scale[:, None]
    series = np.empty_like(shocks)
    series[:, 0] = shocks[:, 0] / np.sqrt(1 - rho**2)
    for t in range(1, steps):
        series[:, t] = rho * series[:, t - 1] + shocks[:, t]
    return series


SHIFT_GRID = 241  # multipliers of the score tried for each spread, from 0 to 6 times the spread
MIN_KEPT = 0.5  # a shift may move at most half of a curve's weight (sum of |beta| over features and lags) out of 1..K


def _shift_limits(curve: np.ndarray) -> tuple[float, float]:
    """The largest shifts earlier and later (both >= 0) that keep at least :data:`MIN_KEPT` of the curve's weight
    inside lags 1..K: beyond them a curve mostly leaves the window, and its k* no longer says where its lags are."""
    steps = np.arange(0, curve.shape[1] + 1.01, 0.05)
    limits = []
    for sign in (-1, 1):
        kept = np.abs(_shifted(curve, sign * steps)).sum(axis=(1, 2)) >= MIN_KEPT * np.abs(curve).sum()
        limits.append(float(steps[-1] if kept.all() else steps[np.argmin(kept) - 1]))
    return limits[0], limits[1]


def _shift_forspread_text(curve: np.ndarray, score: np.ndarray, spread: float) -> tuple[np.ndarray, float]:
    """The lag shifts c * score (N,), each within :func:`_shift_limits`, whose true k* have the sd closest to
    ``spread``, and that sd (a short window may not reach the spread asked for)."""
    earlier, later = _shift_limits(curve)
    best = (np.inf, np.zeros_like(score), 0.0)
    for c in np.linspace(0, 6 * spread, SHIFT_GRID):
        shift = np.clip(c * score, -earlier, later)
        sd = float(np.std(effective_lag(lag_profile(_shifted(curve, shift)))))
        if abs(sd - spread) < best[0]:
            best = (abs(sd - spread), shift, round(sd, 3))
    return best[1], best[2]


def _lagged(x: np.ndarray, curves: np.ndarray) -> np.ndarray:
    """(N, T) the lagged part sum_f sum_k beta_ifk x_f,i,t-k of features x (N, T, F) under curves (N, F, K)."""
    return sum(calibration.lagged_part(x[:, :, f], curves[:, f]) for f in range(x.shape[2]))


def _shifted(curve: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """(N, F, K) the curve (F, K) of each entity moved ``shift`` (N,) lags later (earlier when negative), by linear
    interpolation, zero beyond lags 1..K."""
    K = curve.shape[1]
    padded = np.pad(curve, ((0, 0), (1, 1)))  # (F, K + 2): lag 0 and lag K + 1 are zero
    at = np.arange(1, K + 1)[None, :] - shift[:, None]  # (N, K): where each entity reads the curve
    low = np.floor(at)
    left = np.clip(low.astype(int), 0, K + 1)
    right = np.clip(left + 1, 0, K + 1)
    values = padded[:, left] * (1 - (at - low)) + padded[:, right] * (at - low)  # (F, N, K)
    return np.where((at >= 0) & (at <= K + 1), values, 0.0).transpose(1, 0, 2)


def surrogate_curves(source: Source, name: str, shifted: tuple[int, ...] | None = None) -> np.ndarray:
    """(N, F, K) each entity's true lag curves in the surrogates of scenario ``name``: the pooled curve moved by the
    scenario's lag shifts; with ``shifted``, only those features' curves move (the others stay the pooled curve's)."""
    moved = _shifted(source.curve, source.shifts.get(name, np.zeros(source.x.shape[0])))
    if shifted is None:
        return moved
    keep = np.isin(np.arange(source.curve.shape[0]), shifted)
    return np.where(keep[None, :, None], moved, source.curve[None])


def proxy_factor(source: Source) -> np.ndarray:
    """(N,) what the proxies' direction multiplies in ``effect_size``, ``noise_scale`` and ``common_shock``: 0.25 +
    1.5 u, u each entity's rank share of the proxy score in (0, 1) (mean 1)."""
    share = (statistics.average_ranks(source.proxy_score) - 0.5) / len(source.proxy_score)
    return SIZE_FACTOR[0] + SIZE_FACTOR[1] * share


TARGETS = ("one_curve", "effect_size", "noise_scale", "common_shock")


def draw(source: Source, name: str, seed: int, shifted: tuple[int, ...] | None = None,
         target: str | None = None) -> Panel:
    """One surrogate panel of scenario ``name`` from ``source``; all randomness from ``seed``. Only the target
    differs from the source panel; the truth (each entity's k* of its true curves) is recorded for L3. ``shifted``:
    the features whose curves the scenario's lag shifts move (:func:`surrogate_curves`; all where not given).
    ``target``: one of :data:`TARGETS` in place of the scenario's own (its lags with another null's size, noise or
    shock: ``draw(source, "proxy_lags_two", 0, target="common_shock")``)."""
    scenario = SCENARIOS[name]
    target = target or scenario.target
    if target not in TARGETS:
        raise ValueError(f"target {target!r}: one of {', '.join(TARGETS)}")
    rng = np.random.default_rng([SALT, seed])
    curves = surrogate_curves(source, name, shifted)
    n, t_len = source.x.shape[:2]
    lagged = _lagged(source.x, curves)
    factor = proxy_factor(source)
    sigma = source.sigma * (factor if target == "noise_scale" else 1.0)
    if target == "effect_size":
        lagged = lagged * factor[:, None]
    if source.innovations is None:
        errors = persistence.ar1_series(rng, (n, t_len), source.rho, sigma) + source.common
    else:  # the panel's own shocks, re-timed (own_shocks), scaled as noise_scale scales sigma
        errors = _retimed(rng, source.innovations, t_len, source.rho, sigma / source.sigma) + source.common
    if target == "common_shock":  # one more common factor, its loadings set by the proxies' direction
        typical = float(np.median(source.sigma))  # the idiosyncratic noise's innovation sd, and so the shock's
        errors += factor[:, None] * persistence.ar1_series(rng, (1, t_len), source.rho, typical)
    y = Normalisers.fit(source.panel).Y.inverse(source.intercept[:, None] + lagged + errors)
    y[~np.isfinite(source.panel.Y)] = np.nan
    kstar = effective_lag(lag_profile(curves))
    return dataclasses.replace(source.panel, Y=y.astype(np.float32), truth={"kstar_true": kstar,
                                                                            "dgp_mean_lag": kstar},
                               meta={**source.panel.meta, "surrogate": name, "surrogate_seed": seed,
                                     **({} if shifted is None else {"shifted_features": list(shifted)}),
                                     **({} if target == scenario.target else {"surrogate_target": target})})


