import dataclasses

import numpy as np
import pytest
import torch

from acgate.config import GATE_METHODS, NEURAL_BASELINES
from acgate.models.networks import ACGate, build, lag_windows

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


@pytest.mark.parametrize("memory", [True, False])
def test_without_gate_memory_a_lag_window_reaches_its_own_prediction_only(smoke_params, memory):
    """AC-GATE's k* sat about a lag low on flat panels (4.02 where every lag centre is 5, 3 seeds): the LSTM carries
    an earlier step's lag context to later predictions, so the longer lags need no gate weight. With
    ``model.gate_memory`` false a step's window (all its lags) reaches that step's prediction and no other."""
    cfg = dataclasses.replace(smoke_params.model, gate_memory=memory)
    model = make(cfg)
    windows_, p, s, e = windows(cfg)
    base = model(windows_, p, s, e).y_hat
    changed = windows_.clone()
    changed[:, 2] += 5.0  # every lag of target step K + 2
    y_hat = model(changed, p, s, e).y_hat
    torch.testing.assert_close(y_hat[:, :2], base[:, :2])  # causal either way
    assert not torch.allclose(y_hat[:, 2], base[:, 2])
    assert torch.allclose(y_hat[:, 3:], base[:, 3:]) is not memory
