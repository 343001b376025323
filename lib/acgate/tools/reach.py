"""Measure AC-GATE's reach map (:mod:`acgate.audit.reach`): how each method's k* ranks (Spearman) and spans (slope
of k* on the truth) the true lags on panels of the project's DGP over entities N, lagged share and noise rho.

    python -m acgate.tools.reach --jobs 2                        # the committed map: 27 cells, 20 panels each
    python -m acgate.tools.reach --n 40 150 --replicates 5       # a smaller try
    python -m acgate.tools.reach --methods acgate --overlay off.yaml --out tables/reach/gate_memory_off
                                                   # off.yaml: "model: {gate_memory: false}", AC-GATE without memory

A cell's panels (:func:`reach_panel`) are the DGP of ``--domain`` (default synthetic_linear: lag centres from 3 to
10 along the latent moderator, 30 steps, K = 10) with N entities, drawn without its target noise, plus Gaussian AR(1)
noise of coefficient rho (stationary from the first step, its own stream) whose variance makes the true lagged term
the cell's share of the target steps' variance. Each panel is also measured as a user's panel is
(:func:`acgate.audit.surrogates.fit_source`: the pooled curve's share and the noise model's rho), and the audit places
a panel by those. Each panel (seeds 0..replicates-1 of every cell) is fitted once per method (seed 0; AC-GATE with the
domain's model and training settings).

Writes ``<out>/reach.csv`` (one row per panel and method), ``<out>/reach_summary.csv`` (per cell and method,
:func:`summary`) and ``<out>/reach.json`` (the settings, params, git SHA,
packages, machine, load average and minutes), and prints the summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import time
from pathlib import Path

import numpy as np
import pandas as pd

from acgate import processes
from acgate.audit import reach, surrogates
from acgate.audit.calibration import lagged_part
from acgate.config import Params, load_params
from acgate.data import dgp
from acgate.data.panel import Panel
from acgate.layout import project_root
from acgate.runs import machine, manifest, write_csv, write_json
from acgate.tools.lag_recovery import FITTED, method_lags, recovery

METHODS = ("moderated_dl", "neural_dl", "acgate")
GRID = {"n": (40, 150, 600), "share": (0.05, 0.2, 0.7), "rho": (0.0, 0.8, 0.95)}
NOISE_SALT = 3  # the noise's stream: default_rng([seed, NOISE_SALT]), apart from the DGP's own draws


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
    k* on the truth, the share of panels where both reached :data:`acgate.audit.reach.GOOD` (``share_read``), the
    mean absolute error and bias of k*, and the mean lagged share and rho that the audit's own fit read on the cell's
    panels."""
    table = table.assign(read=(table.spearman >= reach.GOOD) & (table.slope >= reach.GOOD))
    grouped = table.groupby(["n", "share", "rho", "method"], sort=True)
    return pd.DataFrame({
        "panels": grouped.size(), "median_spearman": grouped["spearman"].median(),
        "mean_spearman": grouped["spearman"].mean(), "sd_spearman": grouped["spearman"].std(),
        "median_slope": grouped["slope"].median(), "share_read": grouped["read"].mean(),
        "mean_mae": grouped["mae"].mean(), "mean_bias": grouped["bias"].mean(),
        "measured_share": grouped["measured_share"].mean(), "measured_rho": grouped["measured_rho"].mean(),
    }).round(3).reset_index()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m acgate.tools.reach", description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="synthetic_linear",
                        help="a synthetic domain: its DGP draws the panels, its model and training settings fit them")
    parser.add_argument("--n", type=int, nargs="+", default=list(GRID["n"]), help="entities of the cells")
    parser.add_argument("--share", type=float, nargs="+", default=list(GRID["share"]),
                        help="lagged shares of the target's variance, each in (0, 1)")
    parser.add_argument("--rho", type=float, nargs="+", default=list(GRID["rho"]),
                        help="AR(1) coefficients of the noise, each in [0, 1)")
    parser.add_argument("--replicates", type=int, default=20, help="panels of each cell (seeds 0, 1, ...)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=FITTED, metavar="METHOD",
                        help=f"methods fitted on each panel, of: {', '.join(FITTED)}")
    parser.add_argument("--overlay", default=None,
                        help="a params file laid over the domain's (as params/smoke.yaml is): other model settings")
    parser.add_argument("--out", default="tables/reach", help="folder of the output files")
    parser.add_argument("--jobs", type=int, default=1, help="panels fitted at once, one process each")
    args = parser.parse_args(argv)
    params = load_params(project_root() / "params" / f"{args.domain}.yaml", args.overlay)
    if params.kind != "synthetic":
        parser.error(f"--domain {args.domain}: the map needs a synthetic domain, whose DGP draws its panels")
    bad = [s for s in args.share if not 0 < s < 1] + [r for r in args.rho if not 0 <= r < 1]
    if bad or args.replicates < 1 or min(args.n) < 2:
        parser.error("each --share must lie in (0, 1), each --rho in [0, 1), --n at least 2, --replicates at least 1")
    cells = list(itertools.product(args.n, args.share, args.rho))
    plan = [(cell, seed) for cell in cells for seed in range(args.replicates)]
    record = {**manifest(params.to_dict(), seed=0, device="cpu"), "settings": vars(args), "machine": machine()}
    start = time.perf_counter()
    work = functools.partial(cell_rows, params, tuple(args.methods))
    rows = processes.in_order(work, plan, args.jobs, "reach panels", every=20)
    table = pd.DataFrame([row for group in rows for row in group])
    out = Path(args.out)
    write_csv(out / "reach.csv", table, index=False)
    found = summary(table)
    write_csv(out / "reach_summary.csv", found, index=False)
    write_json(out / "reach.json", {**record, "minutes": round((time.perf_counter() - start) / 60, 1)})
    print(found.to_string(index=False))


if __name__ == "__main__":  # run as acgate.tools.reach, not __main__: the worker processes find the work by name
    from acgate.tools.reach import main as imported_main

    imported_main()
