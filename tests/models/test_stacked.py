import dataclasses
import json

import numpy as np
import pytest
import torch
from torch import nn

from acgate.data.dgp import simulate
from acgate.layout import method_dir
from acgate.models import runner, stacked, train
from tests.models.conftest import quiet


@pytest.fixture(scope="module")
def no_dropout(smoke_params):
    """The smoke profile without dropout (the stack draws its dropout masks in one stream, so only dropout-free
    training can match lone runs number for number), a learning rate that lets the seeds stop at different epochs,
    and a gradient clip that binds (each seed's own norm must scale its gradient)."""
    return dataclasses.replace(smoke_params, model=dataclasses.replace(smoke_params.model, dropout=0.0),
                               train=dataclasses.replace(smoke_params.train, max_epochs=40, patience=3, lr=0.02,
                                                         grad_clip=0.05))


@pytest.fixture(scope="module")
def seed_panels(smoke_params):
    """One synthetic panel per seed, as a synthetic domain draws them."""
    return [simulate(smoke_params.synthetic, seed, smoke_params.split.val_start, smoke_params.split.test_start)
            for seed in range(3)]


def test_the_written_out_lstm_is_pytorchs_lstm():
    torch.manual_seed(0)
    lstm = nn.LSTM(5, 8, num_layers=2, batch_first=True)
    unrolled = stacked.UnrolledLSTM(lstm)
    x = torch.randn(4, 7, 5)
    state = (torch.randn(2, 4, 8), torch.randn(2, 4, 8))
    for given in (None, state):
        expected, _ = lstm(x, given)
        found, _ = unrolled(x, given)
        torch.testing.assert_close(found, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("method", ["acgate", "plain_lstm", "tft", "proxy_shared_gate"])
def test_seeds_trained_stacked_are_their_lone_runs(no_dropout, seed_panels, method):
    seeds = [0, 1, 2]
    lone = [train.fit(panel, no_dropout, method, seed, quiet) for panel, seed in zip(seed_panels, seeds, strict=True)]
    together = stacked.fit_stacked(seed_panels, no_dropout, method, seeds, quiet)
    assert len({result.epochs_run for result in lone}) > 1  # the seeds stop at different epochs
    for alone, stack, panel in zip(lone, together, seed_panels, strict=True):
        assert (stack.epochs_run, stack.best_epoch) == (alone.epochs_run, alone.best_epoch)
        np.testing.assert_allclose(stack.history.to_numpy(), alone.history.to_numpy(), rtol=1e-3, atol=1e-6)
        for name, value in alone.model.state_dict().items():
            torch.testing.assert_close(stack.model.state_dict()[name], value, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(runner.lag_table(stack, panel).kstar, runner.lag_table(alone, panel).kstar,
                                   rtol=0, atol=5e-3)


def test_ganet_trains_stacked_with_its_own_gate_noise(smoke_params, seed_panels):
    together = stacked.fit_stacked(seed_panels[:2], smoke_params, "ganet", [0, 1], quiet)
    assert all(np.isfinite(result.history.to_numpy()).all() for result in together)
    first, second = (result.model.state_dict()["gate_out.weight"] for result in together)
    assert not torch.equal(first, second)


def test_panels_of_different_shapes_are_not_stacked(smoke_params, seed_panels):
    smaller = simulate(dataclasses.replace(smoke_params.synthetic, n_entities=30), 1, smoke_params.split.val_start,
                       smoke_params.split.test_start)
    assert stacked.fit_stacked([seed_panels[0], smaller], smoke_params, "acgate", [0, 1], quiet) is None


def test_run_seeds_writes_each_stacked_seed_and_keeps_them(smoke_params, seed_panels, tmp_path):
    params = dataclasses.replace(smoke_params, train=dataclasses.replace(smoke_params.train, stacked="on"))
    panels = dict(enumerate(seed_panels[:2]))
    written = runner.run_seeds(panels, params, "shuffled_proxies", tmp_path, log=quiet)
    for seed in panels:
        assert written[seed]["stacked_seeds"] == 2
        folder = method_dir(tmp_path, params.domain, seed, "shuffled_proxies")
        assert json.loads((folder / "manifest.json").read_text())["seed"] == seed
        assert (folder / "model.pt").exists() and (folder / "lags.csv").exists()
    # each seed's proxies were permuted as its lone run permutes them
    lone = runner.run_method(panels[1], dataclasses.replace(params, domain="lone"), "shuffled_proxies", 1,
                             tmp_path, log=quiet)
    def permutation(domain, seed):
        record = json.loads((method_dir(tmp_path, domain, seed, "shuffled_proxies") / "manifest.json").read_text())
        return record["panel"]["shuffled_proxies_permutation"]

    assert permutation(params.domain, 1) == permutation("lone", 1) != permutation(params.domain, 0)
    assert written[1]["panel_digest"] == lone["panel_digest"] == panels[1].digest()  # the panel given, not shuffled
    lines = []
    assert runner.run_seeds(panels, params, "shuffled_proxies", tmp_path, log=lines.append) == written
    assert all("kept" in line for line in lines)


def test_runs_trained_together_must_share_their_settings(smoke_params, seed_panels, tmp_path):
    """run_many trains the runs of several domains with the first run's model and train settings: runs whose
    settings differ are refused before anything trains, and no runs at all are nothing to do."""
    faster = dataclasses.replace(smoke_params, domain="other", train=dataclasses.replace(smoke_params.train, lr=0.1))
    runs = {name: runner.RunSpec(seed_panels[0], params, 0, method_dir(tmp_path, params.domain, 0, "acgate"))
            for name, params in (("first", smoke_params), ("other", faster))}
    with pytest.raises(ValueError, match="must share their model and train settings"):
        runner.run_many(runs, "acgate", log=quiet)
    assert not list(tmp_path.rglob("metrics.json"))
    assert runner.run_many({}, "acgate") == {}


def test_stacking_is_off_on_the_cpu_unless_asked(smoke_params):
    def setting(device, stack):
        return dataclasses.replace(smoke_params, train=dataclasses.replace(smoke_params.train, device=device,
                                                                           stacked=stack))

    assert not stacked.wanted(setting("cpu", "auto"), 5)
    assert stacked.wanted(setting("auto", "auto"), 5) == torch.cuda.is_available()
    assert stacked.wanted(setting("cpu", "on"), 5) and not stacked.wanted(setting("cpu", "on"), 1)
    assert not stacked.wanted(setting("auto", "off"), 5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("method", ["acgate", "tft"])
def test_seeds_stacked_on_cuda_are_their_lone_runs_there(no_dropout, seed_panels, method, tmp_path, monkeypatch):
    """In full float32 (cuDNN's LSTM computes in TF32 by default, the written-out one does not) and over a few
    epochs only: over many, the two part by float rounding that training amplifies (measured on an H200 over whole
    runs with TF32 on: validation losses up to 3.5e-2 apart, as lone CUDA runs are from CPU ones)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    on_gpu = dataclasses.replace(no_dropout, train=dataclasses.replace(no_dropout.train, device="cuda",
                                                                       max_epochs=5))
    lone = [train.fit(panel, on_gpu, method, seed, quiet) for seed, panel in enumerate(seed_panels)]
    together = stacked.fit_stacked(seed_panels, on_gpu, method, [0, 1, 2], quiet)
    for alone, stack in zip(lone, together, strict=True):
        assert stack.device.startswith("cuda") and stack.epochs_run == alone.epochs_run
        np.testing.assert_allclose(stack.history.to_numpy(), alone.history.to_numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=f"{method} on CUDA")
    written = runner.run_seeds(dict(enumerate(seed_panels)), on_gpu, method, tmp_path, log=quiet)  # auto: stacked
    assert all(metrics["stacked_seeds"] == 3 and metrics["device"].startswith("cuda") for metrics in written.values())


def test_a_gate_without_memory_trains_stacked_as_alone(no_dropout, seed_panels):
    params = dataclasses.replace(no_dropout, model=dataclasses.replace(no_dropout.model, gate_memory=False))
    lone = [train.fit(panel, params, "acgate", seed, quiet) for seed, panel in enumerate(seed_panels[:2])]
    together = stacked.fit_stacked(seed_panels[:2], params, "acgate", [0, 1], quiet)
    for alone, stack in zip(lone, together, strict=True):
        assert (stack.epochs_run, stack.best_epoch) == (alone.epochs_run, alone.best_epoch)
        np.testing.assert_allclose(stack.history.to_numpy(), alone.history.to_numpy(), rtol=1e-3, atol=1e-6)
