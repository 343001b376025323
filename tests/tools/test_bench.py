"""The benchmark's arithmetic (hand-worked FLOP counts) and a quick end-to-end run of `python -m acgate.tools.bench`
under the smoke profile; the figures themselves are measured by `make bench`, not asserted here."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from acgate.tools.bench import lstm_flops, matmul_peak

ROOT = Path(__file__).resolve().parents[2]


def test_lstm_flops_by_hand():
    # one layer, input 3, hidden 2: 4 gates x 2 units, each a dot product over 3 + 2 inputs = 2 * 8 * 5 = 80
    assert lstm_flops(3, 2, 1, batch=1, steps=1) == 80
    # a second layer sees the first one's 2 outputs: + 2 * 8 * (2 + 2) = 64; batch and steps multiply
    assert lstm_flops(3, 2, 2, batch=5, steps=7) == 5 * 7 * (80 + 64)


def test_matmul_peak_reports_the_best_size():
    peak = matmul_peak(sizes=(64, 128), repeats=2)
    assert peak["size"] in (64, 128) and peak["gflops"] == pytest.approx(max(peak["by_size"].values()), rel=0.01)


@pytest.mark.slow
def test_bench_runs_end_to_end_under_the_smoke_profile(tmp_path):
    project = tmp_path / "project"  # a project root of its own (ACGATE_ROOT), so what the bench writes is seen
    project.mkdir()
    for name in ("params", "notebooks", "tables", "workflow", "config", "pyproject.toml"):
        (project / name).symlink_to(ROOT / name)
    cmd = [sys.executable, "-m", "acgate.tools.bench", "--domains", "synthetic_linear", "--methods", "acgate",
           "--repeats", "1", "--profile", "params/smoke.yaml", "--at-once", "2", "--out", str(tmp_path)]
    env = {**os.environ, "ACGATE_ROOT": str(project)}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "of the matmul peak" in done.stdout and "Papermill:" in done.stdout
    record = json.loads((tmp_path / "latest.json").read_text())
    run = record["runs"][0]
    assert run["method"] == "acgate" and run["epochs_run"] == 15 and run["wall_seconds"]["median"] > 0
    assert run["page_faults"]["median"] >= 0 and "page faults per epoch" in done.stdout
    assert 0 < record["acgate_efficiency"]["share_of_peak"] < 1
    (batch,) = [b for b in record["at_once"] if b["device"] == "cpu"]  # with CUDA present there is a second record
    assert batch["processes"] == 2 and batch["seeds"] == [0, 1]
    assert batch["runs_per_minute_at_once"] == pytest.approx(120 / batch["at_once_seconds"])
    overhead = record["papermill"]
    assert overhead["notebook_fixed_seconds"] > overhead["papermill_and_kernel_seconds"] > 0
    assert overhead["overhead_range"][0] <= overhead["overhead_seconds"] <= overhead["overhead_range"][1]
    assert record["machine"]["cores"] >= 1 and record["git_sha"]
    replicate = record["calibration"][0]
    assert replicate["device"] == "cpu" and replicate["fits"] == 40 and replicate["seconds"]["median"] > 0
    assert "audit calibration, one linear replicate (40 fits and its audit) on cpu" in done.stdout
    matched = record["panel_matched"]
    assert matched["entities"] == 40 and matched["seeds"] == 5
    assert 0 < matched["seconds"]["classical"]["median"] < matched["seconds"]["with_acgate"]["median"]
    assert matched["default_study"]["core_seconds"] > 0 and "panel-matched study of example_panel" in done.stdout
    # its smoke-profile draws went to a folder of its own, not over data/processed, where the paper's runs find the
    # panels they were trained on
    assert not (project / "data").exists()
    assert (project / "runs" / "bench" / "data" / "processed" / "synthetic_linear" / "seed01" / "panel.npz").is_file()


@pytest.mark.slow
def test_the_scale_table_runs_end_to_end(tmp_path):
    """``make bench BENCH=--scale`` on a tiny grid: a panel past one block, AC-GATE and the classical model, each in
    its own process, with the matmul peak beside each and what the run planned for."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("params", "pyproject.toml"):
        (project / name).symlink_to(ROOT / name)
    cmd = [sys.executable, "-m", "acgate.tools.scale", "--entities", "300", "--steps", "20", "--methods",
           "acgate", "moderated_dl", "--epochs", "1", "--out", str(tmp_path)]
    env = {**os.environ, "ACGATE_ROOT": str(project)}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = [json.loads(path.read_text()) for path in tmp_path.glob("scale-*.json")]
    neural, classical = record["runs"]
    assert (neural["method"], neural["entities"], neural["steps"]) == ("acgate", 300, 20)
    assert neural["blocks"] == 2 and neural["block"] == 256 and neural["epochs_timed"] == 1
    assert 0 < neural["share_of_peak"] < 1 and len(neural["matmul_peak_gflops"]) == 2
    assert 0 <= neural["training_rss_gb"] <= neural["peak_rss_gb"] and neural["planned_gb"] > 0.25
    assert classical["method"] == "moderated_dl" and classical["fit_seconds"] > 0 and "share_of_peak" not in classical
    assert "2×256" in done.stdout and record["git_sha"]
