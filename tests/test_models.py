import dataclasses

import numpy as np
import pytest
import torch

from acgate.config import GATE_METHODS, NEURAL_BASELINES
from acgate.models import ACGate, Backbone, StackedLSTM, build, dropout, lag_windows

NEURAL = GATE_METHODS + NEURAL_BASELINES


def make(cfg, method="acgate", n=6, features=2, proxies=3, static=2, seed=0):
    torch.manual_seed(seed)
    return build(cfg, method, n, features, proxies, static).eval()


def inputs(n=6, steps=12, features=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, steps, features, generator=g), torch.randn(n, 3, generator=g),
            torch.randn(n, 2, generator=g), torch.arange(n))


def test_lag_windows_hold_lags_one_to_k_and_never_the_present():
    x = torch.arange(8.0).view(1, 8, 1)  # x_t = t
    w = lag_windows(x, 3)  # targets t = 3..7
    assert w.shape == (1, 5, 3, 1)
    expected = torch.tensor([[t - k for k in (1, 2, 3)] for t in range(3, 8)], dtype=torch.float32)
    torch.testing.assert_close(w[0, :, :, 0], expected)


def windows(cfg, seed=1):
    x, p, s, e = inputs(seed=seed)
    return lag_windows(x, cfg.max_lag), p, s, e


def test_output_shapes(smoke_params):
    cfg = smoke_params.model
    out = make(cfg)(*windows(cfg))
    assert out.y_hat.shape == (6, 12 - cfg.max_lag)
    assert out.omega.shape == (6, cfg.max_lag) and out.z.shape == (6, 1) and out.p_hat.shape == (6, 3)


@pytest.mark.parametrize("method", GATE_METHODS)
def test_lag_weights_are_distributions(smoke_params, method):
    out = make(smoke_params.model, method)(*windows(smoke_params.model))
    torch.testing.assert_close(out.omega.sum(dim=1), torch.ones(6))
    assert (out.omega >= 0).all()


def gate_with_zero_logits(cfg):
    model = make(cfg)
    torch.nn.init.zeros_(model.gate[2].weight)
    torch.nn.init.zeros_(model.gate[2].bias)
    return model.lag_weights(torch.zeros(1, 1))[0].detach().numpy()


def test_position_bias_is_the_same_on_the_k_over_K_scale(smoke_params):
    lam, tau = 0.3, 0.7
    cfg = dataclasses.replace(smoke_params.model, position_penalty=lam, temperature=tau)
    small = gate_with_zero_logits(dataclasses.replace(cfg, max_lag=10))
    large = gate_with_zero_logits(dataclasses.replace(cfg, max_lag=20))
    for K, omega in ((10, small), (20, large)):
        k = np.arange(1, K + 1)
        expected = np.exp(-lam * k / K / tau)
        np.testing.assert_allclose(omega, expected / expected.sum(), rtol=1e-6)
    # the same relative position gets the same log-penalty: lag k of K and lag 2k of 2K
    for k in range(1, 11):
        np.testing.assert_allclose(np.log(small[k - 1] / small[0]), np.log(large[2 * k - 1] / large[1]), rtol=1e-5)
    np.testing.assert_allclose(np.log(small[0] / small[-1]), lam * 0.9 / tau, rtol=1e-5)


@pytest.mark.parametrize("method", NEURAL)
def test_contemporaneous_input_never_reaches_the_prediction(smoke_params, method):
    cfg = smoke_params.model
    model = make(cfg, method)
    x, p, s, e = inputs()
    base = model(lag_windows(x, cfg.max_lag), p, s, e).y_hat
    t = 8  # a target step; prediction index t - K
    changed = x.clone()
    changed[:, t] += 100.0
    y_hat = model(lag_windows(changed, cfg.max_lag), p, s, e).y_hat
    torch.testing.assert_close(y_hat[:, : t - cfg.max_lag + 1], base[:, : t - cfg.max_lag + 1])
    assert not torch.allclose(y_hat[:, t - cfg.max_lag + 1], base[:, t - cfg.max_lag + 1])


def test_ablations_collapse_the_gate(smoke_params):
    cfg = smoke_params.model
    x, p, s, e = windows(cfg)
    no_ac = make(cfg, "no_ac_encoder")(x, p, s, e)
    assert (no_ac.omega == no_ac.omega[0]).all() and (no_ac.z == 0).all()
    uniform = make(cfg, "uniform_lag")(x, p, s, e)
    assert (uniform.omega == 1.0 / cfg.max_lag).all()
    full = make(cfg, "acgate")(x, p, s, e)
    assert not torch.allclose(full.omega[0], full.omega[1])
    # the proxy twin: one gate for all (the shared gate's), while z from the proxies still reaches the forecast
    proxy = make(cfg, "proxy_shared_gate")(x, p, s, e)
    assert (proxy.omega == no_ac.omega).all() and torch.equal(proxy.z, full.z)
    other = make(cfg, "proxy_shared_gate")(x, p.flip(0), s, e)
    assert (other.omega == proxy.omega).all() and not torch.allclose(other.y_hat, proxy.y_hat)


def test_every_method_starts_from_the_same_weights(smoke_params):
    states = [make(smoke_params.model, m, seed=7).state_dict() for m in GATE_METHODS]
    for other in states[1:]:
        assert other.keys() == states[0].keys()
        for key in states[0]:
            torch.testing.assert_close(other[key], states[0][key])
    assert make(smoke_params.model, "no_recon_reg").recon_weight == 0.0
    assert make(smoke_params.model, "acgate").recon_weight == smoke_params.model.recon_weight


def test_detached_reconstruction_sends_no_gradient_to_the_encoder(smoke_params):
    x, p, s, e = windows(smoke_params.model)
    for detach, reaches in ((True, False), (False, True)):
        model = make(dataclasses.replace(smoke_params.model, recon_detach=detach))
        ((model(x, p, s, e).p_hat - p) ** 2).mean().backward()
        grad = model.encoder[0].weight.grad
        assert (grad is not None and grad.abs().sum() > 0) == reaches


def test_unknown_method_is_refused(smoke_params):
    with pytest.raises(ValueError, match="unknown method 'tft'"):
        ACGate(smoke_params.model, "tft", 6, 2, 3, 2)  # a baseline is not an AC-GATE variant
    with pytest.raises(ValueError, match="unknown neural method 'lstm'"):
        make(smoke_params.model, "lstm")


@pytest.mark.parametrize("training", [False, True], ids=["evaluation", "training"])
@pytest.mark.parametrize("embedding, statics", [(True, True), (False, True), (False, False)],
                         ids=["embedding, statics, initial state", "statics", "none"])
def test_backbone_with_folded_step_map_is_projecting_then_running_the_lstm(smoke_params, training, embedding,
                                                                             statics):
    """The backbone folds the step map (here with a bias, as AC-GATE's and Plain LSTM's; GA-Net's has none) and
    the static projection into its first LSTM layer's input weights: the same outputs and parameter gradients as
    the textbook order, written out here (project the step inputs, concatenate the entity embedding and the static
    projection, run the layers, dropout between them), float32 rounding apart; in training with the same draws."""
    cfg = dataclasses.replace(smoke_params.model, lstm_layers=2, dropout=0.3,
                              **({} if embedding else {"entity_embedding": 0}))
    torch.manual_seed(0)
    context = embedding and statics  # with an initial state too
    n_static, init_dim = (2 if statics else 0), (1 if context else 0)
    backbone = Backbone(cfg, 6, n_static, cfg.hidden, init_dim=init_dim).train(training)
    step_map = (torch.randn(cfg.hidden, 3, requires_grad=True), torch.randn(cfg.hidden, requires_grad=True))
    inputs, static, index = torch.randn(6, 7, 3), torch.randn(6, n_static), torch.arange(6)
    init = torch.randn(6, 1) if context else None

    def textbook():
        steps = torch.nn.functional.linear(inputs, *step_map)
        parts = [steps] + [p[:, None, :].expand(-1, 7, -1) for p in backbone.entity_context(static, index)]
        x, state = torch.cat(parts, dim=-1), None
        if context:
            h0, c0 = torch.tanh(backbone.init_state(init)).view(6, 2, 2, -1).permute(1, 2, 0, 3)
            state = (h0.contiguous(), c0.contiguous())
        for i, layer in enumerate(backbone.lstm.layers):
            if i:
                x = dropout(x, 0.3, training, 9, time_major=True)
            x, _ = layer(x, None if state is None else (state[0][i:i + 1], state[1][i:i + 1]))
        return backbone.head(x).squeeze(-1)

    outputs, gradients = [], []
    for forward in (lambda: backbone(inputs, step_map, static, index, init=init, noise_steps=9), textbook):
        torch.manual_seed(3)
        out = forward()
        leaves = [*backbone.parameters(), *step_map]
        grads = torch.autograd.grad(out.square().sum(), leaves, allow_unused=True)
        outputs.append(out)
        gradients.append([torch.zeros_like(w) if g is None else g for w, g in zip(leaves, grads, strict=True)])
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)
    for folded, written_out in zip(*gradients, strict=True):
        torch.testing.assert_close(folded, written_out, rtol=1e-4, atol=1e-5)


def test_backbone_refuses_a_step_map_of_the_wrong_width(smoke_params):
    backbone = Backbone(smoke_params.model, 6, 2, smoke_params.model.hidden)
    inputs = torch.randn(6, 7, 3)
    with pytest.raises(ValueError, match=r"the step map's weight is \(15, 3\); this backbone needs \(16, 3\)"):
        backbone(inputs, (torch.randn(15, 3), None), torch.randn(6, 2), torch.arange(6))


def test_stacked_lstm_and_dropout_draw_what_torch_draws():
    """StackedLSTM runs one layer at a time so that its between-layer dropout can be drawn for more steps than it
    computes: with the same seed it has nn.LSTM's initial weights, outputs and dropout draws (time-major), and it
    loads an nn.LSTM state_dict (runs written before it); models.dropout draws nn.functional.dropout's numbers."""
    torch.manual_seed(0)
    reference = torch.nn.LSTM(5, 16, 3, batch_first=True, dropout=0.3)
    torch.manual_seed(0)
    stacked = StackedLSTM(5, 16, 3, 0.3)
    for i, layer in enumerate(stacked.layers):
        for name, weight in layer.named_parameters():
            assert torch.equal(weight, getattr(reference, name.replace("_l0", f"_l{i}"))), (i, name)
    torch.manual_seed(5)
    loaded = StackedLSTM(5, 16, 3, 0.3)
    loaded.load_state_dict(reference.state_dict())
    x, state = torch.randn(4, 9, 5), (torch.randn(3, 4, 16), torch.randn(3, 4, 16))
    torch.manual_seed(1)
    want, _ = reference(x, state)
    for model in (stacked, loaded):
        torch.manual_seed(1)
        assert torch.equal(model(x, state), want)
    torch.manual_seed(1)
    assert not torch.equal(stacked(x, state, noise_steps=12), want)  # the masks come from 12 steps' draws
    torch.manual_seed(2)
    want = torch.nn.functional.dropout(x, 0.3, True)
    torch.manual_seed(2)
    assert torch.equal(dropout(x, 0.3, True), want)
