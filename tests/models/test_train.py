import dataclasses
import fcntl
import json
import os
import re
import subprocess
import threading

import numpy as np
import pandas as pd
import pytest
import torch

from acgate import runs
from acgate.audit import run_folders as audit
from acgate.data.dgp import simulate
from acgate.layout import is_finished, method_dir
from acgate.models import runner, train
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
