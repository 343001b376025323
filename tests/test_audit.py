"""Audit statistics against independent computations, and the audit of hand-built runs folders whose
k* is known, so every layer's rule can be checked exactly."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from acgate import audit
from acgate.panel import Panel

# --- hand-built runs folders


N, K = 60, 10


def make_domain(root, domain, seeds, methods, kstar_of, shared_entities=False, noise_proxy=False,
                error_sd=lambda method: 0.1 if method == "acgate" else 0.2):
    """Write panels and finished runs whose k* per entity is ``kstar_of(method, seed, z, rng)`` and whose test
    predictions miss the target (0) by N(0, error_sd(method)) draws."""
    for seed in seeds:
        rng = np.random.default_rng(100 + (0 if shared_entities else seed))
        z = rng.uniform(size=N)
        entities = np.array([f"c{i:02d}" for i in range(N)])
        proxy = rng.normal(size=N) if noise_proxy else z + rng.normal(0, 0.01, N)
        panel = Panel(entities=entities, times=np.arange(12), X=np.zeros((N, 12, 1), np.float32),
                      Y=np.zeros((N, 12), np.float32), P=np.stack([proxy, rng.normal(size=N)], 1),
                      S=np.zeros((N, 0)), feature_names=["x"], proxy_names=["z", "other"], static_names=[],
                      val_start=8, test_start=10,
                      stratifiers=pd.DataFrame({"latent_z": z, "noise": rng.normal(size=N)},
                                               index=pd.Index(entities, name="entity")))
        panel.save(root / "data" / "processed" / domain / ("" if shared_entities else f"seed{seed:02d}"))
        truth = np.clip(np.round(3 + 7 * (1 - z)), 1, K)
        for method in methods:
            kstar = kstar_of(method, seed, z, np.random.default_rng([seed, len(method)]))
            out = root / "runs" / domain / f"seed{seed:02d}" / method
            out.mkdir(parents=True)
            pd.DataFrame({"entity": entities, "kstar": kstar, "kstar_kind": "structural", "kstar_true": truth,
                          "dgp_mean_lag": truth}).to_csv(out / "lags.csv", index=False)
            times = np.arange(5, 12)  # targets after K = 5 warm-up steps (the smoke profile)
            rows = pd.DataFrame({"entity": np.repeat(entities, len(times)), "time": np.tile(times, N)})
            rows["split"] = np.where(rows.time < 8, "train", np.where(rows.time < 10, "val", "test"))
            rows["y"] = 0.0
            rows["y_hat"] = np.random.default_rng([seed, len(method), 1]).normal(0, error_sd(method), len(rows))
            rows.to_csv(out / "predictions.csv", index=False)
            (out / "history.csv").write_text("epoch,train_loss,recon_loss,val_loss\n")
            (out / "manifest.json").write_text("{}")
            json.dump({"test": {}}, (out / "metrics.json").open("w"))


def recovering(method, seed, z, rng):
    if method in ("uniform_lag", "no_ac_encoder"):
        return np.full(len(z), 5.5)
    return 3 + 7 * (1 - z) + rng.normal(0, 0.3, len(z))


@pytest.fixture
def params(smoke_params):
    return lambda domain: dataclasses.replace(smoke_params, domain=domain, audit=dataclasses.replace(
        smoke_params.audit, permutations=500))


def test_audit_of_a_recovering_model(tmp_path, params):
    make_domain(tmp_path, "toy", range(8), ["acgate", "uniform_lag"], recovering)
    result = audit.audit_domain(params("toy"), tmp_path / "runs", tmp_path / "data")
    assert result.problems == []
    # L1: the collapsed method is degenerate in every seed and is skipped in L2, with the reason
    assert result.l1[result.l1.method == "uniform_lag"].degenerate_paper.all()
    skipped = result.l2[result.l2.method == "uniform_lag"]
    assert skipped.rho.isna().all() and skipped.skipped.str.startswith("L1 degenerate").all()
    # L2: k* is aligned with latent_z, but latent_z is (almost) the proxy 'z', so it is flagged circular
    s = result.l2_summary.set_index(["method", "stratifier"])
    row = s.loc[("acgate", "latent_z")]
    assert row.circular and row.closest_proxy == "z" and row.max_abs_spearman_with_proxy > 0.95
    assert row.mean_abs_rho > 0.9 and row.share_p_below_alpha == 1.0 and row.sign_consistency == 1.0
    assert row.fisher_p < 1e-10 and row.seeds_tested == 8
    assert "differ across seeds" in row.pooled_note  # synthetic panels: a new draw of entities per seed
    assert not s.loc[("acgate", "noise")].circular
    per_seed = result.l2[(result.l2.method == "acgate") & (result.l2.stratifier == "latent_z")]
    assert row.median_rho == pytest.approx(per_seed.rho.median())
    assert row.fisher_p == pytest.approx(stats.combine_pvalues(per_seed.p_perm, method="fisher").pvalue)
    v = result.verdicts_paper
    assert v["L1"]["verdict"] == "supported"
    assert v["L2"]["verdict"] == "not certified" and "only circular" in v["L2"]["evidence"]
    assert v["L3"]["verdict"] == "supported"
    # the calibrated L1 needs the shared and the shuffled-proxy gate, which were not run here
    c = result.verdicts
    assert c["L1"]["verdict"] == "not certified" and "no_ac_encoder not run" in c["L1"]["evidence"]
    assert c["L2"]["verdict"] == "not certified" and "L1 not supported" in c["L2"]["evidence"]
    assert c["L3"]["verdict"] == "supported"
    assert c["L0"]["verdict"] == "ruled out"
    # the hand-built panels have Y = 0, so persistence is perfect and AC-GATE cannot clear the L0 floor
    assert set(result.l0.method) == {"acgate", "uniform_lag", "persistence"}
    assert (result.l0[result.l0.method == "persistence"].mse == 0).all()
    assert v["L0"]["verdict"] == "ruled out" and "persistence" in v["L0"]["evidence"]
    # L3 numbers are the independent scipy ones
    l3 = result.l3[(result.l3.method == "acgate") & (result.l3.seed == 0)].iloc[0]
    lags = pd.read_csv(tmp_path / "runs" / "toy" / "seed00" / "acgate" / "lags.csv")
    assert l3.spearman_lag_centre == pytest.approx(stats.spearmanr(lags.kstar, lags.kstar_true).statistic)
    assert np.isnan(result.l3[result.l3.method == "uniform_lag"].spearman_lag_centre).all()
    w = result.wilcoxon.set_index(["metric", "method"]).loc[("kstar_mae_lag_centre", "uniform_lag")]
    assert w.mean_diff > 0 and w.p == pytest.approx(2 / 2**8)

    result.write(tmp_path / "out")
    for name in audit.AUDIT_TABLES:
        assert (tmp_path / "out" / f"{name}.csv").is_file()
    assert json.loads((tmp_path / "out" / "verdicts.json").read_text())["verdicts"]["L3"]["verdict"] == "supported"
    back = audit.read_audit(tmp_path / "out")
    assert back.verdicts == result.verdicts and back.verdicts_paper == result.verdicts_paper
    assert back.config == result.config
    assert len(result.kstar_by_entity) == 8 * 2 * N


def test_no_heterogeneity_and_a_noise_stratifier_are_not_certified(tmp_path, params):
    def null(method, seed, z, rng):
        return 5 + rng.normal(0, 0.5, len(z))  # k* varies, but with nothing

    make_domain(tmp_path, "null", range(10), ["acgate"], null, noise_proxy=True)
    result = audit.audit_domain(params("null"), tmp_path / "runs", tmp_path / "data")
    assert result.verdicts["L2"]["verdict"] == "not certified"
    assert result.verdicts_paper["L2"]["verdict"] == "not certified"
    s = result.l2_summary.set_index("stratifier")
    assert s.loc["noise", "fisher_p"] > 0.01 and s.loc["noise", "share_p_below_alpha"] <= 0.3
    assert not s.circular.any()
    assert result.verdicts["L3"]["verdict"] == "ruled out"


def test_seed_pooled_test_on_shared_entities(tmp_path, params):
    make_domain(tmp_path, "real", range(4), ["acgate"], recovering, shared_entities=True, noise_proxy=True)
    result = audit.audit_domain(params("real"), tmp_path / "runs", tmp_path / "data")
    row = result.l2_summary.set_index("stratifier").loc["latent_z"]
    mean_kstar = result.kstar_by_entity.groupby("entity").kstar.mean()
    strat = Panel.load(tmp_path / "data" / "processed" / "real").stratifiers.latent_z
    assert row.pooled_rho == pytest.approx(stats.spearmanr(mean_kstar, strat.loc[mean_kstar.index]).statistic)
    assert row.pooled_p < 0.01 and row.pooled_note == ""
    # the proxy is noise here, so latent_z is not circular and the paper rule supports L2
    assert result.verdicts_paper["L2"]["verdict"] == "supported"
    assert result.shared_entities and not row.fisher_valid
    assert any("training randomness only" in w for w in result.warnings())


def test_incomplete_runs_folder_is_reported_and_the_rest_is_audited(tmp_path, params):
    make_domain(tmp_path, "gaps", range(6), ["acgate", "no_ac_encoder"], recovering)
    (tmp_path / "runs" / "gaps" / "seed03" / "acgate" / "metrics.json").unlink()
    (tmp_path / "runs" / "gaps" / "seed04" / "no_ac_encoder" / "lags.csv").unlink()
    result = audit.audit_domain(params("gaps"), tmp_path / "runs", tmp_path / "data")
    text = "\n".join(result.problems)
    assert "seed03/acgate: metrics.json missing" in text and "seed04/no_ac_encoder: lags.csv missing" in text
    assert "methods have different seeds" in text and "acgate: [0, 1, 2, 4, 5]" in text
    assert set(result.l0[result.l0.method == "acgate"].seed) == {0, 1, 2, 4, 5}
    assert (result.wilcoxon[result.wilcoxon.method == "no_ac_encoder"].n_pairs == 4).all()  # seeds 0, 1, 2, 5
    assert (result.wilcoxon[result.wilcoxon.method == "persistence"].n_pairs == 5).all()  # every acgate seed


def test_missing_domain_is_a_clear_error(tmp_path, params):
    with pytest.raises(FileNotFoundError, match=r"no runs for domain 'absent'.*make paper CONFIG='domains=\[absent\]'"):
        audit.audit_domain(params("absent"), tmp_path / "runs", tmp_path / "data")


def test_proxy_shuffle_comparison_and_verdict_matrix(tmp_path, params):
    def shuffled(method, seed, z, rng):
        return 3 + 7 * rng.uniform(size=len(z))  # the gate no longer follows the entity

    make_domain(tmp_path, "d", range(5), ["acgate"], recovering, noise_proxy=True)
    make_domain(tmp_path, "d_proxy_shuffle", range(5), ["acgate"], shuffled, noise_proxy=True)
    a = audit.audit_domain(params("d"), tmp_path / "runs", tmp_path / "data")
    b = audit.audit_domain(params("d_proxy_shuffle"), tmp_path / "runs", tmp_path / "data")
    table = audit.proxy_shuffle_comparison(a, b).set_index(["run", "stratifier"])
    assert table.loc[("original", "latent_z"), "mean_abs_rho"] > 0.9
    drop = table.loc[("proxy shuffle", "latent_z"), "mean_abs_rho_drop"]
    assert drop == pytest.approx(table.loc[("original", "latent_z"), "mean_abs_rho"]
                                 - table.loc[("proxy shuffle", "latent_z"), "mean_abs_rho"])
    assert drop > 0.6
    matrix = audit.verdict_matrix([a, b])
    assert matrix.loc["d", ("paper", "L2")] == "supported"
    assert matrix.loc["d_proxy_shuffle", ("paper", "L2")] == "not certified"
    assert matrix.loc["d", ("calibrated", "L2")] == "not certified"  # no comparators for the calibrated L1


def test_persistence_hand_worked():
    from acgate.baselines import persistence

    Y = np.array([[1.0, 2.0, 4.0, np.nan, 5.0, 6.0], [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]])
    panel = Panel(entities=np.array(["a", "b"]), times=np.arange(6), X=np.zeros((2, 6, 1)), Y=Y,
                  P=np.array([[0.0], [1.0]]), S=np.zeros((2, 0)), feature_names=["x"], proxy_names=["p"],
                  static_names=[], val_start=3, test_start=5)
    preds = persistence(panel, 2)  # targets t = 2..5; needs y_t and y_{t-1} observed
    a = preds[preds.entity == "a"]
    assert list(a.time) == [2, 5] and list(a.y_hat) == [2.0, 5.0] and list(a.y) == [4.0, 6.0]
    assert list(preds[preds.entity == "b"].y_hat) == [1.0, 0.0, 1.0, 0.0]
    test = preds[preds.split == "test"]
    assert list(test.y - test.y_hat) == [1.0, 1.0]  # t = 5: a 6 - 5, b 1 - 0
