"""The classical reference's in-sample lag tests of a domain's panels (:mod:`acgate.audit.gls`, under each panel's
own error model): do the proxies hold the lags (its calibrated L1), do the lags differ at all, do they hold over time,
and do the entities share shocks; with the GLS fit's k* as runs of :data:`acgate.audit.verdicts.GLS_FIT`, which the
classical reference's L2 stratifies.

    tests, fitted = of_domain(panels, runs, params, shared)   # one row per tested panel (COLUMNS)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from acgate import statistics
from acgate.audit import gls, noise, persistence, verdicts
from acgate.audit.run_folders import Run
from acgate.config import AuditConfig, Params
from acgate.data import prep
from acgate.data.panel import Normalisers, Panel
from acgate.models.classical import lag_profile, moderators
from acgate.models.lags import effective_lag, lag_frame


def of_domain(panels: dict[int, Panel], runs: list[Run], params: Params, shared: bool
              ) -> tuple[pd.DataFrame, list[Run]]:
    """:func:`table` of a domain's seed panels; a proxy-shuffle domain's tests read one seed's permutation
    (:func:`tested_panels`), and its GLS fit stands for every seed."""
    if params.kind != "proxy_shuffle":
        return table(panels, runs, params.model.max_lag, params.audit, shared)
    tests, fitted = table(tested_panels(panels, params), runs, params.model.max_lag, params.audit, False)
    return tests, [dataclasses.replace(run, seed=seed) for run in fitted for seed in panels]


def tested_design(panel: Panel, max_lag: int, alpha: float
                  ) -> tuple[gls.LagDesign, np.ndarray, persistence.ErrorModel, dict] | None:
    """What :func:`table` fits on ``panel``: its GLS design (with the common shock, :func:`acgate.audit.gls.
    with_common_shocks`, where Pesaran's CD of the residuals rejects at ``alpha``), its moderators, its error model
    and the common-shock row (:func:`acgate.audit.noise.common_shocks`, and the CD of what the tests' GLS fit leaves,
    :func:`acgate.audit.noise.tested_dependence`); None where no target step has a full lag window."""
    design = gls.lag_design(panel, max_lag)
    if not design.rows.any():
        return None
    q = moderators(Normalisers.fit(panel).P.transform(panel.P), shared=False)
    shocks = noise.common_shocks(design, q)
    # the entities share shocks: every test's fits take out each entity's loading on them
    shocked = gls.with_common_shocks(design) if shocks["cd_p"] < alpha else design
    errors = persistence.error_model(design)
    return shocked, q, errors, {**shocks, **noise.tested_dependence(shocked, q, errors)}


def stream(cfg: AuditConfig, seed: int) -> np.random.Generator:
    """The random stream of :func:`table` on the panel of ``seed``."""
    return np.random.default_rng([cfg.permutation_seed, 20_000, seed])


def tested_panels(panels: dict[int, Panel], params: Params) -> dict[int, Panel]:
    """The panel the lag tests of a proxy-shuffle domain read: its first seed's, with that seed's permutation of the
    proxies (:func:`acgate.data.prep.as_trained`), as its runs trained on it. One permutation alone: the seeds' are
    draws of one null on the same targets, so their p are not independent and Fisher's combination over them would
    not hold its level; the tests of the saved panel would be the original domain's, proxies and all. Its GLS fit's
    k* stands for every seed, as one shared panel's does (the classical reference's L2 pools it over the seeds)."""
    return {seed: prep.as_trained(panels[seed], params, seed) for seed in sorted(panels)[:1]}


def table(panels: dict[int, Panel], runs: list[Run], max_lag: int, cfg: AuditConfig, shared: bool
          ) -> tuple[pd.DataFrame, list[Run]]:
    """The in-sample lag tests under the panel's own error model (:mod:`acgate.audit.gls`), one row per seed's panel
    (one for all where the seeds share their panel): the seed, the columns of :data:`acgate.audit.gls.
    INTERACTION_COLUMNS` (do the proxies hold the lags: the calibrated L1 of the classical reference, with
    ``audit.permutations`` proxy permutations), the shape of the fit's curves by feature (:func:`feature_curves`),
    ``kstar_agreement`` (the median Spearman between the k* of the
    panel's moderated_dl runs and the GLS fit's, reported beside L1) and the columns of
    :data:`acgate.audit.gls.SHAPE_COLUMNS` prefixed ``differ_`` (do the lags differ at all: the lags-differ
    statement), ``cd``, ``cd_p``, ``common_share``, ``cd_gls``, ``cd_gls_p`` and ``proxy_shock_r2``,
    ``proxy_shock_r2_null``, ``proxy_shock_p`` (do the entities share shocks: :func:`acgate.audit.noise.common_shocks`;
    where Pesaran's CD rejects at alpha, the L1 test takes out each entity's loading on the cross-sectional mean of the
    target, :func:`acgate.audit.gls.with_common_shocks`, in every test of the table; do they still, and do the shocks
    follow the proxies step by step, in what the tests' GLS fit leaves: :func:`acgate.audit.noise.tested_dependence`),
    and the columns
    of :data:`acgate.audit.gls.STABILITY_COLUMNS` prefixed ``stable_`` (do the lags hold over time: evidence only,
    :func:`acgate.audit.verdicts.lags_changed`; ``stable_first_late`` the first time of the late half). With the table,
    the GLS fit's k* of every seed's panel as runs of method :data:`acgate.audit.verdicts.GLS_FIT` (no forecasts),
    which the classical reference's L2 stratifies."""
    rows, fitted = [], []
    for seed, panel in (list(panels.items())[:1] if shared else panels.items()):
        tested = tested_design(panel, max_lag, cfg.alpha)
        if tested is None:
            rows.append({"seed": seed, "note": "no observed target step with a full lag window"})
            continue
        shocked, q, errors, shocks = tested
        rng = stream(cfg, seed)
        interaction, curves = gls.interaction_test(shocked, q, errors, cfg.permutations, rng)
        lags = lag_frame(panel, lag_profile(curves), "GLS fit (in-sample, AR(1) errors)")
        mine = [r for r in runs if r.method == verdicts.CLASSICAL_REFERENCE and (shared or r.seed == seed)]
        differ = gls.shape_test(shocked, errors, gls.SHAPE_DRAWS, rng)
        stable = gls.stability_test(shocked, q, errors, gls.STABILITY_DRAWS, rng)
        step = stable.pop("first_late_step")
        stable["first_late"] = panel.times[max_lag + step] if len(panel.times) > max_lag + step else None
        rows.append({"seed": seed, **interaction, **feature_curves(curves, panel.feature_names),
                     "kstar_agreement": _agreement(lags, mine),
                     **{f"differ_{k}": v for k, v in differ.items()}, **shocks,
                     **{f"stable_{k}": v for k, v in stable.items()}})
        if np.isfinite(lags.kstar).all():
            fitted += [Run(s, verdicts.GLS_FIT, {}, lags, pd.DataFrame()) for s in (panels if shared else [seed])]
    return pd.DataFrame(rows, columns=COLUMNS), fitted


def feature_curves(curves: np.ndarray, names: list[str]) -> dict:
    """What the features' lag curves (N, F, K) of the moderated GLS fit look like, pooled over the entities: each
    feature's k* (of the part of its mean curve along the sign of its total effect), as text ("name k*; ..."), the
    spread of those k* (max - min, in lags) and the largest share of a feature's mean curve (absolute weight) that
    runs against its sign. A curve that changes sign along the lags, or features whose lags differ, is what one
    positive lag distribution for every feature (AC-GATE's gate) cannot hold."""
    if not np.isfinite(curves).all():
        return {"feature_kstar": "", "feature_kstar_range": np.nan, "against_sign_share": np.nan}
    pooled = curves.mean(axis=0)  # (F, K)
    sign = np.where(pooled.sum(axis=1) < 0, -1.0, 1.0)[:, None]
    weight = np.abs(pooled).sum(axis=1)
    against = np.clip(-sign * pooled, 0, None).sum(axis=1) / np.where(weight > 0, weight, 1.0)
    kstar = effective_lag(lag_profile(pooled[:, None, :] * sign[:, :, None]))  # each feature as its own "entity"
    return {"feature_kstar": "; ".join(f"{name} {k:.2f}" for name, k in zip(names, kstar, strict=True)),
            "feature_kstar_range": float(np.ptp(kstar)), "against_sign_share": float(against.max())}


COLUMNS = ["seed", *gls.INTERACTION_COLUMNS, "feature_kstar", "feature_kstar_range", "against_sign_share",
           "kstar_agreement",
           *(f"differ_{c}" for c in gls.SHAPE_COLUMNS), "cd", "cd_p", "common_share", "cd_gls", "cd_gls_p",
           "proxy_shock_r2", "proxy_shock_r2_null", "proxy_shock_p",
           *(f"stable_{c}" if c != "first_late_step" else "stable_first_late" for c in gls.STABILITY_COLUMNS)]


def _agreement(lags: pd.DataFrame, runs: list[Run]) -> float:
    """The median over ``runs`` of the Spearman correlation between each run's k* and the k* of ``lags`` (a lag
    table), on the entities both have (NaN without a run)."""
    fitted = lags.set_index("entity").kstar
    pairs = [pd.concat([fitted, r.lags.set_index("entity").kstar], axis=1, join="inner").dropna() for r in runs]
    return float(np.median([statistics.spearman(*pair.to_numpy().T) for pair in pairs])) if pairs else np.nan
