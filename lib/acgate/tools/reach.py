"""Measure AC-GATE's reach map (:mod:`acgate.audit.reach`): the Spearman of each method's k* with the true lags on
panels of the project's DGP over entities N, lagged share and noise persistence rho.

    python -m acgate.tools.reach --jobs 2                        # the committed map: 27 cells, 20 panels each
    python -m acgate.tools.reach --n 40 150 --replicates 5       # a smaller try

Each panel (seeds 0..replicates-1 of every cell) is fitted once per method (seed 0; AC-GATE with the domain's model
and training settings). Writes ``<out>/reach.csv`` (one row per panel and method), ``<out>/reach_summary.csv`` (per
cell and method, :func:`acgate.audit.reach.summary`) and ``<out>/reach.json`` (the settings, params, git SHA,
packages, machine, load average and minutes), and prints the summary.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import time
from pathlib import Path

import pandas as pd

from acgate import processes
from acgate.audit import reach
from acgate.config import load_params
from acgate.layout import project_root
from acgate.runs import machine, manifest, write_csv, write_json
from acgate.tools.lag_recovery import FITTED

METHODS = ("moderated_dl", "neural_dl", "acgate")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m acgate.tools.reach", description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="synthetic_linear",
                        help="a synthetic domain: its DGP draws the panels, its model and training settings fit them")
    parser.add_argument("--n", type=int, nargs="+", default=list(reach.GRID["n"]), help="entities of the cells")
    parser.add_argument("--share", type=float, nargs="+", default=list(reach.GRID["share"]),
                        help="lagged shares of the target's variance, each in (0, 1)")
    parser.add_argument("--rho", type=float, nargs="+", default=list(reach.GRID["rho"]),
                        help="AR(1) coefficients of the noise, each in [0, 1)")
    parser.add_argument("--replicates", type=int, default=20, help="panels of each cell (seeds 0, 1, ...)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=FITTED, metavar="METHOD",
                        help=f"methods fitted on each panel, of: {', '.join(FITTED)}")
    parser.add_argument("--out", default="tables/reach", help="folder of the output files")
    parser.add_argument("--jobs", type=int, default=1, help="panels fitted at once, one process each")
    args = parser.parse_args(argv)
    params = load_params(project_root() / "params" / f"{args.domain}.yaml")
    if params.kind != "synthetic":
        parser.error(f"--domain {args.domain}: the map needs a synthetic domain, whose DGP draws its panels")
    bad = [s for s in args.share if not 0 < s < 1] + [r for r in args.rho if not 0 <= r < 1]
    if bad or args.replicates < 1 or min(args.n) < 2:
        parser.error("each --share must lie in (0, 1), each --rho in [0, 1), --n at least 2, --replicates at least 1")
    cells = list(itertools.product(args.n, args.share, args.rho))
    plan = [(cell, seed) for cell in cells for seed in range(args.replicates)]
    record = {**manifest(params.to_dict(), seed=0, device="cpu"), "settings": vars(args), "machine": machine()}
    start = time.perf_counter()
    work = functools.partial(reach.cell_rows, params, tuple(args.methods))
    rows = processes.in_order(work, plan, args.jobs, "reach panels", every=20)
    table = pd.DataFrame([row for group in rows for row in group])
    out = Path(args.out)
    write_csv(out / "reach.csv", table, index=False)
    found = reach.summary(table)
    write_csv(out / "reach_summary.csv", found, index=False)
    write_json(out / "reach.json", {**record, "minutes": round((time.perf_counter() - start) / 60, 1)})
    print(found.to_string(index=False))


if __name__ == "__main__":  # run as acgate.tools.reach, not __main__: the worker processes find the work by name
    from acgate.tools.reach import main as imported_main

    imported_main()
