"""Do two grids agree within their seed-to-seed noise? The acceptance check for a change that moves results at
rounding level (a speed change, or float64 normalisers): every seed-level quantity behind the summary and L2
tables, old grid against new, per domain and method (and stratifier), with the verdict matrices side by side.

    python -m acgate.tools.equivalence OLD_RUNS NEW_RUNS OLD_TABLES NEW_TABLES [--out comparison.csv]

A cell agrees when its mean moved by at most two standard errors of the old grid's seeds (2 sd / sqrt(seeds)); a
cell with no spread over seeds (sd 0: a deterministic method) may move only at rounding level (relative 1e-5). A
quantity that is zero but for float rounding in both grids (the k* spread of a shared lag, 1e-15 on one machine and
0 on another) agrees: means both within 1e-12 of zero never count as a move. Old runs are read as they are (every
finished run found), since an old grid's runs were all current when its tables were made.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from acgate.layout import seed_of
from acgate.report.inputs import metrics_row

ROUNDING = 1e-5  # relative change allowed where the seeds do not spread
FLOAT_ZERO = 1e-12  # means this close to zero in both grids are float rounding, whatever the seeds' spread
LONG = ["domain", "method", "seed", "metric", "value"]  # the long frames' columns
SUMMARY_METRICS = ("test_mse", "test_r2_by_time", "test_r2_pooled", "kstar_sd", "omega_entropy",
                   "gate_sensitivity", "mae_lag_centre", "spearman_lag_centre", "mae_dgp_mean_lag",
                   "spearman_dgp_mean_lag")


def run_values(runs_root: Path) -> pd.DataFrame:
    """Long frame (domain, method, seed, metric, value) of every finished run's summarised metrics."""
    rows = []
    for path in sorted(Path(runs_root).glob("*/seed*/*/metrics.json")):
        row = metrics_row(path)
        rows += [{"domain": path.parents[2].name, "method": path.parent.name,
                  "seed": seed_of(path.parents[1]), "metric": metric, "value": row[metric]}
                 for metric in SUMMARY_METRICS if row.get(metric) is not None]
    return pd.DataFrame(rows)


def l2_values(runs_root: Path) -> pd.DataFrame:
    """Long frame of each audit's per-seed L2 rows: |rho| and whether p < alpha, per method and stratifier (no rows
    where no domain was audited, e.g. runs copied back without their audits)."""
    frames = []
    for path in sorted(Path(runs_root).glob("*/audit/l2.csv")):
        l2 = pd.read_csv(path).dropna(subset=["rho"])
        alpha = json.loads((path.parent / "verdicts.json").read_text())["audit"]["alpha"]
        long = pd.concat([l2.assign(metric="abs_rho | " + l2.stratifier, value=l2.rho.abs()),
                          l2.assign(metric="p_below_alpha | " + l2.stratifier, value=(l2.p_perm < alpha) * 1.0)])
        frames.append(long.assign(domain=path.parents[1].name)[LONG])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=LONG).astype({"value": float})


def compare(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Per (domain, method, metric): seeds, old and new mean, old sd, the move in standard errors, and agreement."""
    keys = ["domain", "method", "metric"]
    stats = [frame.groupby(keys).value.agg(["size", "mean", "std"]) for frame in (old, new)]
    table = stats[0].merge(stats[1], left_index=True, right_index=True, suffixes=("_old", "_new")).reset_index()
    table["se"] = table.std_old / np.sqrt(table.size_old)
    table["move"] = table.mean_new - table.mean_old
    undefined = table.mean_old.isna() & table.mean_new.isna()  # e.g. Spearman of a constant k*, in both grids
    spread = table.se.where(table.se > 0)
    # no spread over seeds (a deterministic method such as Grouped ARDL): it may move only at rounding level
    still = np.where(np.isclose(table.mean_new, table.mean_old, rtol=ROUNDING, atol=0), 0.0, np.inf)
    zero = undefined | ((table.mean_old.abs() <= FLOAT_ZERO) & (table.mean_new.abs() <= FLOAT_ZERO))
    table["move_in_se"] = np.where(zero, 0.0, np.where(spread.notna(), table.move.abs() / spread, still))
    table["agrees"] = table.move_in_se <= 2
    return table


def _verdict_rows(matrix: pd.DataFrame) -> pd.DataFrame:
    """A verdict matrix indexed by domain and reference (a matrix from before the classical reference: AC-GATE's)."""
    if "reference" not in matrix:
        matrix = matrix.assign(reference="acgate")
    return matrix.set_index(["domain", "reference"])


def verdicts_agree(old_tables: Path, new_tables: Path) -> tuple[bool, pd.DataFrame]:
    old, new = (_verdict_rows(pd.read_csv(Path(t) / "verdict_matrix.csv")) for t in (old_tables, new_tables))
    both = old.merge(new, how="outer", left_index=True, right_index=True, suffixes=(" (old)", " (new)"))
    # unchanged: every cell of the old matrix is the same in the new one (rows or columns the new grid added, such
    # as a second reference, are shown in ``both`` but do not count as a change)
    return bool(new.reindex(index=old.index, columns=old.columns).equals(old)), both


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m acgate.tools.equivalence", description=__doc__.split("\n\n")[0])
    for name in ("old_runs", "new_runs", "old_tables", "new_tables"):
        parser.add_argument(name, type=Path)
    parser.add_argument("--out", type=Path, help="write the per-cell comparison as CSV")
    args = parser.parse_args(argv)
    table = pd.concat([compare(run_values(args.old_runs), run_values(args.new_runs)),
                       compare(l2_values(args.old_runs), l2_values(args.new_runs))], ignore_index=True)
    if args.out:
        table.to_csv(args.out, index=False)
    same, verdicts = verdicts_agree(args.old_tables, args.new_tables)
    print(f"{int(table.agrees.sum())} of {len(table)} cells within 2 SE; largest move "
          f"{table.move_in_se.max():.2f} SE; verdict matrix {'unchanged' if same else 'CHANGED'}")
    worst = table.sort_values("move_in_se", ascending=False).head(10)
    columns = ["domain", "method", "metric", "size_old", "mean_old", "mean_new", "move_in_se"]
    print(worst[columns].to_string(index=False))
    if not same:
        print(verdicts.to_string())


if __name__ == "__main__":
    main()
