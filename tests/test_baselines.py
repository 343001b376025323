"""Baselines: shapes, GA-Net gates, TFT selection, lag-specific occlusion, Grouped ARDL on a noiseless panel, and
their run artifacts."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from acgate import occlusion, runner, train
from acgate.baselines import GroupedARDL
from acgate.dgp import simulate
from acgate.layout import method_dir
from acgate.models import GRN, Output, _tanh, build, lag_windows
from acgate.panel import Normalisers, Panel


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
    assert float(out.gate_density) == pytest.approx((out.gates == 1).sum().item() / out.gates.numel())  # open share
    # attention is renormalised over the open gates: closed positions get exactly zero weight
    assert (out.internal[out.gates == 0] == 0).all()


@pytest.mark.parametrize("context", [True, False], ids=["query from entity and statics", "no query"])
def test_ganet_with_folded_embedding_is_embedding_then_projecting(smoke_params, context):
    """GA-Net folds its lag embedding into the gate, key and value projections and takes the scores and values
    from the lags directly: the same function of the same parameters as the textbook order (embed every lag, then
    project it), written out here, up to float32 rounding."""
    cfg = smoke_params.model if context else dataclasses.replace(smoke_params.model, entity_embedding=0)
    torch.manual_seed(0)
    model = build(cfg, "ganet", 6, 2, 3, 2 if context else 0).eval()
    with torch.no_grad():  # non-zero embedding biases, so the folded biases are exercised too
        model.lag_embedding.bias.normal_()
    lags, proxies, static, index = windows(cfg)
    static = static if context else static[:, :0]
    embedded = model.lag_embedding(lags)  # (N, T', K, d)
    query = (model.query(torch.cat(model.backbone.entity_context(static, index), dim=-1)) if context
             else torch.zeros(6, cfg.hidden))
    hidden = torch.tanh(model.gate_embedding(embedded) + model.gate_query(query)[:, None, None])
    logits = model.gate_out(hidden).squeeze(-1)
    gates = (logits > 0).float()
    gates = torch.where(gates.sum(-1, keepdim=True) > 0, gates, torch.ones_like(gates))
    scores = (model.key(embedded) * query[:, None, None]).sum(-1) / cfg.hidden ** 0.5
    attention = gates * scores.exp() / (gates * scores.exp()).sum(-1, keepdim=True)
    context = (attention[..., None] * model.value(embedded)).sum(dim=2)
    out = model(lags, proxies, static, index)
    torch.testing.assert_close(out.internal, attention, rtol=1e-5, atol=1e-6)
    identity = (torch.eye(cfg.hidden), None)  # the backbone reading the context itself
    torch.testing.assert_close(out.y_hat, model.backbone(context, identity, static, index), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("training", [False, True], ids=["evaluation", "training"])
def test_tft_lag_selection_with_folded_embedding_is_embedding_then_selecting(smoke_params, training):
    """TFT takes the first layers of its selection network and of its lag transform from the lags with the lag
    embedding folded into their weights (the skip paths still read the embedding): the same function of the same
    parameters as the textbook order (embed every lag; the selection network on the flattened embeddings; the lag
    transform on each), written out here, up to float32 rounding; while training with the same dropout draws (same
    generator state)."""
    cfg = smoke_params.model
    torch.manual_seed(0)
    model = build(cfg, "tft", 6, 2, 3, 2).train(training)
    with torch.no_grad():  # non-zero embedding biases, so the folded biases are exercised too
        model.lag_embedding.bias.normal_()
    lags = windows(cfg)[0]
    context = torch.randn(6, lags.shape[1], cfg.hidden, generator=torch.Generator().manual_seed(2))
    torch.manual_seed(5)
    weights, selected = model.lag_selection(lags, context, noise_steps=lags.shape[1] + 3)
    torch.manual_seed(5)
    embedded = model.lag_embedding(lags)
    textbook = torch.softmax(model.selection_weights(embedded.flatten(start_dim=2), context, lags.shape[1] + 3), dim=-1)
    transformed = model.lag_transform(embedded, noise_steps=lags.shape[1] + 3)
    torch.testing.assert_close(weights, textbook, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(selected, (textbook[..., None] * transformed).sum(dim=2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("d_out", [16, 5])
def test_grn_in_evaluation_is_its_two_products_written_out(d_out):
    """In evaluation a gated residual network takes W2 and the GLU's product as one affine map: the textbook order
    (ELU, W2, GLU, gate, skip, LayerNorm), written out here, up to float32 rounding. In training dropout stands
    between the two, and the module takes them one after the other."""
    torch.manual_seed(0)
    grn = GRN(12, 16, d_out, 0.1, d_context=16).eval()
    a, c = torch.randn(40, 7, 12), torch.randn(40, 7, 16)
    hidden = grn.fc2(torch.nn.functional.elu(grn.fc1(a) + grn.context(c)))
    value, gate = grn.glu(hidden).chunk(2, dim=-1)
    want = grn.norm(grn.skip(a) + value * torch.sigmoid(gate))
    torch.testing.assert_close(grn(a, c), want, rtol=1e-5, atol=1e-6)


def test_ganets_tanh_by_way_of_a_sigmoid_is_tanh():
    """GA-Net's gate network takes tanh on the CPU as 2 sigmoid(2x) - 1: tanh's values to float32 rounding, over
    the range where it saturates too, and tanh's gradient."""
    x = torch.linspace(-12, 12, 20001, dtype=torch.float32).requires_grad_()
    weights = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    ours = _tanh(x)
    (ours * weights).sum().backward()
    grad, x.grad = x.grad, None
    want = torch.tanh(x)
    (want * weights).sum().backward()
    torch.testing.assert_close(ours, want, rtol=0, atol=3e-7)
    torch.testing.assert_close(grad, x.grad, rtol=0, atol=1e-6)


def test_tft_needs_hidden_divisible_by_heads(smoke_params):
    cfg = dataclasses.replace(smoke_params.model, hidden=18, attention_heads=4)
    with pytest.raises(ValueError, match="model.hidden = 18 must be divisible by model.attention_heads = 4"):
        build(cfg, "tft", 6, 2, 3, 2)


class LagOneOnly(torch.nn.Module):
    """Predicts y_t = 2 x_{t-1}: depends on lag 1 of the first feature only."""

    def forward(self, lags, proxies, static, entity_index):
        return Output(y_hat=2 * lags[:, :, 0, 0])


def test_occlusion_of_a_lag_the_prediction_ignores_is_zero(smoke_params):
    panel = simulate(smoke_params.synthetic, 0, smoke_params.split.val_start, smoke_params.split.test_start)
    batch = train.Batch.build(panel, Normalisers.fit(panel), smoke_params.model.max_lag, torch.device("cpu"))
    increase = occlusion.occlusion_increase(LagOneOnly(), batch)
    assert increase.shape == (panel.n_entities, smoke_params.model.max_lag)
    assert (increase[:, 1:] == 0).all() and (increase[:, 0] != 0).any()
    profile = occlusion.profile_from_increase(increase)
    rows = increase[:, 0] > 0
    np.testing.assert_array_equal(profile[rows, 0], 1.0)
    assert np.isnan(profile[~rows]).all()  # no lag matters for these entities: k* undefined, not invented


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
