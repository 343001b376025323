"""AC-GATE's reach: on which panels does its k* rank the entities' true lags as the moderated distributed lag's does?

A panel is placed by three numbers an audit knows before it trains (the panel-matched study's source computes them
in seconds): its entities N, the share of the target's variance that the pooled lag curve explains (the lagged
share), and the persistence of its noise (rho). The map is measured on panels of the project's DGP (paper Algorithm
2, ``linear`` lags: lag centres from 3 to 10 along the latent moderator, 30 steps, K = 10) whose noise is set to
give each cell's lagged share and rho:

    panel = reach_panel(params, n=150, share=0.2, rho=0.8, seed=3)     # one panel of a cell
    rows = cell_rows(params, ("moderated_dl", "acgate"), ((150, 0.2, 0.8), 3))
    where = place(read_map("tables/reach"), n=88, share=0.05, rho=0.92)   # the nearest cell of the committed map

:func:`reach_panel` draws the DGP without its target noise and adds Gaussian AR(1) noise (stationary from the first
step, its own stream) whose variance makes the true lagged term the cell's share of the variance of the target
steps. Each panel is also measured as a user's panel is (:func:`acgate.audit.surrogates.fit_source`: the pooled
curve's share and the noise model's rho), so that a panel is placed by the numbers its own audit reads.
``python -m acgate.tools.reach`` measures the map (``tables/reach/``).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from acgate.audit.calibration import lagged_part
from acgate.config import Params
from acgate.data import dgp
from acgate.data.panel import Panel

GRID = {"n": (40, 150, 600), "share": (0.05, 0.2, 0.7), "rho": (0.0, 0.8, 0.95)}
NOISE_SALT = 3  # the noise's stream: default_rng([seed, NOISE_SALT]), apart from the DGP's own draws
# a method reads a panel's lags where its k* ranks them (Spearman with the truth) and spans them (the slope of k* on the
# truth: 0 for a k* that barely varies, however well it ranks) both at least this
GOOD = 0.5


def reach_panel(params: Params, n: int, share: float, rho: float, seed: int) -> Panel:
    """One panel of ``params``' DGP with ``n`` entities whose true lagged term holds ``share`` of the target steps'
    variance, the rest (beyond the DGP's other terms) AR(1) noise of coefficient ``rho``."""
    if not 0 < share < 1 or not 0 <= rho < 1:
        raise ValueError(f"reach_panel: share must lie in (0, 1) and rho in [0, 1); got share {share}, rho {rho}")
    cfg = dataclasses.replace(params.synthetic, n_entities=n, noise_sd=0.0)
    panel = dgp.simulate(cfg, seed, params.split.val_start, params.split.test_start)
    y, x = panel.Y.astype(float), panel.X[:, :, 0].astype(float)
    lagged = lagged_part(dgp.driver(x, cfg), panel.truth["lag_weights"])
    steps = slice(cfg.lag_horizon, None)  # the target steps: every lag observed
    noise_var = np.var(lagged[:, steps]) / share - np.var(y[:, steps])
    if noise_var <= 0:
        raise ValueError(f"reach_panel: the DGP's lagged term holds less than share {share} of its noiseless target "
                         f"({np.var(lagged[:, steps]) / np.var(y[:, steps]):.2f}); ask for a smaller share")
    rng = np.random.default_rng([seed, NOISE_SALT])
    innovations = rng.normal(0.0, 1.0, y.shape)
    noise = np.empty_like(y)
    noise[:, 0] = innovations[:, 0]  # the stationary distribution (unit variance)
    for t in range(1, y.shape[1]):
        noise[:, t] = rho * noise[:, t - 1] + np.sqrt(1 - rho**2) * innovations[:, t]
    panel.Y = (y + np.sqrt(noise_var) * noise).astype(np.float32)
    return panel


def cell_rows(params: Params, methods: tuple[str, ...], item: tuple[tuple[int, float, float], int]) -> list[dict]:
    """One row per method on the panel ``item`` ((n, share, rho), seed): its k*'s recovery of the DGP's mean lags
    (:func:`acgate.tools.lag_recovery.recovery`), and the panel's lagged share and rho as its audit reads them."""
    from acgate.audit import surrogates  # imported here: the page reads the map without the fitting code
    from acgate.tools.lag_recovery import method_lags, recovery

    (n, share, rho), seed = item
    panel = reach_panel(params, n, share, rho, seed)
    about = surrogates.fit_source(panel, params).about
    truth = panel.truth["dgp_mean_lag"]
    rows = []
    for method in methods:
        start = time.perf_counter()
        kstar, _ = method_lags(panel, params, method)
        rows.append({"n": n, "share": share, "rho": rho, "seed": seed, "method": method, **recovery(kstar, truth),
                     "slope": float(np.cov(kstar, truth)[0, 1] / np.var(truth, ddof=1)),
                     "measured_share": about["lagged_share_of_variance"], "measured_rho": about["residual_ar1"],
                     "seconds": round(time.perf_counter() - start, 3)})
    return rows


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per cell and method: panels, the median, mean and sd of the Spearman of k* with the truth, the median slope of
    k* on the truth, the share of panels where both reached :data:`GOOD` (``share_read``), the mean absolute error
    and bias of k*, and the mean lagged share and rho that the audit's own fit read on the cell's panels."""
    table = table.assign(read=(table.spearman >= GOOD) & (table.slope >= GOOD))
    grouped = table.groupby(["n", "share", "rho", "method"], sort=True)
    return pd.DataFrame({
        "panels": grouped.size(), "median_spearman": grouped["spearman"].median(),
        "mean_spearman": grouped["spearman"].mean(), "sd_spearman": grouped["spearman"].std(),
        "median_slope": grouped["slope"].median(), "share_read": grouped["read"].mean(),
        "mean_mae": grouped["mae"].mean(), "mean_bias": grouped["bias"].mean(),
        "measured_share": grouped["measured_share"].mean(), "measured_rho": grouped["measured_rho"].mean(),
    }).round(3).reset_index()


def read_map(folder: str | Path) -> pd.DataFrame | None:
    """The committed map's summary (``<folder>/reach_summary.csv``), or None where it was never measured."""
    path = Path(folder) / "reach_summary.csv"
    return pd.read_csv(path) if path.is_file() else None


def place(table: pd.DataFrame, n: int, share: float, rho: float) -> dict:
    """The cell of the map ``table`` (:func:`summary`) nearest a panel of ``n`` entities whose audit reads lagged share
    ``share`` and noise persistence ``rho``, with every method's median Spearman, median slope and share of panels
    read there. Cells are placed by what the same fit read on their panels (``measured_share``, ``measured_rho``),
    not by the noise they were drawn with; the distance is over log N, log share and rho, each scaled by its range
    over the map. ``inside`` says whether the panel lies within the map's range on every axis."""
    cells = table.groupby(["n", "share", "rho"], sort=True)[["measured_share", "measured_rho"]].mean().reset_index()
    grid = np.column_stack([np.log(cells.n), np.log(cells.measured_share.clip(lower=1e-6)), cells.measured_rho])
    point = np.array([np.log(n), np.log(max(share, 1e-6)), rho])
    span = np.ptp(grid, axis=0)
    best = cells.iloc[int(np.argmin((((grid - point) / np.where(span > 0, span, 1)) ** 2).sum(axis=1)))]
    here = table[(table.n == best.n) & (table.share == best.share) & (table.rho == best.rho)]
    inside = bool(np.all((point >= grid.min(axis=0) - 1e-9) & (point <= grid.max(axis=0) + 1e-9)))
    return {"n": int(best.n), "share": float(best.share), "rho": float(best.rho), "inside": inside,
            "measured_share": float(best.measured_share), "measured_rho": float(best.measured_rho),
            "panels": int(here.panels.min()),
            **{measure: dict(zip(here.method, here[measure].astype(float), strict=True))
               for measure in ("median_spearman", "median_slope", "share_read")}}


def map_record(folder: str | Path) -> dict | None:
    """The committed map's record (settings, code, machine, minutes), or None."""
    path = Path(folder) / "reach.json"
    return json.loads(path.read_text()) if path.is_file() else None
