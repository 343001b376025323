"""Tests of acgate.models.runner: a method's run folder written, kept, retrained or refused."""

import dataclasses
import json
import os
import re

import pandas as pd
import pytest

from acgate import runs
from acgate.audit import run_folders as audit
from acgate.layout import is_finished, method_dir
from acgate.models import runner, train
from acgate.runs import current_metrics
from tests.models.conftest import quiet


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


@pytest.mark.parametrize("method", ["acgate", "tft", "ganet"])
def test_a_run_in_blocks_writes_what_a_run_in_one_pass_writes(smoke_params, panel, tmp_path, method):
    """The run folder of a panel computed in blocks of 7 entities (predictions, the structural lags or the
    occlusion profile and internal weights, GA-Net's gate share), against one pass: the same, to float rounding
    (dropout off; GA-Net's gate noise draws in another order, so its numbers only match in shape)."""
    params = dataclasses.replace(smoke_params, model=dataclasses.replace(smoke_params.model, dropout=0.0))
    written = {}
    for block in (panel.n_entities, 7):
        blocked = dataclasses.replace(params, train=dataclasses.replace(params.train, block_entities=block))
        metrics = runner.run_method(panel, blocked, method, 0, tmp_path / str(block), quiet)
        out = method_dir(tmp_path / str(block), params.domain, 0, method)
        written[block] = metrics, pd.read_csv(out / "predictions.csv"), pd.read_csv(out / "lags.csv")
    (whole, whole_preds, whole_lags), (parts, preds, lags) = written[panel.n_entities], written[7]
    assert (whole["blocks"], parts["blocks"], parts["block_entities"]) == (1, 6, 7)
    assert list(preds.columns) == list(whole_preds.columns) and len(preds) == len(whole_preds)
    assert list(lags.columns) == list(whole_lags.columns) and len(lags) == panel.n_entities
    if method == "ganet":
        assert 0 <= parts["gate_density"] <= 1
        return
    pd.testing.assert_frame_equal(preds, whole_preds, rtol=1e-4, atol=1e-5)
    pd.testing.assert_frame_equal(lags, whole_lags, rtol=1e-3, atol=1e-4)


def test_artifacts_get_ordinary_permissions(smoke_params, panel, tmp_path):
    previous = os.umask(0o022)
    try:
        runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, quiet)
    finally:
        os.umask(previous)
    out = method_dir(tmp_path, smoke_params.domain, 0, "uniform_lag")
    assert {oct(p.stat().st_mode & 0o777) for p in out.iterdir()} == {"0o644"}


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
    # the same values, two entities' proxies exchanged (a user correcting mislabelled rows): another panel, for the
    # closed-form fits and the shuffled-proxy twins too (these record the panel they were given, not their shuffle)
    P = panel.P.copy()
    P[[0, 1]] = P[[1, 0]]
    for method in ("uniform_lag", "moderated_dl", "shuffled_dl"):
        runner.run_method(panel, smoke_params, method, 0, tmp_path, quiet)
        lines.clear()
        metrics = runner.run_method(dataclasses.replace(panel, P=P), smoke_params, method, 0, tmp_path, lines.append)
        assert not any("kept" in line for line in lines), method
        assert metrics["panel_digest"] == dataclasses.replace(panel, P=P).digest(), method
    # the same data, other params: retrained when they shape the run, kept when they do not (the audit's settings)
    faster = dataclasses.replace(smoke_params, train=dataclasses.replace(smoke_params.train, lr=2e-3))
    audited = dataclasses.replace(smoke_params, audit=dataclasses.replace(smoke_params.audit, alpha=0.01))
    for changed, kept in ((faster, False), (audited, True)):
        runner.run_method(panel, smoke_params, "uniform_lag", 0, tmp_path, quiet)
        lines.clear()
        metrics = runner.run_method(panel, changed, "uniform_lag", 0, tmp_path, lines.append)
        assert any("kept" in line for line in lines) == kept and metrics["params_hash"] == changed.digest()


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


def test_a_seedless_fit_is_fitted_once_per_panel_and_copied_to_the_other_seeds(smoke_params, panel, tmp_path):
    """A closed-form fit reads no seed: on one panel, seed 1's run is seed 0's fit, copied (the same files a fresh fit
    of seed 1 writes, its manifest naming the source); a seed-dependent one (shuffled_dl), another panel and a
    proxy-shuffle domain's seed (the same digest, its proxies reordered) fit afresh."""
    lines = []
    runner.run_method(panel, smoke_params, "moderated_dl", 0, tmp_path, quiet)
    copied = runner.run_method(panel, smoke_params, "moderated_dl", 1, tmp_path, lines.append)
    assert copied["copied_from"] == "seed00/moderated_dl" and "the fit of seed00/moderated_dl" in lines[-1]
    out = method_dir(tmp_path, smoke_params.domain, 1, "moderated_dl")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == 1 and manifest["copied_from"] == "seed00/moderated_dl"
    assert current_metrics(out, smoke_params.digest(), panel.digest()) == copied  # it counts as a finished run
    fresh = tmp_path / "fresh"
    runner.run_method(panel, smoke_params, "moderated_dl", 1, fresh, quiet)
    for name in ("lags.csv", "predictions.csv", "coefficients.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(out / name),
                                      pd.read_csv(method_dir(fresh, smoke_params.domain, 1, "moderated_dl") / name))
    assert "copied_from" not in runner.run_method(panel, smoke_params, "shuffled_dl", 1, tmp_path, quiet)
    runner.run_method(panel, smoke_params, "shuffled_dl", 2, tmp_path, quiet)
    other = dataclasses.replace(panel, Y=panel.Y * 2)
    assert "copied_from" not in runner.run_method(other, smoke_params, "moderated_dl", 2, tmp_path, quiet)
    # a proxy-shuffle domain's seed: its proxies in another order, so another panel
    shuffled = panel.with_shuffled_proxies(3, 1)[0]
    assert "copied_from" not in runner.run_method(shuffled, smoke_params, "moderated_dl", 3, tmp_path, quiet)


@pytest.mark.parametrize("retrain", [False, True])
def test_seeds_of_one_panel_in_one_call_fit_a_seedless_method_once(smoke_params, panel, tmp_path, monkeypatch,
                                                                   retrain):
    """run_seeds with every seed on one panel (a real domain, a surrogate replicate): a seedless method is fitted
    once and copied to the other seeds, retrained or not; the same files as fits of their own. A seed-dependent
    method (shuffled_dl) is fitted per seed."""
    fits = []
    counted = runner.fit_classical

    def counting(*args, **kwargs):
        fits.append(args[2])
        return counted(*args, **kwargs)

    monkeypatch.setattr(runner, "fit_classical", counting)
    for method in ("moderated_dl", "shuffled_dl"):
        found = runner.run_seeds(dict.fromkeys(range(3), panel), smoke_params, method, tmp_path, quiet, retrain)
        assert [m.get("copied_from") for m in found.values()] == (
            [None, f"seed00/{method}", f"seed00/{method}"] if method == "moderated_dl" else [None] * 3)
    assert fits == ["moderated_dl"] + ["shuffled_dl"] * 3
    fresh = tmp_path / "fresh"
    runner.run_method(panel, smoke_params, "moderated_dl", 2, fresh, quiet)
    for name in ("lags.csv", "predictions.csv", "coefficients.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(method_dir(tmp_path, smoke_params.domain, 2, "moderated_dl") / name),
                                      pd.read_csv(method_dir(fresh, smoke_params.domain, 2, "moderated_dl") / name))
