"""Synthetic data-generating process with known entity-specific lags (paper Algorithm 2).

For entity i with latent moderator z_i ~ U(0, 1):

    lag centre  k_c = clip(round(3 + 7 (1 - z)), 1, K)        (linear)
                k_c = clip(round(10 (1 - z)^2), 1, K)          (nonlinear)
                k_c = constant_centre for every entity         (constant: a null with no lag heterogeneity)
                k_c = 3 where z >= 0.5, else K                 (two_regime: short and long lags)
                k_c = clip(round(1 + (K - 1)(1 + (2z - 1)(2z2 - 1)) / 2), 1, K)
                                                               (interaction: a saddle in z and a second latent
                                                                z2 ~ U(0, 1); 5.5 + 4.5 (2z - 1)(2z2 - 1) at K = 10)
                k_c = clip(round(1 + (K - 1)(1 + sin(2 pi z)) / 2), 1, K)
                                                               (non_monotone: 5.5 + 4.5 sin(2 pi z) at K = 10)
    lag weights w_k ∝ exp(-0.5 ((k - k_c) / width)^2),  k = 1..K, summing to one
    target      Y_t = sum_k w_k g(X_{t-k}) + c X_t + a z + b s_0 + noise   (a lagged term before t = 0 is zero)
    driver      g(x) = x                                       (driver linear)
                g(x) = threshold_gain * max(x - driver_threshold, 0)   (driver threshold: a hinge)
    proxies     [z, sqrt z, 1 - 0.7 z] + noise; [z, z2, 1 - 0.7 z] + noise under interaction

The last two lag maps and the threshold driver are ones a moderated distributed lag whose lag coefficients are
linear in the proxies and their squares cannot represent: the saddle needs the cross product z z2, the sine is not
quadratic in any proxy, and the hinge is not linear in X.

z2 is drawn from its own generator ``default_rng([seed, 2])``, so the main stream, and with it every other
scenario's panel, is the same as before interaction existed.

The truth returned with the panel has both the rounded lag centre (what the paper scores against)
and the DGP's own mean lag sum_k k w_k, which differs from the centre near the ends of 1..K.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from acgate.config import Params, SyntheticConfig
from acgate.data.panel import Panel, PanelError
from acgate.layout import panel_dir
from acgate.runs import write_json

PROXY_NAMES = ["z", "sqrt_z", "one_minus_0.7z"]
# interaction's proxies: z2 in place of sqrt z. None may be a function of z + z2 (its square would hold z z2)
INTERACTION_PROXY_NAMES = ["z", "z2", "one_minus_0.7z"]
STATIC_NAMES = ["s0_z_noisy", "s1_noise"]


def lag_centre(z: np.ndarray, scenario: str, max_lag: int, constant_centre: int = 5,
               z2: np.ndarray | None = None) -> np.ndarray:
    """Integer lag centre (N,) of each entity from its moderator z (N,) (and, under interaction, z2 (N,))."""
    # the two maps below span 1..K for any K by taking u in [-1, 1] to 1 + (K - 1)(1 + u) / 2
    if scenario == "linear":
        raw = 3 + 7 * (1 - z)
    elif scenario == "nonlinear":
        raw = 10 * (1 - z) ** 2
    elif scenario == "constant":
        raw = np.full_like(z, constant_centre)
    elif scenario == "two_regime":
        raw = np.where(z >= 0.5, 3.0, max_lag)
    elif scenario == "interaction":
        if z2 is None:
            raise ValueError("scenario 'interaction' sets the lag centre from z and z2; pass z2")
        raw = 1 + (max_lag - 1) * (1 + (2 * z - 1) * (2 * z2 - 1)) / 2  # a pure saddle: no main effect of z or z2
    elif scenario == "non_monotone":
        raw = 1 + (max_lag - 1) * (1 + np.sin(2 * np.pi * z)) / 2  # long lags near z = 0.25, short near 0.75
    else:
        raise ValueError(f"unknown synthetic scenario '{scenario}'; use linear, nonlinear, constant, two_regime, "
                         "interaction or non_monotone")
    return np.clip(np.round(raw), 1, max_lag).astype(int)


def lag_weights(centre: np.ndarray, max_lag: int, width: float) -> np.ndarray:
    """DGP lag weights (N, K): a Gaussian bump over lags 1..K around each centre, rows sum to one."""
    k = np.arange(1, max_lag + 1)
    w = np.exp(-0.5 * ((k[None, :] - centre[:, None]) / width) ** 2)
    return w / w.sum(axis=1, keepdims=True)


def driver(x: np.ndarray, cfg: SyntheticConfig) -> np.ndarray:
    """g(x), elementwise on x (N, T): what the lagged inputs pass through before they are weighted."""
    if cfg.driver == "linear":
        return x
    return cfg.threshold_gain * np.maximum(x - cfg.driver_threshold, 0.0)  # threshold: a hinge


def simulate(cfg: SyntheticConfig, seed: int, val_start: int, test_start: int) -> Panel:
    """Draw one synthetic panel; all randomness comes from ``numpy.random.default_rng(seed)``, and under
    interaction z2 from ``default_rng([seed, 2])``."""
    rng = np.random.default_rng(seed)
    n, t_len, horizon = cfg.n_entities, cfg.n_steps, cfg.lag_horizon
    z = rng.uniform(0.0, 1.0, size=n)
    # z2 (N,) from its own stream: drawing it from rng would shift every later draw of the other scenarios
    interaction = cfg.scenario == "interaction"
    z2 = np.random.default_rng([seed, 2]).uniform(0.0, 1.0, size=n) if interaction else None
    centre = lag_centre(z, cfg.scenario, horizon, cfg.constant_centre, z2)
    weights = lag_weights(centre, horizon, cfg.lag_width)

    second = z2 if interaction else np.sqrt(z)  # the second proxy column (N,)
    proxies = np.stack([z, second, 1 - 0.7 * z], axis=1) + rng.normal(0, cfg.proxy_noise_sd, size=(n, 3))
    static = np.stack([z + rng.normal(0, cfg.static_noise_sd, size=n), rng.normal(0, 1, size=n)], axis=1)

    shocks = rng.normal(0, 1, size=(n, t_len))
    shift = z - 0.5
    x = np.empty((n, t_len))
    x[:, 0] = cfg.x0_shock_coef * shocks[:, 0] + cfg.x0_shift_coef * shift
    for t in range(1, t_len):
        x[:, t] = cfg.ar_coef * x[:, t - 1] + cfg.innovation_coef * shocks[:, t] + cfg.drift_coef * shift

    # lagged[:, t, k-1] = g(x[:, t-k]), zero before t = 0 (g(x) = x under the linear driver)
    driven = driver(x, cfg)
    lagged = np.zeros((n, t_len, horizon))
    for k in range(1, horizon + 1):
        lagged[:, k:, k - 1] = driven[:, : t_len - k]
    y = (np.einsum("ntk,nk->nt", lagged, weights) + cfg.contemporaneous_coef * x
         + cfg.z_coef * z[:, None] + cfg.static_coef * static[:, :1] + rng.normal(0, cfg.noise_sd, size=(n, t_len)))

    entities = np.array([f"e{i:03d}" for i in range(n)])
    truth = {"z": z, "kstar_true": centre.astype(float),
             "dgp_mean_lag": weights @ np.arange(1, horizon + 1), "lag_weights": weights}
    # L2 stratifiers: the latent moderator (the lags follow it, monotonically except under non_monotone and
    # interaction) and a pure-noise control
    stratifiers = pd.DataFrame({"latent_z": z, "noise": static[:, 1]}, index=pd.Index(entities, name="entity"))
    if interaction:  # the second latent moderator, which sets the lags together with z
        truth["z2"] = z2
        stratifiers.insert(1, "latent_z2", z2)
    proxy_names = INTERACTION_PROXY_NAMES if interaction else PROXY_NAMES
    return Panel(entities=entities, times=np.arange(t_len), X=x[:, :, None].astype(np.float32),
                 Y=y.astype(np.float32), P=proxies.astype(np.float32), S=static.astype(np.float32),
                 feature_names=["x"], proxy_names=list(proxy_names), static_names=list(STATIC_NAMES),
                 val_start=val_start, test_start=test_start, stratifiers=stratifiers, truth=truth)


def load_or_simulate(params: Params, seed: int, data_root: Path) -> Panel:
    """The synthetic panel of ``params.domain`` and ``seed``: read from data/processed when it was saved
    with the same DGP settings, else drawn afresh (deterministic per seed) and saved."""
    if params.synthetic is None:
        raise ValueError(f"domain '{params.domain}' has no 'synthetic' section; it is not a synthetic domain")
    directory = panel_dir(data_root, params.domain, seed)
    settings = {"synthetic": dataclasses.asdict(params.synthetic), "split": dataclasses.asdict(params.split),
                "seed": seed}
    recorded = directory / "dgp_settings.json"
    if recorded.is_file() and _read_settings(recorded) == settings:
        try:
            return Panel.load(directory)
        except PanelError as err:  # a draw is exact from its seed: an edited or damaged copy is drawn again
            print(f"{err}; drawing it again from seed {seed}", file=sys.stderr)
    panel = simulate(params.synthetic, seed, params.split.val_start, params.split.test_start)
    panel.save(directory)
    write_json(recorded, settings)
    return panel


def _read_settings(path: Path) -> dict | None:
    """The DGP settings a cached panel was drawn with; None when the file is damaged (the panel is then drawn
    again)."""
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
