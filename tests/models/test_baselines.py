"""Baselines: shapes, GA-Net gates, TFT selection, Grouped ARDL on a noiseless panel, and their run artifacts (the
occlusion profile is tested in test_occlusion.py)."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from acgate.data.dgp import simulate
from acgate.data.panel import Panel
from acgate.layout import method_dir
from acgate.models import runner
from acgate.models.baselines import GroupedARDL
from acgate.models.networks import build, lag_windows


def windows(cfg, n=6, steps=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, steps, 2, generator=g)
    return lag_windows(x, cfg.max_lag), torch.randn(n, 3, generator=g), torch.randn(n, 2, generator=g), torch.arange(n)


@pytest.mark.parametrize("method", ["plain_lstm", "tft", "ganet"])
def test_baseline_output_shapes(smoke_params, method):
    cfg = smoke_params.model
    torch.manual_seed(0)
    out = build(cfg, method, 6, 2, 3, 2).eval()(*windows(cfg))
    assert out.y_hat.shape == (6, 12 - cfg.max_lag) and out.omega is None and out.p_hat is None
    if method != "plain_lstm":
        assert out.internal.shape == (6, 12 - cfg.max_lag, cfg.max_lag)
        torch.testing.assert_close(out.internal.sum(dim=-1), torch.ones(6, 12 - cfg.max_lag))


def test_ganet_gates_are_relaxed_in_training_and_binary_at_evaluation(smoke_params):
    cfg = smoke_params.model
    torch.manual_seed(0)
    model = build(cfg, "ganet", 6, 2, 3, 2)
    relaxed = model.train()(*windows(cfg)).gates
    assert ((relaxed > 0) & (relaxed < 1)).all()
    out = model.eval()(*windows(cfg))
    assert set(out.gates.unique().tolist()) <= {0.0, 1.0}
    # attention is renormalised over the open gates: closed positions get exactly zero weight
    assert (out.internal[out.gates == 0] == 0).all()


def test_tft_needs_hidden_divisible_by_heads(smoke_params):
    cfg = dataclasses.replace(smoke_params.model, hidden=18, attention_heads=4)
    with pytest.raises(ValueError, match="model.hidden = 18 must be divisible by model.attention_heads = 4"):
        build(cfg, "tft", 6, 2, 3, 2)


def noiseless_panel(n=30, t_len=40, seed=0, val_start=2028, test_start=2034):
    """y_t = 0.5 + 0.8 x_{t-1} - 0.4 x_{t-3} + 0.3 y_{t-1}, exactly."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, t_len))
    y = np.zeros((n, t_len))
    y[:, :3] = rng.normal(size=(n, 3))
    for t in range(3, t_len):
        y[:, t] = 0.5 + 0.8 * x[:, t - 1] - 0.4 * x[:, t - 3] + 0.3 * y[:, t - 1]
    return Panel(entities=np.array([f"e{i}" for i in range(n)]), times=np.arange(2000, 2000 + t_len),
                 X=x[:, :, None], Y=y, P=rng.normal(size=(n, 1)), S=np.zeros((n, 0)), feature_names=["x"],
                 proxy_names=["p"], static_names=[], val_start=val_start, test_start=test_start)


def test_grouped_ardl_recovers_known_coefficients(smoke_params):
    # K = 3: y_{t-1} = 0.5 + 0.3 y_{t-2} + 0.8 x_{t-2} - 0.4 x_{t-4} needs x_{t-4}, outside the regressors, so the
    # true coefficients are the unique exact fit (with K = 4 the lagged target would be collinear with them)
    panel = noiseless_panel()
    params = dataclasses.replace(smoke_params, model=dataclasses.replace(smoke_params.model, max_lag=3))
    ardl = GroupedARDL.fit(panel, params)
    assert set(ardl.groups) == {"low", "mid", "high"} and all(g["fit"] == "own" for g in ardl.groups.values())
    sx, sy = ardl.norm.X.scale[0], ardl.norm.Y.scale  # coefficients are in standardised units
    for _, row in ardl.coefficients.iterrows():
        assert row["x_lag1"] * sy / sx == pytest.approx(0.8, abs=1e-6)
        assert row["x_lag3"] * sy / sx == pytest.approx(-0.4, abs=1e-6)
        assert row["y_lag1"] == pytest.approx(0.3, abs=1e-6)
        assert abs(row["x_lag2"]) < 1e-6 and abs(row["y_lag2"]) < 1e-6 and abs(row["trend"]) < 1e-6
    preds = ardl.predictions()
    np.testing.assert_allclose(preds.y_hat, preds.y, atol=1e-6)  # test window included: calendar trend aligned
    profile = ardl.lag_profile()[0]
    np.testing.assert_allclose(profile, [0.8 / 1.2, 0, 0.4 / 1.2], atol=1e-6)  # lag 1 = most recent


def test_grouped_ardl_falls_back_to_the_global_fit_for_small_groups(smoke_params):
    panel = noiseless_panel(n=9, t_len=20, val_start=2012, test_start=2016)
    params = dataclasses.replace(smoke_params, model=dataclasses.replace(smoke_params.model, max_lag=4))
    ardl = GroupedARDL.fit(panel, params)
    assert all(g["fit"] == "global" for g in ardl.groups.values())  # 3 entities x 8 years < 3 rows per coefficient


@pytest.mark.parametrize("method", ["grouped_ardl", "ganet"])
def test_baseline_run_artifacts_are_labelled_diagnostic(smoke_params, tmp_path, method):
    panel = simulate(smoke_params.synthetic, 0, smoke_params.split.val_start, smoke_params.split.test_start)
    metrics = runner.run_method(panel, smoke_params, method, 0, tmp_path, lambda s: None)
    out = method_dir(tmp_path, smoke_params.domain, 0, method)
    lags = pd.read_csv(out / "lags.csv")
    assert lags.kstar_kind.iloc[0].startswith("diagnostic")
    assert metrics["lags"]["gate_sensitivity"] is None and "l3" in metrics
    if method == "grouped_ardl":
        assert (out / "coefficients.csv").is_file() and metrics["epochs_run"] is None
    else:
        assert {"internal_1", "kstar_internal"} <= set(lags.columns) and 0 <= metrics["gate_density"] <= 1
