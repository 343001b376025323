"""A user's own panel end to end: the generated example CSV -> 01 prep -> training -> audit."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from acgate.audit import domain_audit as audit
from acgate.audit import lag_tests
from acgate.config import load_params
from acgate.data import prep
from acgate.data.example import write_example
from acgate.data.panel import Panel
from acgate.models import runner

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The example panel's params and a folder holding its CSV and its prepared panel (data/processed/)."""
    tmp = tmp_path_factory.mktemp("own")
    csv = write_example(tmp / "example_panel.csv")
    params = load_params(ROOT / "params" / "example_panel.yaml", ROOT / "params" / "smoke_panel.yaml")
    params = dataclasses.replace(params, data=dataclasses.replace(params.data, csv_file=str(csv)))
    long, source = prep.load_long(params, ROOT)
    prep.save(prep.prepare(long, params, source), tmp / "data" / "processed" / params.domain, {"note": "test"})
    return params, tmp


def test_own_panel_runs_through_prep_training_and_audit(example):
    params, tmp = example
    long, source = prep.load_long(params, ROOT)
    prepared = prep.prepare(long, params, source)
    panel = prepared.panel
    assert panel.n_entities == 40 and panel.proxy_names == ["mean_capacity", "mean_openness"]
    assert panel.static_names == ["size"] and list(panel.stratifiers.columns) == ["mean_governance",
                                                                                  "mean_survey_noise"]
    assert np.isnan(panel.Y).sum() == len(long) // 50  # missing outcomes stay missing
    for seed in (0, 1):
        loaded = prep.panel_for_training(params, seed, tmp / "data")
        for method in ("acgate", "uniform_lag", "moderated_dl", "shared_dl"):
            runner.run_method(loaded, params, method, seed, tmp / "runs", lambda s: None)
    result = audit.audit_domain(params, tmp / "runs", tmp / "data", 2,
                                ["acgate", "uniform_lag", "moderated_dl", "shared_dl"])
    assert result.problems == [] and result.excluded.empty and result.kind == "data"
    summary = result.l2_summary.set_index(["method", "stratifier"])
    assert summary.loc[("acgate", "mean_governance"), "seeds_tested"] == 2
    assert not summary.circular.any()  # governance is related to the moderator but is not a proxy
    assert summary.loc[("acgate", "mean_governance"), "pooled_note"] == ""  # same regions in every seed
    assert set(result.verdicts) == {"L0", "L1", "L2", "L3"}
    # audit.true_lag names the simulated lag of each region, so L3 is audited against it
    np.testing.assert_array_equal(panel.truth["kstar_true"], long.groupby("entity").true_lag.first().to_numpy())
    assert set(result.l3.columns) == {"seed", "method", "mae_lag_centre", "spearman_lag_centre"}
    assert result.verdicts["L3"]["verdict"] != "not claimed" and "mean Spearman" in result.verdicts["L3"]["evidence"]
    # the classical reference is audited too, and compared with AC-GATE on the one truth this panel has
    assert set(result.verdicts_by_reference) == {"acgate", "moderated_dl"}
    recovery = result.neural_vs_classical.query("comparison == 'recovery'").metric
    assert list(recovery) == ["ranking: Spearman(k*, lag centre)", "size: k* MAE against the lag centre"]
    assert set(result.neural_vs_classical_verdict) == {"moderated_dl", "rule"}
    assert set(result.neural_vs_classical_verdict["moderated_dl"]) >= {"forecast", "ranking", "lag_size", "evidence"}
    # one panel, deterministic fits: the seeds replicate nothing, so only the regions carry the test
    pair = result.heldout.set_index(["reference", "comparator"]).loc[("moderated_dl", "shared_dl")]
    assert np.isnan(pair.p_seed_better) and pair.p_better == pair.p_entity_better


def test_proxy_shuffle_domain_permutes_and_records(example, tmp_path):
    params, tmp = example
    twin = dataclasses.replace(params, domain="example_shuffle",
                               data=dataclasses.replace(params.data, proxy_shuffle=True))
    long, source = prep.load_long(twin, ROOT)
    prep.save(prep.prepare(long, twin, source), tmp_path / "processed" / twin.domain, {})
    original = prep.panel_for_training(params, 0, tmp / "data")
    shuffled = prep.panel_for_training(twin, 0, tmp_path)
    order = [list(original.entities).index(e) for e in shuffled.meta["proxy_permutation"]]
    np.testing.assert_array_equal(shuffled.P, original.P[order])
    assert order != list(range(len(order)))
    assert shuffled.stratifiers.equals(original.stratifiers)  # stratifiers stay with their entities
    assert prep.panel_for_training(twin, 1, tmp_path).meta["proxy_permutation"] != shuffled.meta["proxy_permutation"]
    # the digest its runs record and the audit checks: each seed's own proxy order, not the saved panel's
    saved = Panel.load(tmp_path / "processed" / twin.domain)
    assert prep.training_digest(saved, twin, 0) == shuffled.digest() != saved.digest()
    assert prep.training_digest(saved, twin, 1) != shuffled.digest()
    assert prep.training_digest(original, params, 0) == original.digest()


def test_proxy_shuffle_lag_tests_read_a_seeds_permutation(example, tmp_path):
    """The classical L1's lag tests of a proxy-shuffle twin test its first seed's shuffled proxies, as that seed's runs
    were trained on them, not the saved panel's (the original domain's tests)."""
    params, _ = example
    twin = dataclasses.replace(params, domain="example_shuffle",
                               data=dataclasses.replace(params.data, proxy_shuffle=True))
    long, source = prep.load_long(twin, ROOT)
    prep.save(prep.prepare(long, twin, source), tmp_path / "data" / "processed" / twin.domain, {})
    for seed in (0, 1):
        runner.run_method(prep.panel_for_training(twin, seed, tmp_path / "data"), twin, "moderated_dl", seed,
                          tmp_path / "runs", lambda s: None)
    result = audit.audit_domain(twin, tmp_path / "runs", tmp_path / "data", 2, ["moderated_dl"])
    columns = ["p_vs_entity_scaled", "p_vs_shared", "f_vs_shared", "differ_p"]

    def tests_of(panel):
        return lag_tests.table({0: panel}, [], twin.model.max_lag, twin.audit, False)[0][columns]

    assert len(result.lag_tests) == 1 and result.lag_tests.seed.iloc[0] == 0
    assert np.isfinite(result.lag_tests[columns].to_numpy()).all()
    # the GLS fit's k* stands for both seeds, so the classical reference's L2 has its seed-pooled test
    fitted = result.l2_summary.query("method == 'moderated_dl_gls'")
    assert len(fitted) and (fitted.seeds_tested == 2).all() and np.isfinite(fitted.alignment_p).all()
    np.testing.assert_allclose(result.lag_tests[columns], tests_of(prep.panel_for_training(twin, 0, tmp_path / "data")))
    saved = Panel.load(tmp_path / "data" / "processed" / twin.domain)
    assert result.lag_tests.f_vs_shared.iloc[0] != tests_of(saved).f_vs_shared.iloc[0]


def test_missing_processed_panel_says_what_to_run(example, tmp_path):
    params, _ = example
    with pytest.raises(FileNotFoundError, match="run notebooks/01_data_prep.py"):
        prep.panel_for_training(params, 0, tmp_path)
