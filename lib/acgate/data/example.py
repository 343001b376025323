"""A small example panel in the long CSV format a user would bring, generated from the synthetic DGP (not real
data), for ``params/example_panel.yaml``:

    python -m acgate.data.example            # writes data/raw/example_panel.csv

Columns: region, year, outcome (target), driver (sequential input), capacity and openness (time-varying, noisy
readings of the regions' latent moderator: proxies as training-window means), size (constant per region: a
static feature), governance (a stratifier related to the moderator), survey_noise (an unrelated stratifier) and
true_lag (each region's lag centre in the simulation, constant per region: what ``audit.true_lag`` points at, so
L3 is audited as for the synthetic panels).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from acgate.config import SyntheticConfig
from acgate.data.dgp import simulate
from acgate.runs import atomic_write

FIRST_YEAR = 2000


def example_frame(seed: int = 0, n_regions: int = 40, n_years: int = 25) -> pd.DataFrame:
    cfg = dataclasses.replace(SyntheticConfig(), n_entities=n_regions, n_steps=n_years, lag_horizon=6)
    panel = simulate(cfg, seed, val_start=17, test_start=21)
    rng = np.random.default_rng([seed, 1])
    z = panel.truth["z"][:, None]
    shape = (n_regions, n_years)
    frame = pd.DataFrame({
        "region": np.repeat([f"region_{i:02d}" for i in range(n_regions)], n_years),
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


def write_example(path: Path, seed: int = 0) -> Path:
    frame = example_frame(seed)
    atomic_write(Path(path), lambda f: frame.to_csv(f, index=False))
    return Path(path)


if __name__ == "__main__":
    from acgate.layout import project_root

    target = Path(sys.argv[1]) if len(sys.argv) > 1 else project_root() / "data" / "raw" / "example_panel.csv"
    print(f"wrote {write_example(target)}")
