"""acgate.tools.reach: the map's panels have the lagged share and the noise persistence asked for, and its summary
counts a panel as read only where k* both ranks and spans the true lags."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from acgate.audit.calibration import lagged_part
from acgate.config import load_params
from acgate.data import dgp
from acgate.tools import reach

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def params():
    return load_params(ROOT / "params" / "synthetic_linear.yaml")


@pytest.mark.parametrize("share, rho", [(0.05, 0.0), (0.2, 0.8), (0.7, 0.95)])
def test_a_cells_panel_has_the_share_and_persistence_asked_for(params, share, rho):
    """Against the DGP drawn without its noise (the same seed): the added noise's lag-1 autocorrelation, pooled over
    entities and steps, is rho; its variance is the same at the first step as at the last (stationary from the
    start); and the true lagged term holds ``share`` of the target steps' variance."""
    panel = reach.reach_panel(params, 600, share, rho, seed=4)
    cfg = dataclasses.replace(params.synthetic, n_entities=600, noise_sd=0.0)
    clean = dgp.simulate(cfg, 4, params.split.val_start, params.split.test_start)
    noise = panel.Y.astype(float) - clean.Y.astype(float)
    pooled = np.corrcoef(noise[:, :-1].ravel(), noise[:, 1:].ravel())[0, 1]
    assert pooled == pytest.approx(rho, abs=0.02)
    assert noise[:, 0].var() / noise[:, -1].var() == pytest.approx(1, abs=0.2)
    steps = slice(cfg.lag_horizon, None)
    lagged = lagged_part(clean.X[:, :, 0].astype(float), clean.truth["lag_weights"])[:, steps]
    assert lagged.var() / panel.Y[:, steps].astype(float).var() == pytest.approx(share, rel=0.1)


def test_a_share_the_dgp_cannot_reach_is_refused(params):
    with pytest.raises(ValueError, match="lagged term holds less than share 0.99"):
        reach.reach_panel(params, 40, 0.99, 0.0, seed=0)


def test_a_panel_counts_as_read_only_where_k_star_ranks_and_spans_the_lags():
    """A k* that ranks the lags but barely varies (AC-GATE's gate near its initialisation: Spearman 0.98, slope 0.17)
    is no reading of them."""
    rows = [{"n": 40, "share": 0.05, "rho": 0.0, "seed": s, "method": "acgate", "spearman": sp, "slope": sl,
             "mae": 1.0, "bias": 0.0, "measured_share": 0.03, "measured_rho": 0.0}
            for s, (sp, sl) in enumerate([(0.98, 0.17), (0.9, 0.8), (0.3, 0.9), (np.nan, 0.0)])]
    found = reach.summary(pd.DataFrame(rows))
    assert found.loc[0, "share_read"] == 0.25 and found.loc[0, "panels"] == 4
    assert found.loc[0, "median_spearman"] == 0.9  # NaN (no k* spread) is left out of the median


def test_the_tool_writes_the_map_with_its_record(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("model: {gate_memory: false}\n")
    reach.main(["--n", "30", "--share", "0.3", "--rho", "0.5", "--replicates", "2", "--methods", "moderated_dl",
                "--overlay", str(overlay), "--out", str(tmp_path)])
    table = pd.read_csv(tmp_path / "reach.csv")
    assert len(table) == 2 and set(table.method) == {"moderated_dl"} and table.spearman.between(-1, 1).all()
    summary = pd.read_csv(tmp_path / "reach_summary.csv")
    assert summary[["n", "share", "rho", "panels"]].values.tolist() == [[30, 0.3, 0.5, 2]]
    record = json.loads((tmp_path / "reach.json").read_text())
    assert record["settings"]["replicates"] == 2 and "git_sha" in record and "minutes" in record
    assert record["params"]["model"]["gate_memory"] is False  # the overlay's settings, as the panels were fitted
