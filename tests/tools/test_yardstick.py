"""acgate.tools.yardstick: the calibrated L1 it reads is the audit's, and its counts and intervals are scipy's."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from acgate.audit import panel_matched
from acgate.config import load_params
from acgate.data import prep
from acgate.data.example import write_example
from acgate.data.panel import Panel
from acgate.layout import audit_dir, panel_dir
from acgate.tools import yardstick

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The example panel under the smoke profile, prepared in a temporary folder, and its surrogates' source."""
    tmp = tmp_path_factory.mktemp("yardstick")
    spec = yaml.safe_load((ROOT / "params" / "example_panel.yaml").read_text())
    spec["data"]["csv_file"] = str(write_example(tmp / "example_panel.csv"))
    (tmp / "example_panel.yaml").write_text(yaml.safe_dump(spec))
    params = load_params(tmp / "example_panel.yaml", ROOT / "params" / "smoke_panel.yaml")
    long, source = prep.load_long(params, ROOT)
    prep.save(prep.prepare(long, params, source), panel_dir(tmp / "data", params.domain), {"note": "test"})
    panel = Panel.load(panel_dir(tmp / "data", params.domain))
    return params, tmp, panel_matched.fit_source(panel, params)


def test_its_lag_tests_are_the_audits_of_the_same_surrogate(example):
    """The study's replicate (trained and audited as any) and the yardstick's row of the same surrogate: the same
    p-values, sd(k*) and calibrated L1."""
    params, tmp, source = example
    record, = panel_matched.run_replicate("one_curve", 0, source, params, tmp / "study", seeds=2, neural=0)
    audited = pd.read_csv(audit_dir(tmp / "study" / "runs", "one_curve_r000") / "lag_tests.csv").iloc[0]
    row = yardstick.surrogate_row(source, "one_curve", 0, params.audit)
    for column in ("p_vs_entity_scaled", "p_vs_shared", "kstar_sd", "rho"):
        assert row[column] == pytest.approx(audited[column], rel=1e-9), column
    assert row["p_vs_shared"] > 1 / (params.audit.permutations + 1)  # not the floor: the permutations are the audit's
    assert row["supported"] == (record["calibrated_L1"] == "supported")
    assert 0 <= row["known_rho_p"] <= 1 and row["true_rho"] == source.rho


def test_the_summary_counts_each_test_with_its_interval():
    """Counts below alpha and below the alpha quantile of the one_curve surrogates' p, with scipy's exact intervals."""
    rng = np.random.default_rng(0)
    rows = pd.DataFrame({"scenario": ["one_curve"] * 40 + ["proxy_lags_one"] * 20,
                         "supported": rng.random(60) < 0.3, "known_rho_p": rng.random(60) ** 3})
    found = yardstick.summary(rows, 0.05).set_index("scenario")
    critical = np.quantile(rows.known_rho_p[:40], 0.05)
    positive = rows[rows.scenario == "proxy_lags_one"]
    assert found.size_adjusted_critical_p.iloc[0] == pytest.approx(critical)
    assert found.loc["one_curve", "known_rho_f_size_adjusted"] == (rows.known_rho_p[:40] < critical).sum() == 2
    assert found.loc["proxy_lags_one", "known_rho_f"] == (positive.known_rho_p < 0.05).sum()
    k = int(positive.supported.sum())
    interval = stats.binomtest(k, 20).proportion_ci(method="exact")
    assert (found.loc["proxy_lags_one", "calibrated_l1"], found.loc["proxy_lags_one", "calibrated_l1_low"],
            found.loc["proxy_lags_one", "calibrated_l1_high"]) == (k, round(interval.low, 4), round(interval.high, 4))
    assert "known_rho_f_size_adjusted" not in yardstick.summary(rows[rows.scenario != "one_curve"], 0.05)
