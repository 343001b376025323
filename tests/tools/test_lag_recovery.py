"""acgate.tools.lag_recovery: the truth it scores against is the surrogates', feature by feature, and its measures
are scipy's and numpy's."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from acgate.audit import surrogates
from acgate.config import load_params
from acgate.models.classical import feature_lags
from acgate.tools import lag_recovery

ROOT = Path(__file__).resolve().parents[2]


def test_recovery_is_scipys_spearman_and_the_mean_errors():
    rng = np.random.default_rng(1)
    truth, kstar = rng.uniform(1, 6, 30), rng.uniform(1, 6, 30)
    found = lag_recovery.recovery(kstar, truth)
    assert found["spearman"] == pytest.approx(stats.spearmanr(kstar, truth).statistic, abs=1e-12)
    assert found["mae"] == pytest.approx(np.abs(kstar - truth).mean())
    assert found["bias"] == pytest.approx(kstar.mean() - truth.mean())
    assert np.isnan(lag_recovery.recovery(kstar, np.full(30, 3.0))["spearman"])  # no lag differs: no ranking


def test_only_the_shifted_features_curves_move(example):
    """A two-feature source: with shifted=(0,) the first feature's curves are the scenario's, the second keeps the
    pooled curve for every entity; without shifted both move, exactly as draw moves them."""
    _, _, source = example
    two = dataclasses.replace(source, curve=np.vstack([source.curve, -0.5 * source.curve[::-1]]))
    both = surrogates.surrogate_curves(two, "proxy_lags_two")
    first = surrogates.surrogate_curves(two, "proxy_lags_two", shifted=(0,))
    assert np.array_equal(first[:, 0], both[:, 0]) and not np.allclose(both[:, 1], two.curve[1])
    assert np.array_equal(first[:, 1], np.broadcast_to(two.curve[1], first[:, 1].shape))
    lags = feature_lags(first)
    assert np.ptp(lags[:, 1]) == 0 and np.std(lags[:, 0]) > 0.5


def test_draw_moves_the_named_features_as_it_moves_all(example):
    """Naming every feature moves what leaving ``shifted`` out moves: the same target, to float rounding."""
    _, _, source = example
    every = tuple(range(source.curve.shape[0]))
    alone, named = (surrogates.draw(source, "proxy_lags_two", 5, shifted) for shifted in (None, every))
    assert np.allclose(alone.Y, named.Y, rtol=1e-6, equal_nan=True)
    assert named.meta["shifted_features"] == list(every) and "shifted_features" not in alone.meta


def test_the_summary_is_per_scenario_and_method():
    """Means, the mean absolute Spearman with the direction and sample sds, per scenario and method (to 3 places)."""
    table = pd.DataFrame({"scenario": ["a"] * 4, "replicate": [0, 0, 1, 1], "method": ["m", "n"] * 2,
                          "spearman": [0.5, 0.1, 0.7, 0.3], "direction_spearman": [-0.4, 0.2, 0.6, 0.2],
                          "mae": [1.0, 2.0, 3.0, 4.0]})
    found = lag_recovery.summary(table).set_index("method")
    assert found.loc["m", "panels"] == 2 and found.loc["m", "mean_spearman"] == pytest.approx(0.6)
    assert found.loc["m", "mean_abs_direction_spearman"] == pytest.approx(0.5)
    assert found.loc["m", "mean_direction_spearman"] == pytest.approx(0.1)
    assert found.loc["m", "sd_direction_spearman"] == pytest.approx(np.std([-0.4, 0.6], ddof=1), abs=1e-3)  # rounded
    assert found.loc["n", "mean_mae"] == pytest.approx(3.0)
    assert found.loc["n", "sd_spearman"] == pytest.approx(np.std([0.1, 0.3], ddof=1), abs=1e-3)


def test_a_surrogates_rows(example):
    """One row per method; where the lags do not differ no Spearman and a truth of sd 0; where they differ by two
    lags along the proxies the distributed lags rank them, as they rank the proxies' direction."""
    params, _, source = example
    flat = lag_recovery.surrogate_rows(source, params, ("moderated_dl", "neural_dl"), None, ("one_curve", 0))
    spread = lag_recovery.surrogate_rows(source, params, ("moderated_dl", "neural_dl"), None, ("proxy_lags_two", 0))
    assert [r["method"] for r in flat] == ["moderated_dl", "neural_dl"]
    assert all(np.isnan(r["spearman"]) and r["truth_sd"] < 1e-9 for r in flat)
    feature = source.panel.feature_names[0]
    for row in spread:
        assert row["truth_sd"] > 1 and row["spearman"] > 0.5, row
        # the true lags move along the proxies' direction: ranking them and ranking the direction nearly coincide
        assert abs(row["direction_spearman"] - row["spearman"]) < 0.1, row
        assert row[f"{feature}:spearman"] == pytest.approx(row["spearman"])  # one feature: its k* is the pooled one


def test_an_overlay_sets_the_dgp_the_tool_draws(tmp_path):
    """A synthetic domain under an overlay: its panels are the overlay's DGP (every lag centre at 3, not the file's
    5), scored as surrogate_rows scores that DGP's panel, and the record's params say so."""
    overlay = tmp_path / "centre3.yaml"
    overlay.write_text("synthetic: {constant_centre: 3, n_entities: 30}\n")
    lag_recovery.main(["synthetic_null", "--overlay", str(overlay), "--replicates", "1", "--methods", "moderated_dl",
                       "--out", str(tmp_path)])
    row = pd.read_csv(tmp_path / "synthetic_null_lag_recovery.csv").iloc[0]
    overlaid = load_params(ROOT / "params" / "synthetic_null.yaml", overlay)
    base = load_params(ROOT / "params" / "synthetic_null.yaml")
    base = dataclasses.replace(base, synthetic=dataclasses.replace(base.synthetic, n_entities=30))
    expected, = lag_recovery.surrogate_rows(None, overlaid, ("moderated_dl",), None, ("constant", 0))
    centre5, = lag_recovery.surrogate_rows(None, base, ("moderated_dl",), None, ("constant", 0))
    assert row.truth_sd < 1e-9 and row.bias == pytest.approx(expected["bias"]) and row.mae == pytest.approx(
        expected["mae"])
    assert abs(centre5["bias"] - expected["bias"]) > 1e-3  # the file's own DGP would have scored otherwise
    record = json.loads((tmp_path / "synthetic_null_lag_recovery.json").read_text())
    assert record["params"]["synthetic"]["constant_centre"] == 3 and record["settings"]["overlay"] == str(overlay)
