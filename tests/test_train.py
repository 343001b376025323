import dataclasses
import fcntl
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from acgate import audit, runner, runs, train
from acgate.dgp import simulate
from acgate.layout import is_finished, method_dir
from acgate.models import build
from acgate.panel import Normalisers
from acgate.runs import current_metrics


@pytest.fixture(scope="module")
def panel(smoke_params):
    return simulate(smoke_params.synthetic, 0, smoke_params.split.val_start, smoke_params.split.test_start)


def quiet(_: str) -> None:
    pass


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


def test_run_method_writes_the_artifacts(smoke_params, panel, tmp_path):
    metrics = runner.run_method(panel, smoke_params, "acgate", 0, tmp_path, quiet)
    out = method_dir(tmp_path, smoke_params.domain, 0, "acgate")
    assert is_finished(out)
    for name in ("lags.csv", "predictions.csv", "history.csv", "model.pt", "manifest.json"):
        assert (out / name).is_file()
    lags = pd.read_csv(out / "lags.csv")
    K = smoke_params.model.max_lag
    assert list(lags.columns) == (["entity", "z"] + [f"omega_{k}" for k in range(1, K + 1)]
                                  + ["kstar", "kstar_kind", "kstar_true", "dgp_mean_lag"])
    assert len(lags) == panel.n_entities and (lags.kstar_kind == "structural").all()
    preds = pd.read_csv(out / "predictions.csv")
    assert len(preds) == panel.n_entities * (len(panel.times) - K)
    test = preds[preds.split == "test"]
    assert metrics["test"]["mse"] == pytest.approx(((test.y - test.y_hat) ** 2).mean(), rel=1e-5)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == 0 and manifest["params"]["model"]["max_lag"] == K
    assert manifest["device"] == metrics["device"] == str(train.choose_device(smoke_params.train.device))
    assert {"git_sha", "packages", "python", "platform"} <= manifest.keys()
    assert manifest["packages"]["torch"].startswith("2.")
    assert metrics["params_hash"] == smoke_params.digest()
    assert set(metrics) >= {"train", "val", "test", "lags", "l3", "best_epoch", "epochs_run", "seconds", "device"}


def test_artifacts_get_ordinary_permissions(smoke_params, panel, tmp_path):
    previous = os.umask(0o022)
    try:
        runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, quiet)
    finally:
        os.umask(previous)
    out = method_dir(tmp_path, smoke_params.domain, 0, "uniform_lag")
    assert {oct(p.stat().st_mode & 0o777) for p in out.iterdir()} == {"0o644"}


def test_the_git_sha_says_when_code_notebooks_or_params_differ_from_the_commit(tmp_path, monkeypatch):
    # git as on a fresh machine: no user or system settings (untracked files hidden, signed commits, hooks), no
    # repository of a caller's (a hook's GIT_DIR), none above the temporary folders
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    repository = tmp_path / "checkout"

    def git(*args) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repository,
                              check=True, capture_output=True, text=True).stdout.strip()

    sources = ("lib/acgate/x.py", "notebooks/n.py", "params/p.yaml", "pyproject.toml")
    for name in (*sources, "tables/t.csv"):
        (repository / name).parent.mkdir(parents=True, exist_ok=True)
        (repository / name).write_text("a\n")
    package = repository / "lib" / "acgate" / "x.py"  # git_sha looks from the folder of the file it is given
    assert runs.git_sha(package) == "unknown"  # not a repository yet
    git("init", "-q")
    assert runs.git_sha(package) == "unknown"  # no commit yet
    git("add", ".")
    git("commit", "-q", "-m", "first")
    assert runs.git_sha(package) == git("rev-parse", "HEAD")
    for output in ("tables/t.csv", "tables/new.csv"):  # a regenerated output, a new one: neither counts
        (repository / output).write_text("b\n")
        assert runs.git_sha(package) == git("rev-parse", "HEAD")
    for change in (*sources, "notebooks/new.py"):  # every kind of source changed, and a new one
        (repository / change).write_text("b\n")
        assert runs.git_sha(package) == git("rev-parse", "HEAD") + "+dirty", change
        git("add", ".")
        git("commit", "-q", "-m", change)
        assert runs.git_sha(package) == git("rev-parse", "HEAD")


def test_every_run_records_a_code_digest_that_changes_with_every_edit(tmp_path):
    """git_sha says '<sha>+dirty' before and after an edit; the code digest tells the two apart."""
    package = tmp_path / "lib" / "acgate"
    package.mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    for name in ("lib/acgate/x.py", "lib/acgate/numbers.yaml", "notebooks/n.py"):
        (tmp_path / name).write_text("a\n")
    seen = set()
    for edit in (None, "lib/acgate/x.py", "lib/acgate/numbers.yaml", "notebooks/n.py", "lib/acgate/new.py"):
        if edit:
            (tmp_path / edit).write_text("b\n")
        runs.code_digest.cache_clear()
        seen.add(runs.code_digest(package / "x.py"))
        assert len(seen) == (1 if edit is None else len(seen)), edit
    assert len(seen) == 5
    runs.code_digest.cache_clear()
    assert runs.manifest({}, 0, "cpu")["code_digest"] == runs.code_digest()


def test_a_finished_run_is_kept_only_for_the_same_params_and_panel(smoke_params, panel, tmp_path):
    lines = []
    runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, quiet)
    runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, lines.append)
    assert len(lines) == 1 and "kept" in lines[0]
    Y = panel.Y.copy()
    Y[0, -1] += 1.0  # the same params, other data
    metrics = runner.run_method(dataclasses.replace(panel, Y=Y), smoke_params, "uniform_lag", 0, tmp_path,
                               lines.append)
    assert not any("kept" in line for line in lines[1:])
    assert metrics["panel_digest"] == dataclasses.replace(panel, Y=Y).digest() != panel.digest()
    # the same data, other params: retrained when they shape the run, kept when they do not (the audit's settings)
    faster = dataclasses.replace(smoke_params, train=dataclasses.replace(smoke_params.train, lr=2e-3))
    audited = dataclasses.replace(smoke_params, audit=dataclasses.replace(smoke_params.audit, alpha=0.01))
    for changed, kept in ((faster, False), (audited, True)):
        runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, quiet)
        lines.clear()
        metrics = runner.run_method(panel, changed, "uniform_lag", 0, tmp_path, lines.append)
        assert any("kept" in line for line in lines) == kept and metrics["params_hash"] == changed.digest()


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


@pytest.mark.parametrize("crash_at", ["lag table", "manifest"])
def test_interrupted_run_leaves_nothing_that_counts_as_finished(crash_at, smoke_params, panel, tmp_path, monkeypatch):
    """A retrained run interrupted before it writes anything (the finished run before it no longer counts), or at
    its last write before metrics.json (every other artifact written): metrics.json comes last."""
    runner.run_method(panel, smoke_params, "acgate", 0, tmp_path, quiet)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    if crash_at == "lag table":
        monkeypatch.setattr(runner, "lag_table", crash)
    else:
        write_json = runner.write_json
        monkeypatch.setattr(runner, "write_json", lambda path, data: crash() if path.name == "manifest.json"
                            else write_json(path, data))
    with pytest.raises(KeyboardInterrupt):
        runner.run_method(panel, smoke_params, "acgate", 0, tmp_path, quiet, retrain=True)
    out = method_dir(tmp_path, smoke_params.domain, 0, "acgate")
    assert not is_finished(out)
    assert not list(out.glob("*.tmp"))
    if crash_at == "manifest":
        assert (out / "history.csv").is_file() and not (out / "metrics.json").exists()


@pytest.mark.parametrize("damage", [b'{"params_hash": "', b"\xff\xfe\x00garbage"], ids=["truncated", "not UTF-8"])
def test_a_damaged_metrics_json_is_retrained_not_taken_or_fatal(damage, smoke_params, panel, tmp_path):
    runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, quiet)
    out = method_dir(tmp_path, smoke_params.domain, 0, "uniform_lag")
    (out / "metrics.json").write_bytes(damage)
    lines = []
    metrics = runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, lines.append)
    assert not any("kept" in line for line in lines) and is_finished(out)
    assert json.loads((out / "metrics.json").read_text())["run_id"] == metrics["run_id"]


def test_a_retrained_run_removes_the_temporary_file_of_a_killed_write(smoke_params, panel, tmp_path):
    out = method_dir(tmp_path, smoke_params.domain, 0, "uniform_lag")
    out.mkdir(parents=True)
    (out / ".predictions.csv.x1y2z3.tmp").write_text("y,y_hat\n1.0,")  # SIGKILL between write and rename
    runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, quiet)
    assert is_finished(out) and not list(out.glob(".*.tmp"))


def test_an_older_metrics_json_put_back_beside_a_retrained_run_is_not_taken_for_it(smoke_params, panel, tmp_path):
    # a workflow job that fails after retraining a run puts back the metrics.json it backed up before (update())
    out = method_dir(tmp_path, smoke_params.domain, 0, "uniform_lag")
    runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, quiet)
    older = (out / "metrics.json").read_text()
    runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, quiet, retrain=True)
    (out / "metrics.json").write_text(older)
    assert current_metrics(out, smoke_params.digest(), panel.digest()) is None
    with pytest.raises(audit.RunRejected, match="not from the training that wrote the other files"):
        audit.read_run(out, 0, "uniform_lag", smoke_params.digest(), panel)
    lines = []
    runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, lines.append)  # retrained, not kept
    assert any("training on" in line for line in lines) and not any("kept" in line for line in lines)
    assert audit.read_run(out, 0, "uniform_lag", smoke_params.digest(), panel).metrics["run_id"]


def test_a_second_writer_of_a_run_folder_stops_naming_the_first(smoke_params, panel, tmp_path, other_writer,
                                                                 monkeypatch):
    """A notebook retraining a seed while the workflow trains it (or the other way round): the second writer stops
    before it changes anything, naming the folder and the first one's pid; once the first has gone, even killed,
    the folder can be written again."""
    monkeypatch.setattr(runs, "READER_GRACE_SECONDS", 0.2)
    runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, quiet)
    out = method_dir(tmp_path, smoke_params.domain, 0, "uniform_lag")
    finished = (out / "metrics.json").read_text()
    notebook = other_writer(out)
    with pytest.raises(runs.RunFolderBusy, match=rf"{re.escape(str(out))} is being written by another process "
                                                 rf"\(pid {notebook.pid} on .+\): a notebook retraining this run while "
                                                 r"the workflow trains it, or the other way round; .* then run this "
                                                 r"again"):
        runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, quiet, retrain=True)
    assert (out / "metrics.json").read_text() == finished
    notebook.kill()
    notebook.wait()
    assert runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, quiet, retrain=True)["run_id"] != \
        json.loads(finished)["run_id"]


def test_a_reader_checking_the_lock_does_not_stop_a_writer(tmp_path):
    """A reader holds the lock for the instant of its check; a writer that meets it waits instead of failing."""
    out = tmp_path / "seed00" / "acgate"
    with runs.writing(out):
        pass
    with open(runs.lock_file(out)) as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        threading.Timer(0.3, fcntl.flock, (lock, fcntl.LOCK_UN)).start()
        with runs.writing(out):
            written = True
    assert written and runs.writer(out) is None


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
            "training on a panel of 40 entities × 20 times × 1 features (model.hidden = 16, model.max_lag = 5). Train "
            "on fewer entities, with a smaller model.hidden, or on a machine with more memory")) as raised:
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
def test_validation_pass_through_the_last_validation_step_is_bit_identical(smoke_params, panel, method):
    result = train.fit(panel, smoke_params, method, 0, quiet)
    cut = result.batch.through("val")
    val_steps = result.batch.masks["val"].any(dim=0).nonzero().flatten()
    assert cut.lags.shape[1] == int(val_steps.max()) + 1 < result.batch.lags.shape[1]  # the test steps are cut
    assert torch.equal(cut.masks["val"], result.batch.masks["val"][:, : cut.lags.shape[1]])
    with torch.no_grad():
        whole = result.model(*result.batch.inputs()).y_hat
        part = result.model(*cut.inputs()).y_hat
    assert torch.equal(part, whole[:, : cut.lags.shape[1]])


@pytest.mark.parametrize("method", ["acgate", "plain_lstm", "tft", "ganet"])
def test_the_cut_training_step_draws_the_whole_batchs_noise_and_gives_its_gradient(smoke_params, panel, method):
    """The training step computes the steps up to the last training target and draws its dropout and relaxed-gate
    noise for the whole batch: the generator ends where the whole batch's step leaves it, and the losses and
    gradients are the whole batch's. Drawn for the computed steps only, the generator ends elsewhere (so the next
    step draws other numbers: the noise is there and the test can tell)."""
    cfg = smoke_params.model
    batch = train.Batch.build(panel, Normalisers.fit(panel), cfg.max_lag, torch.device("cpu"))
    cut = batch.through("train")
    assert cut.y.shape[1] < batch.y.shape[1]

    def step(b, noise_steps=None):
        torch.manual_seed(3)
        model = build(cfg, method, panel.n_entities, panel.X.shape[2], panel.P.shape[1], panel.S.shape[1])
        losses = train._train_step(model, train.Adam(model.parameters(), lr=0.0), b, smoke_params, noise_steps)
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in model.parameters()]
        return losses, grads, torch.get_rng_state()

    whole, same, other = step(batch), step(cut, noise_steps=batch.y.shape[1]), step(cut)
    assert torch.equal(same[2], whole[2]) and not torch.equal(other[2], whole[2])
    np.testing.assert_allclose(same[0], whole[0], rtol=1e-6)
    for a, b in zip(same[1], whole[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("method", ["no_ac_encoder", "tft"])
def test_adam_is_torchs_fused_adam_to_the_bit(smoke_params, panel, method):
    """``train.Adam`` gives the parameters of ``torch.optim.Adam(..., fused=True)`` to the bit, step after step, with
    the training step's clipping in between; No-AC-Encoder has parameters without a gradient (its encoder), which
    both leave alone."""
    cfg = smoke_params.model
    batch = train.Batch.build(panel, Normalisers.fit(panel), cfg.max_lag, torch.device("cpu")).through("train")

    def trained(make):
        torch.manual_seed(5)
        model = build(cfg, method, panel.n_entities, panel.X.shape[2], panel.P.shape[1], panel.S.shape[1])
        optimiser = make(list(model.parameters()))
        optimiser.params = list(model.parameters())  # the list _train_step clips; torch's Adam keeps param_groups
        for _ in range(4):
            train._train_step(model, optimiser, batch, smoke_params)
        return list(model.parameters())

    ours = trained(lambda params: train.Adam(params, lr=0.01))
    reference = trained(lambda params: torch.optim.Adam(params, lr=0.01, fused=True))
    assert (method == "no_ac_encoder") == any(p.grad is None for p in ours)
    for a, b in zip(ours, reference, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("method", ["no_ac_encoder", "tft"])
@pytest.mark.parametrize("factor", [0.1, 10.0])  # max_norm below the gradients' norm (scaled down), and above it
def test_clip_grad_norm_is_torchs_to_the_bit(smoke_params, panel, method, factor):
    """``train.clip_grad_norm`` scales the gradients as ``torch.nn.utils.clip_grad_norm_`` does, to the bit;
    No-AC-Encoder's encoder has no gradient, which both leave alone."""
    cfg = smoke_params.model
    batch = train.Batch.build(panel, Normalisers.fit(panel), cfg.max_lag, torch.device("cpu")).through("train")
    torch.manual_seed(5)
    model = build(cfg, method, panel.n_entities, panel.X.shape[2], panel.P.shape[1], panel.S.shape[1])
    out = model(*batch.inputs())
    train.masked_mse(out.y_hat, batch.y, batch.masks["train"]).backward()
    params = list(model.parameters())
    before = [None if p.grad is None else p.grad.clone() for p in params]
    max_norm = factor * float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in before if g is not None])))
    train.clip_grad_norm(params, max_norm)
    ours = [None if p.grad is None else p.grad.clone() for p in params]
    for p, grad in zip(params, before, strict=True):
        p.grad = grad.clone() if grad is not None else None
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    assert (method == "no_ac_encoder") == any(g is None for g in ours)
    for a, b in zip(ours, (p.grad for p in params), strict=True):
        assert (a is None and b is None) or torch.equal(a, b)
    changed = [not torch.equal(a, g) for a, g in zip(ours, before, strict=True) if g is not None and g.any()]
    assert all(changed) if factor < 1 else not any(changed)


def test_adam_counts_the_steps_of_each_parameter_as_torch_does():
    """A parameter without a gradient at some step is not stepped and its count stands still, as in
    ``torch.optim.Adam(..., fused=True)``; the parameters agree to the bit after every step, also when the set of
    parameters with a gradient changes (a parameter drops out, comes back, or gets its first gradient late)."""
    pattern = [(1, 1, 0), (1, 0, 0), (1, 1, 1), (0, 1, 1), (1, 1, 1), (1, 1, 1)]  # which parameter has a gradient

    def trajectory(make):
        torch.manual_seed(3)
        params = [torch.randn(4, 3, requires_grad=True), torch.randn(5, requires_grad=True),
                  torch.randn(2, 2, requires_grad=True)]
        optimiser, seen = make(params), []
        for step, has in enumerate(pattern):
            grads = torch.Generator().manual_seed(step)
            for p, h in zip(params, has, strict=True):
                p.grad = torch.randn(p.shape, generator=grads) if h else None
            optimiser.step()
            seen.append([p.detach().clone() for p in params])
        return seen

    ours = trajectory(lambda params: train.Adam(params, lr=0.1))
    reference = trajectory(lambda params: torch.optim.Adam(params, lr=0.1, fused=True))
    for mine, theirs in zip(ours, reference, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            assert torch.equal(a, b)


def test_adam_wants_one_device_and_one_dtype():
    with pytest.raises(ValueError, match="one device and one dtype"):
        train.Adam([torch.zeros(2, requires_grad=True), torch.zeros(2, dtype=torch.float64, requires_grad=True)], 0.1)


def test_training_does_not_import_the_compiler():
    """``fit`` leaves ``torch._dynamo`` unimported (a torch.optim optimiser imports it when built: 1-1.3 s a
    process), in a fresh process."""
    probe = ("import dataclasses, sys\n"
             "from acgate import train\n"
             "from acgate.config import load_params\n"
             "from acgate.dgp import simulate\n"
             "params = load_params(*sys.argv[1:])\n"
             "params = dataclasses.replace(params, train=dataclasses.replace(params.train, max_epochs=2))\n"
             "panel = simulate(params.synthetic, 0, params.split.val_start, params.split.test_start)\n"
             "train.fit(panel, params, 'acgate', 0, lambda _: None)\n"
             "print('torch._dynamo' in sys.modules)\n")
    root = Path(__file__).resolve().parents[1] / "params"
    done = subprocess.run([sys.executable, "-c", probe, str(root / "synthetic_linear.yaml"), str(root / "smoke.yaml")],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split()[-1] == "False"


MALLOC_PROBE = """
import ctypes, dataclasses, sys
import torch
from acgate import train
from acgate.config import load_params
from acgate.dgp import simulate
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]
mallinfo = ctypes.CDLL(None).mallinfo2
mallinfo.restype = MallInfo2
if sys.argv[1] == "without":
    train.keep_freed_memory = lambda: None
params = load_params(*sys.argv[2:])
params = dataclasses.replace(params, train=dataclasses.replace(params.train, max_epochs=1))
panel = simulate(params.synthetic, 0, params.split.val_start, params.split.test_start)
train.fit(panel, params, "acgate", 0, lambda _: None)
before = mallinfo()
block = torch.ones(6 * 2**20)  # 24 MiB, as big as the activations of a large panel
during = mallinfo()
del block
after = mallinfo()
print(during.hblkhd - before.hblkhd, during.uordblks - before.uordblks, during.arena - after.arena)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings: Linux only")
def test_a_training_process_keeps_the_memory_it_frees_for_its_next_step():
    """After ``fit``, a 24 MiB tensor comes from malloc's heap (not a mapping of its own that is handed back when it
    is freed) and the heap keeps it once freed, so the next training step reuses those pages instead of faulting
    them in again (docs/speed.md). Without ``keep_freed_memory`` (the second process) glibc maps the block apart."""
    root = Path(__file__).resolve().parents[1] / "params"

    def probe(setting: str) -> list[int]:
        """Bytes the block took in a mapping of its own and from the heap, and bytes of heap given back when freed
        (the heap may have had free room for part of it, so its growth alone says too little)."""
        done = subprocess.run([sys.executable, "-c", MALLOC_PROBE, setting, str(root / "synthetic_linear.yaml"),
                               str(root / "smoke.yaml")], capture_output=True, text=True, check=True)
        return [int(value) for value in done.stdout.split()[-3:]]

    mapped, from_heap, given_back = probe("with")
    assert mapped == 0 and from_heap >= 24 * 2**20 and given_back == 0, (mapped, from_heap, given_back)
    mapped, from_heap, given_back = probe("without")
    assert mapped >= 24 * 2**20 and from_heap < 24 * 2**20, (mapped, from_heap, given_back)
