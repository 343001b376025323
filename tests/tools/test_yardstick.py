"""acgate.tools.yardstick: the calibrated L1 it reads is the audit's, and its counts and intervals are scipy's."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from acgate.audit import panel_matched
from acgate.layout import audit_dir
from acgate.tools import yardstick

ROOT = Path(__file__).resolve().parents[2]


def test_its_lag_tests_are_the_audits_of_the_same_surrogate(example):
    """The study's replicate (trained and audited as any) and the yardstick's row of the same surrogate: the same
    p-values, sd(k*), CD of what the GLS fit leaves and calibrated L1."""
    params, tmp, source = example
    record, = panel_matched.run_replicate("one_curve", 0, source, params, tmp / "study", seeds=2, neural=0)
    audited = pd.read_csv(audit_dir(tmp / "study" / "runs", "one_curve_r000") / "lag_tests.csv").iloc[0]
    row = yardstick.surrogate_row(source, "one_curve", 0, params.audit)
    for column in ("p_vs_entity_scaled", "p_vs_shared", "kstar_sd", "rho", "cd_gls"):
        assert row[column] == pytest.approx(audited[column], rel=1e-9), column
    assert row["p_vs_shared"] > 1 / (params.audit.permutations + 1)  # not the floor: the permutations are the audit's
    assert row["supported"] == (record["calibrated_L1"] == "supported")
    assert 0 <= row["known_rho_p"] <= 1 and 0 <= row["known_rho_scaled_p"] <= 1 and row["true_rho"] == source.rho


def _rows(rng: np.random.Generator, scenarios: dict[str, int]) -> pd.DataFrame:
    n = sum(scenarios.values())
    return pd.DataFrame({"scenario": [name for name, k in scenarios.items() for _ in range(k)],
                         "supported": rng.random(n) < 0.3, "p_vs_shared": rng.random(n),
                         "p_vs_entity_scaled": rng.random(n), "known_rho_p": rng.random(n) ** 3,
                         "known_rho_scaled_p": rng.random(n) ** 2, "cd_gls": rng.normal(1, 2, n)})


def test_the_summary_counts_each_test_with_its_interval():
    """Counts below alpha and below the alpha quantile of the one_curve surrogates' p (the only null class here),
    with scipy's exact intervals."""
    rows = _rows(np.random.default_rng(0), {"one_curve": 40, "proxy_lags_one": 20})
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


def test_the_summary_sets_the_panels_cd_among_its_surrogates():
    """Pesaran's CD of what the tests leave: mean and sd per scenario, and how many surrogates reach the panel's."""
    rows = _rows(np.random.default_rng(2), {"one_curve": 30, "common_shock": 25})
    found = yardstick.summary(rows, 0.05, panel_cd=1.9).set_index("scenario")
    for name, group in rows.groupby("scenario"):
        cd = group.cd_gls.to_numpy()
        assert found.loc[name, "cd_gls_mean"] == pytest.approx(cd.mean(), abs=5e-4)
        assert found.loc[name, "cd_gls_sd"] == pytest.approx(cd.std(ddof=1), abs=5e-4)
        assert found.loc[name, "cd_gls_at_least_panel"] == np.sum(cd >= 1.9)
    assert "cd_gls_at_least_panel" not in yardstick.summary(rows, 0.05)  # no panel's CD given


def test_the_yardstick_of_both_tests_takes_each_critical_value_from_all_its_nulls():
    """Against the shared curve the critical p is the lowest alpha quantile over one_curve, common_shock,
    noise_scale and the stratifier nulls (lags that follow no proxy); against the entity-scaled shape over those and
    effect_size; the yardstick of the calibrated L1 rejects where both size-adjusted tests do, and the joint one where
    the larger p is below the lowest alpha quantile of it over every null class; each calibrated test is counted."""
    nulls = ("one_curve", "common_shock", "noise_scale", "stratifier_lags_half", "stratifier_lags_one",
             "stratifier_lags_two")
    rows = _rows(np.random.default_rng(1), {"one_curve": 40, "effect_size": 60, "common_shock": 60,
                                            "noise_scale": 40, "stratifier_lags_half": 40, "stratifier_lags_one": 40,
                                            "stratifier_lags_two": 40, "proxy_lags_two": 30})
    # lower p than one_curve's: the 2-lag stratifier null sets the critical value against the shared curve (its
    # curves differ, so that F rejects there), the 0.5-lag one the other's, effect_size the joint one's
    rows.loc[rows.scenario == "common_shock", "known_rho_p"] **= 3
    rows.loc[rows.scenario == "stratifier_lags_two", "known_rho_p"] **= 5
    rows.loc[rows.scenario == "stratifier_lags_half", "known_rho_scaled_p"] **= 6
    size = rows.scenario == "effect_size"  # both p small together, neither the smallest alone
    rows.loc[size, "known_rho_p"] = rows.loc[size, "known_rho_scaled_p"] = np.random.default_rng(2).random(60) ** 4
    found = yardstick.summary(rows, 0.05).set_index("scenario")

    def quantiles(column: str, names: tuple[str, ...]) -> list[float]:
        return [np.quantile(rows[column][rows.scenario == name], 0.05) for name in names]

    larger = rows.assign(larger=np.maximum(rows.known_rho_p, rows.known_rho_scaled_p))
    shared = min(quantiles("known_rho_p", nulls))
    scaled = min(quantiles("known_rho_scaled_p", (*nulls, "effect_size")))
    joint = min(np.quantile(larger.larger[larger.scenario == name], 0.05) for name in (*nulls, "effect_size"))
    stratifier, shock = quantiles("known_rho_p", ("stratifier_lags_two", "common_shock"))
    assert shared == stratifier < shock
    assert scaled == quantiles("known_rho_scaled_p", ("stratifier_lags_half",))[0]
    assert joint == np.quantile(larger.larger[size], 0.05)
    assert found.size_adjusted_critical_p.iloc[0] == pytest.approx(shared)
    assert found.scaled_size_adjusted_critical_p.iloc[0] == pytest.approx(scaled)
    assert found.joint_size_adjusted_critical_p.iloc[0] == pytest.approx(joint)
    for name, group in larger.groupby("scenario"):
        both = (group.known_rho_p < shared) & (group.known_rho_scaled_p < scaled)
        assert found.loc[name, "known_rho_f_size_adjusted"] == (group.known_rho_p < shared).sum()
        assert found.loc[name, "known_rho_scaled_f_size_adjusted"] == (group.known_rho_scaled_p < scaled).sum()
        assert found.loc[name, "known_rho_both_size_adjusted"] == both.sum()
        assert found.loc[name, "known_rho_joint_size_adjusted"] == (group.larger < joint).sum()
        assert found.loc[name, "vs_shared"] == (group.p_vs_shared < 0.05).sum()
        assert found.loc[name, "vs_entity_scaled"] == (group.p_vs_entity_scaled < 0.05).sum()
    for name in (*nulls, "effect_size"):  # at most alpha in every null class
        for column in ("known_rho_both_size_adjusted", "known_rho_joint_size_adjusted"):
            assert found.loc[name, column] <= 0.05 * found.loc[name, "replicates"]
    alone = yardstick.summary(rows[rows.scenario == "proxy_lags_two"], 0.05)
    assert not {"known_rho_f_size_adjusted", "known_rho_both_size_adjusted", "known_rho_joint_size_adjusted"} & set(
        alone.columns)


def test_a_later_batch_tests_the_surrogates_after_an_earlier_runs(example):
    """--first: the null and positive scenarios' surrogates from that index (the study's seeds of the same surrogates),
    one_curve's critical set from 0 as before."""
    _, _, source = example
    plan = yardstick.surrogate_plan(source, ["effect_size", "proxy_lags_one"], 2, 3, 1, first=200)
    assert plan == [("one_curve", 0), ("one_curve", 1), ("effect_size", 200), ("effect_size", 201),
                    ("effect_size", 202), ("proxy_lags_one", 200)]
    assert yardstick.surrogate_plan(source, ["effect_size"], 0, 2, 1) == [("effect_size", 0), ("effect_size", 1)]


def test_a_batch_appended_to_an_earlier_run_keeps_its_rows_and_records_it(example, tmp_path):
    """--append: the earlier run's rows and the batch's, each scenario together and by replicate, the summary read
    from all of them, the batch's record under added_batches; a batch that repeats a surrogate stops, naming it."""
    _, tmp, _ = example
    common = ["example_panel", "--nulls", "0", "--scenarios", "proxy_lags_one", "--data-dir", str(tmp / "data"),
              "--out", str(tmp_path)]
    yardstick.main([*common, "--critical", "2", "--replicates", "1"])
    earlier = pd.read_csv(tmp_path / "example_panel_yardstick.csv")
    yardstick.main([*common, "--critical", "0", "--replicates", "2", "--first", "1", "--append"])
    table = pd.read_csv(tmp_path / "example_panel_yardstick.csv")
    assert table[["scenario", "replicate"]].values.tolist() == [["one_curve", 0], ["one_curve", 1],
                                                                 ["proxy_lags_one", 0], ["proxy_lags_one", 1],
                                                                 ["proxy_lags_one", 2]]
    pd.testing.assert_frame_equal(table.iloc[:3], earlier)  # the earlier rows as they were
    found = pd.read_csv(tmp_path / "example_panel_yardstick_summary.csv").set_index("scenario")
    assert found.loc["proxy_lags_one", "replicates"] == 3
    assert found.loc["proxy_lags_one", "calibrated_l1"] == table.supported[table.scenario == "proxy_lags_one"].sum()
    record = json.loads((tmp_path / "example_panel_yardstick.json").read_text())
    assert record["settings"]["critical"] == 2 and [b["settings"]["first"] for b in record["added_batches"]] == [1]
    with pytest.raises(ValueError, match="proxy_lags_one 2"):
        yardstick.appended(table, table[table.replicate == 2])
    with pytest.raises(SystemExit):  # a batch of other surrogates than the earlier run's stops
        yardstick.main([*common, "--critical", "0", "--replicates", "1", "--first", "3", "--append", "--noise", "own"])
    assert len(pd.read_csv(tmp_path / "example_panel_yardstick.csv")) == len(table)
