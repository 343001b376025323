import dataclasses
import re

import numpy as np
import pandas as pd
import pytest
import torch

from acgate.layout import is_finished, method_dir
from acgate.models import runner, train
from tests.models.conftest import quiet


def test_same_seed_gives_the_same_numbers_on_cpu(smoke_params, panel):
    a = train.fit(panel, smoke_params, "acgate", 5, quiet)
    b = train.fit(panel, smoke_params, "acgate", 5, quiet)
    pd.testing.assert_frame_equal(a.history, b.history)
    np.testing.assert_array_equal(runner.lag_table(a, panel).kstar, runner.lag_table(b, panel).kstar)
    c = train.fit(panel, smoke_params, "acgate", 6, quiet)
    assert not np.array_equal(runner.lag_table(a, panel).kstar, runner.lag_table(c, panel).kstar)


def test_best_validation_checkpoint_is_restored_and_patience_stops(smoke_params, panel):
    params = dataclasses.replace(smoke_params, train=dataclasses.replace(smoke_params.train, max_epochs=60,
                                                                         patience=3, lr=0.05))
    result = train.fit(panel, params, "acgate", 0, quiet)
    h = result.history
    assert result.best_epoch == int(h.epoch[h.val_loss.idxmin()])
    assert result.epochs_run < 60 and result.epochs_run == result.best_epoch + 3
    b = result.batch
    with torch.no_grad():
        restored = train.masked_mse(result.model(*b.inputs()).y_hat, b.y, b.masks["val"])
    assert restored.item() == pytest.approx(h.val_loss.min(), rel=1e-6)


def test_recon_loss_weights_the_anchor_proxy():
    p = torch.zeros(2, 3)
    p_hat = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    # hand-worked: entity 0 error 2*1, entity 1 error 1*1; mean 1.5; weights sum 4 -> 0.375
    assert train.recon_loss(p_hat, p, 2.0).item() == pytest.approx(0.375)
    assert train.recon_loss(p_hat, p, 1.0).item() == pytest.approx(1 / 3)


def test_a_progress_bar_replaces_the_periodic_lines_and_changes_nothing_else(smoke_params, panel, capsys):
    lines, barred = [], []
    plain = train.fit(panel, smoke_params, "acgate", 0, lines.append)
    logged = {e for e in range(1, plain.epochs_run + 1) if e % smoke_params.train.log_every == 0} | {plain.epochs_run}
    assert capsys.readouterr().out == "" and len(lines) == len(logged)
    with_bar = train.fit(panel, smoke_params, "acgate", 0, barred.append, bar=True)
    shown = capsys.readouterr().out
    assert f"acgate seed 0: {100 * with_bar.epochs_run // smoke_params.train.max_epochs:3d}%|" in shown
    assert f"{with_bar.epochs_run}/{smoke_params.train.max_epochs}" in shown and "val " in shown
    assert barred == lines[-1:]  # the line at the stop only
    pd.testing.assert_frame_equal(plain.history, with_bar.history)


def test_a_loss_that_is_not_finite_stops_training_with_a_message(smoke_params, panel):
    exploding = dataclasses.replace(smoke_params, train=dataclasses.replace(smoke_params.train, lr=1e20))
    with pytest.raises(train.TrainingError, match=r"\[acgate seed 0\] a loss is not finite at epoch \d+ .* lower "
                                                  r"train.lr"):
        train.fit(panel, exploding, "acgate", 0, quiet)


ALLOCATOR = ("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to "
             "allocate 720896000 bytes. Error code 12 (Cannot allocate memory)")


def test_running_out_of_memory_names_the_run_the_panel_and_the_fix(smoke_params, panel, tmp_path, monkeypatch):
    """Past the machine's memory PyTorch's allocator names neither the panel, the method nor the setting; the run
    says all three, the request, and what to change."""
    def allocation_fails(*args, **kwargs):
        raise RuntimeError(ALLOCATOR)

    monkeypatch.setattr(train, "_train_step", allocation_fails)
    with pytest.raises(train.TrainingError, match=re.escape(
            "[synthetic_linear seed 3 acgate] out of memory: tried to allocate 720896000 bytes (687.5 MiB) on the CPU, "
            "training on a panel of 40 entities × 20 times × 1 features (model.hidden = 16, model.max_lag = 5, "
            "train.block_entities = auto). Train in smaller blocks (a smaller train.block_entities), on fewer "
            "entities, with a smaller model.hidden, or on a machine with more memory")) as raised:
        runner.run_method(panel, smoke_params, "acgate", 3, tmp_path, quiet)
    assert isinstance(raised.value.__cause__, RuntimeError)  # the allocator's own message stays in the traceback
    assert not is_finished(method_dir(tmp_path, smoke_params.domain, 3, "acgate"))


def torch_past_any_memory(*args, **kwargs):
    torch.empty(2**50, dtype=torch.uint8)  # 1 PiB: past any address space, so refused at once


def numpy_past_any_memory(*args, **kwargs):
    np.empty(2**50, dtype=np.uint8)


def cuda_out_of_memory(*args, **kwargs):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                                 "79.11 GiB of which 1.25 GiB is free.")


@pytest.mark.parametrize("method, allocate, amount, where", [
    ("acgate", torch_past_any_memory, r"1125899906842624 bytes \(1,073,741,824.0 MiB\) on the CPU", ""),
    ("moderated_dl", numpy_past_any_memory, "1.00 PiB on the CPU", ""),
    ("acgate", cuda_out_of_memory, "2.00 GiB on the GPU",
     r"; or on the CPU \(train.device = cpu\), whose memory is usually larger")],
    ids=["PyTorch on the CPU", "numpy in a closed-form fit", "CUDA"])
def test_every_allocator_running_out_is_explained(smoke_params, panel, tmp_path, monkeypatch, method, allocate,
                                                  amount, where):
    """Real allocations past any machine's memory, by PyTorch and by numpy, and CUDA's out-of-memory error."""
    monkeypatch.setattr(train, "_train_step", allocate)
    monkeypatch.setattr(runner, "fit_classical", allocate)
    with pytest.raises(train.TrainingError, match=rf"\[synthetic_linear seed 0 {method}\] out of memory: tried to "
                                                  rf"allocate {amount}, training on a panel of 40 entities.*more "
                                                  rf"memory{where}$"):
        runner.run_method(panel, smoke_params, method, 0, tmp_path, quiet)


def test_other_runtime_errors_pass_through_unchanged(smoke_params, panel, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (40x3 and 5x16)")

    monkeypatch.setattr(train, "_train_step", broken)
    with pytest.raises(RuntimeError, match=r"^mat1 and mat2 shapes cannot be multiplied") as raised:
        runner.run_method(panel, smoke_params, "acgate", 0, tmp_path, quiet)
    assert type(raised.value) is RuntimeError


def _with(params, **train_settings):
    return dataclasses.replace(params, train=dataclasses.replace(params.train, **train_settings))


@pytest.mark.parametrize("method", ["acgate", "plain_lstm", "tft", "ganet"])
def test_training_in_blocks_is_the_full_batch_training(smoke_params, panel, method, monkeypatch):
    """Gradients accumulated over blocks of 7 entities (6 blocks, the last of 5) give the optimiser the whole panel's
    gradient: the same losses every epoch and the same trained weights as one pass, up to float rounding. Dropout is
    off and GA-Net's gate noise fixed (u = 1/2), the random draws that blocks take in another order."""
    monkeypatch.setattr(torch, "rand_like", lambda t: torch.full_like(t, 0.5))
    params = dataclasses.replace(smoke_params, model=dataclasses.replace(smoke_params.model, dropout=0.0))
    params = _with(params, max_epochs=6, patience=6)
    whole = train.fit(panel, _with(params, block_entities=panel.n_entities), method, 0, quiet)
    blocked = train.fit(panel, _with(params, block_entities=7), method, 0, quiet)
    assert (whole.memory.blocks, blocked.memory.blocks, blocked.memory.block) == (1, 6, 7)
    pd.testing.assert_frame_equal(whole.history, blocked.history, rtol=1e-5, atol=1e-7)
    for name, weights in whole.model.state_dict().items():
        # GA-Net's key bias adds the same score to every lag, which its softmax ignores: its gradient is 0 but for
        # rounding, which Adam scales up to steps of up to lr
        atol = 1e-4 if (method, name) == ("ganet", "key.bias") else 1e-6
        torch.testing.assert_close(blocked.model.state_dict()[name], weights, rtol=1e-4, atol=atol, msg=name)
    torch.testing.assert_close(blocked.output.y_hat, whole.output.y_hat, rtol=1e-4, atol=1e-5)


def test_a_block_without_training_targets_adds_nothing(smoke_params, panel):
    """Entities whose training targets are all missing make a block with no task loss, not a NaN one."""
    panel = dataclasses.replace(panel, Y=panel.Y.copy())
    panel.Y[:7, :smoke_params.split.val_start] = np.nan
    params = dataclasses.replace(smoke_params, model=dataclasses.replace(smoke_params.model, dropout=0.0))
    params = _with(params, max_epochs=3, block_entities=7)
    result = train.fit(panel, params, "plain_lstm", 0, quiet)
    whole = train.fit(panel, _with(params, block_entities=panel.n_entities), "plain_lstm", 0, quiet)
    assert np.isfinite(result.history.train_loss).all()
    np.testing.assert_allclose(result.history.train_loss, whole.history.train_loss, rtol=1e-5)


@pytest.mark.parametrize("method", ["no_ac_encoder", "uniform_lag"])
def test_collapsed_ablations_have_exactly_zero_spread(smoke_params, panel, method):
    table = runner.lag_table(train.fit(panel, smoke_params, method, 0, quiet), panel)
    assert table.kstar.std() == 0.0


def test_no_recon_reg_differs_from_the_full_model_only_when_not_detached(smoke_params, panel):
    def kstar(params, method):
        return runner.lag_table(train.fit(panel, params, method, 0, quiet), panel).kstar.to_numpy()

    assert not smoke_params.model.recon_detach
    assert not np.allclose(kstar(smoke_params, "acgate"), kstar(smoke_params, "no_recon_reg"))
    detached = dataclasses.replace(smoke_params, model=dataclasses.replace(smoke_params.model, recon_detach=True))
    np.testing.assert_array_equal(kstar(detached, "acgate"), kstar(detached, "no_recon_reg"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_smoke_run(smoke_params, panel, tmp_path):
    on_gpu = dataclasses.replace(smoke_params, train=dataclasses.replace(smoke_params.train, device="cuda"))
    metrics = runner.run_method(panel, on_gpu, "acgate", 0, tmp_path, quiet)
    assert metrics["device"].startswith("cuda") and np.isfinite(metrics["test"]["mse"])
    lags = pd.read_csv(method_dir(tmp_path, on_gpu.domain, 0, "acgate") / "lags.csv")
    assert len(lags) == panel.n_entities and lags.kstar.between(1, on_gpu.model.max_lag).all()


def test_cuda_request_without_a_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        train.choose_device("cuda")
    assert train.choose_device("auto").type == "cpu"


@pytest.mark.parametrize("method", ["acgate", "plain_lstm", "tft", "ganet"])
def test_the_cut_batch_predicts_what_the_whole_batch_predicts(smoke_params, panel, method):
    result = train.fit(panel, smoke_params, method, 0, quiet)
    cut = result.batch.through("val")
    val_steps = result.batch.masks["val"].any(dim=0).nonzero().flatten()
    assert cut.lags.shape[1] == int(val_steps.max()) + 1 < result.batch.lags.shape[1]  # the test steps are cut
    assert torch.equal(cut.masks["val"], result.batch.masks["val"][:, : cut.lags.shape[1]])
    with torch.no_grad():
        whole = result.model(*result.batch.inputs()).y_hat
        part = result.model(*cut.inputs()).y_hat
    torch.testing.assert_close(part, whole[:, : cut.lags.shape[1]], rtol=1e-6, atol=1e-7)
