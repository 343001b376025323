"""An example panel in the long CSV format a user would bring, generated from the synthetic DGP (not real data):
a small one for ``params/example_panel.yaml`` and a large one for ``params/example_panel_large.yaml``.

    python -m acgate.data.example                 # data/raw/example_panel.csv: 40 regions × 25 years
    python -m acgate.data.example --large         # data/raw/example_panel_large.csv: 20,000 regions × 60 years
    python -m acgate.data.example --regions 3000 --years 40 my_panel.csv

Columns: region, year, outcome (target), driver (sequential input), capacity and openness (time-varying, noisy
readings of the regions' latent moderator: proxies as training-window means), size (constant per region: a
static feature), governance (a stratifier related to the moderator), survey_noise (an unrelated stratifier) and
true_lag (each region's lag centre in the simulation, constant per region: what ``audit.true_lag`` points at, so
L3 is audited as for the synthetic panels).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np
import pandas as pd

from acgate.config import SyntheticConfig
from acgate.data.dgp import simulate
from acgate.runs import write_csv

FIRST_YEAR = 2000


SMALL, LARGE = (40, 25), (20_000, 60)  # regions × years of params/example_panel.yaml and example_panel_large.yaml


def split_years(n_years: int) -> tuple[int, int]:
    """The first validation and test year: the last 32 % of the years held out, half of them for the test (2017
    and 2021 for 25 years, 2041 and 2050 for 60)."""
    return FIRST_YEAR + round(0.68 * n_years), FIRST_YEAR + round(0.84 * n_years)


def example_frame(seed: int = 0, n_regions: int = SMALL[0], n_years: int = SMALL[1]) -> pd.DataFrame:
    cfg = dataclasses.replace(SyntheticConfig(), n_entities=n_regions, n_steps=n_years, lag_horizon=6)
    val_start, test_start = (year - FIRST_YEAR for year in split_years(n_years))
    panel = simulate(cfg, seed, val_start=val_start, test_start=test_start)
    rng = np.random.default_rng([seed, 1])
    z = panel.truth["z"][:, None]
    shape = (n_regions, n_years)
    width = max(2, len(str(n_regions - 1)))
    frame = pd.DataFrame({
        "region": np.repeat([f"region_{i:0{width}d}" for i in range(n_regions)], n_years),
        "year": np.tile(np.arange(FIRST_YEAR, FIRST_YEAR + n_years), n_regions),
        "outcome": panel.Y.ravel(),
        "driver": panel.X[:, :, 0].ravel(),
        "capacity": (z + rng.normal(0, 0.05, shape)).ravel(),
        "openness": (np.sqrt(z) + rng.normal(0, 0.05, shape)).ravel(),
        "size": np.repeat(np.round(rng.lognormal(3, 0.5, n_regions), 1), n_years),
        # related to the moderator, but with a region-level deviation of its own: not a copy of the proxies
        "governance": (1 - 0.7 * z + rng.normal(0, 0.15, (n_regions, 1)) + rng.normal(0, 0.1, shape)).ravel(),
        "survey_noise": rng.normal(0, 1, shape).ravel(),
        "true_lag": np.repeat(panel.truth["kstar_true"], n_years),
    })
    missing = rng.choice(len(frame), size=len(frame) // 50, replace=False)  # a few unobserved outcomes
    frame.loc[missing, "outcome"] = np.nan
    return frame


def write_example(path: Path, seed: int = 0, n_regions: int = SMALL[0], n_years: int = SMALL[1]) -> Path:
    frame = example_frame(seed, n_regions, n_years)
    write_csv(Path(path), frame, index=False)
    return Path(path)


def main(argv: list[str] | None = None) -> None:
    from acgate.layout import project_root

    parser = argparse.ArgumentParser(prog="python -m acgate.data.example", description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", help="the CSV to write (default: data/raw/example_panel.csv, or "
                                                "example_panel_large.csv with --large)")
    parser.add_argument("--large", action="store_true",
                        help=f"{LARGE[0]:,} regions × {LARGE[1]} years, for params/example_panel_large.yaml")
    parser.add_argument("--regions", type=int, help=f"number of regions (default {SMALL[0]})")
    parser.add_argument("--years", type=int, help=f"number of years from {FIRST_YEAR} (default {SMALL[1]})")
    parser.add_argument("--seed", type=int, default=0, help="the DGP's seed")
    args = parser.parse_args(argv)
    regions, years = LARGE if args.large else SMALL
    regions, years = args.regions or regions, args.years or years
    if regions < 2 or years < 10:
        parser.error(f"--regions {regions} --years {years}: at least 2 regions and 10 years")
    name = "example_panel_large.csv" if args.large else "example_panel.csv"
    target = Path(args.path) if args.path else project_root() / "data" / "raw" / name
    start = time.perf_counter()
    write_example(target, args.seed, regions, years)
    val_start, test_start = split_years(years)
    print(f"wrote {target}: {regions:,} regions × {years} years ({FIRST_YEAR}-{FIRST_YEAR + years - 1}; validation "
          f"from {val_start}, test from {test_start}) in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
