"""Does the surrogates' noise model read a panel's noise? ``fit_source``'s AR(1) coefficient, common factor and
factor share against the truth, on surrogates of a real panel whose noise is set.

    python -m acgate.tools.noise_recovery economics --jobs 2     # 20 surrogates in each of 18 cells
    python -m acgate.tools.noise_recovery energy --rhos 0.8 --factors 2 --replicates 40

Each cell draws surrogates of the panel (:func:`acgate.audit.surrogates.draw`, the study's seeds) from its source with
the noise replaced:

- rho (``--rhos``), each entity's innovation sd scaled so that its noise keeps the variance it has at the panel's rho
  (sigma_i sqrt((1 - rho^2) / (1 - rho_panel^2)));
- common factors (``--factors``): 0, none; 1, the panel's own (each entity's loading times its factor); 2, those and
  the ``common_shock`` null's second shock (AR(1) at the cell's rho, as large as the idiosyncratic noise, loadings
  following the proxies);
- lags (``--lags``): ``one_curve`` (one curve for all) or ``proxy_lags_two`` (a 2-lag spread along the proxies).

The noise model then reads each surrogate as the study reads a panel (:func:`acgate.audit.noise.estimate`, with the
domain's ``audit.noise_draws`` simulated panels): its rho,
how many common factors it takes out, the share of the (scaled) noise they hold, Pesaran's CD before and after. The
true share is that of the surrogate's own noise: the mean over entities of its common part's variance over the
noise's, over the steps the noise model reads.

Writes ``<out>/<domain>_noise_recovery.csv`` (one row per surrogate), ``<out>/<domain>_noise_recovery_summary.csv``
(per cell: rho's mean, median, sd and how often it sits at the search's bound, the factors taken out, the shares read
and true, the idiosyncratic CD) and ``<out>/<domain>_noise_recovery.json`` (the settings, params, git SHA, packages,
machine and minutes), and prints the summary.
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
from acgate.audit import gls, noise, panel_matched, surrogates
from acgate.config import Params, load_params
from acgate.data.prep import prepared_panel
from acgate.layout import project_root
from acgate.models.classical import within
from acgate.runs import machine, manifest, write_csv, write_json

RHOS = (0.5, 0.8, 0.95)
FACTORS = (0, 1, 2)
LAGS = ("one_curve", "proxy_lags_two")


def cell_source(source: surrogates.Source, rho: float, factors: int) -> surrogates.Source:
    """``source`` with AR(1) noise at ``rho`` of the panel's variance per entity, and the panel's common factors
    (``factors`` 1 and 2; 2 also adds the second shock when drawn, :func:`surrogate_row`) or none (0)."""
    scale = np.sqrt((1 - rho**2) / (1 - source.rho**2))
    common = source.common if factors >= 1 else np.zeros_like(source.common)
    return dataclasses.replace(source, rho=rho, sigma=source.sigma * scale, common=common)


def true_share(cell: surrogates.Source, lags: str, seed: int, target: str | None, rows: np.ndarray) -> float:
    """The mean over entities of the common part's share of the noise's variance over their ``rows`` (N, S: the
    target steps from K) in the surrogate ``draw(cell, lags, seed, target=target)``, ``lags`` a scenario whose own
    noise is ``one_curve``'s (one of :data:`LAGS`). Draws of the same seed set its parts apart: the same draw with
    ``one_curve``'s noise (without the second shock), with sigma 0 (the same random stream, no idiosyncratic noise)
    and with no noise at all."""
    quiet = dataclasses.replace(cell, sigma=np.zeros_like(cell.sigma))
    bare = dataclasses.replace(quiet, common=np.zeros_like(cell.common))
    full, plain, factor, none = (surrogates.draw(s, lags, seed, target=t).Y.astype(float)[:, cell.max_lag:]
                                 for s, t in ((cell, target), (cell, "one_curve"), (quiet, "one_curve"),
                                              (bare, "one_curve")))
    common, total = (np.sum(within(np.nan_to_num(part), rows) ** 2, axis=1)  # each entity's sum of squares
                     for part in ((factor - none) + (full - plain), full - none))
    usable = (rows.sum(axis=1) >= 3) & (total > 0)
    return float(np.mean(common[usable] / total[usable]))


def surrogate_row(source: surrogates.Source, params: Params, item: tuple[float, int, str, int]) -> dict:
    """The noise model's reading of surrogate ``replicate`` of the cell (rho, factors, lags) beside its truth."""
    rho, factors, lags, replicate = item
    cell = cell_source(source, rho, factors)
    seed = panel_matched.surrogate_seed(lags, replicate)
    target = "common_shock" if factors == 2 else None
    panel = surrogates.draw(cell, lags, seed, target=target)
    found = surrogates.noise_of(panel, params)
    return {"rho": rho, "factors": factors, "lags": lags, "replicate": replicate, "rho_read": found.rho,
            "factors_read": len(found.factors), "share_read": found.factor_share,
            "true_share": true_share(cell, lags, seed, target, gls.lag_design(panel, source.max_lag).rows),
            "cd": found.cd["cd"],
            "cd_idiosyncratic": found.cd_idiosyncratic["cd"]}


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per cell (rho, factors, lags): how the noise model's readings meet the truth."""
    grouped = rows.groupby(["rho", "factors", "lags"], sort=False)
    found = pd.DataFrame({
        "surrogates": grouped.size(), "rho_mean": grouped.rho_read.mean(), "rho_median": grouped.rho_read.median(),
        "rho_sd": grouped.rho_read.std(),
        "rho_at_bound": grouped.rho_read.apply(lambda v: int((v >= noise.MAX_RHO).sum())),
        "factors_read_mean": grouped.factors_read.mean(), "share_read_mean": grouped.share_read.mean(),
        "true_share_mean": grouped.true_share.mean(), "cd_idiosyncratic_mean": grouped.cd_idiosyncratic.mean()})
    found.insert(2, "rho_bias", found.rho_mean - found.index.get_level_values("rho"))
    return found.round(4).reset_index()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m acgate.tools.noise_recovery", description=__doc__.split("\n\n")[0])
    parser.add_argument("domain", help="a data domain with a params file (economics, energy, yours)")
    parser.add_argument("--replicates", type=int, default=20, help="surrogates of each cell")
    parser.add_argument("--rhos", type=float, nargs="+", default=list(RHOS), help="the noise's AR(1) coefficients")
    parser.add_argument("--factors", type=int, nargs="+", default=list(FACTORS), choices=FACTORS,
                        help="common factors: 0 none, 1 the panel's, 2 the panel's and the common_shock null's")
    parser.add_argument("--lags", nargs="+", default=list(LAGS), choices=LAGS, help="the surrogates' lags")
    parser.add_argument("--data-dir", default="data", help="the prepared panel is read from <data-dir>/processed/")
    parser.add_argument("--out", default="runs/noise_recovery", help="folder of the output files")
    parser.add_argument("--jobs", type=int, default=1, help="surrogates read at once, one process each")
    args = parser.parse_args(argv)
    if not all(-1 < rho < 1 for rho in args.rhos):
        parser.error(f"--rhos {args.rhos}: a stationary AR(1) coefficient lies strictly between -1 and 1")
    root = project_root()
    params = load_params(root / "params" / f"{args.domain}.yaml")
    source = surrogates.fit_source(prepared_panel(params, root / args.data_dir), params)
    plan = list(itertools.product(args.rhos, args.factors, args.lags, range(args.replicates)))
    record = {**manifest(params.to_dict(), seed=-1, device="cpu"), "settings": vars(args), "machine": machine(),
              "panel_noise": {k: source.about[k] for k in ("residual_ar1", "common_factors", "factor_share")}}
    start = time.perf_counter()
    rows = pd.DataFrame(processes.in_order(functools.partial(surrogate_row, source, params), plan, args.jobs,
                                           f"{args.domain} surrogates"))
    out = Path(args.out)
    write_csv(out / f"{args.domain}_noise_recovery.csv", rows, index=False)
    found = summary(rows)
    write_csv(out / f"{args.domain}_noise_recovery_summary.csv", found, index=False)
    minutes = round((time.perf_counter() - start) / 60, 1)
    write_json(out / f"{args.domain}_noise_recovery.json", {**record, "minutes": minutes})
    print(found.to_string(index=False))


if __name__ == "__main__":  # run as acgate.tools.noise_recovery, not __main__: the workers find the work by name
    from acgate.tools.noise_recovery import main as imported_main

    imported_main()
