"""The Snakemake workflow: its dry run lists the grid's jobs (locally and with the SLURM profile), a tiny grid
(smoke profiles, 2 seeds, 2 domains) runs end to end through Papermill to the report and the HTML view, and a
grid killed mid-run completes on the rerun with no stale or half-written artifact."""

import os
import re
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from tests.conftest import ROOT
from tests.test_sources import SHARED

SMOKE = ["profiles={synthetic: params/smoke.yaml, data: params/smoke_panel.yaml}", "seeds=2",
         "calibration_replicates=1", "calibration_lag_free_replicates=2", "calibration_scenarios=[lag_free]"]
REAL = (SHARED / "pwt110.dta").is_file()
DOMAINS = ["synthetic_linear", "economics" if REAL else "synthetic_nonlinear"]


def snakemake(workdir, *args, config=(), env=None, **kwargs):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "workflow" / "Snakefile"), "--directory",
           str(workdir), "--cores", "2", *args, "--config", *config]
    env = {**os.environ, "ACGATE_RAW_DIR": str(SHARED), **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, **kwargs)


def job_counts(output: str) -> dict[str, int]:
    table = output[output.index("Job stats:"):]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.MULTILINE) if m[1] != "total"}


def test_dry_run_lists_the_grid(tmp_path):
    done = snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[synthetic_linear, synthetic_nonlinear, energy]"])
    assert done.returncode == 0, done.stderr[-3000:]
    expected = {"dgp": 4, "train": 6, "audit": 3, "report": 1, "calibrate": 1, "html": 1, "all": 1}
    if not (SHARED / "owid-energy-data.csv").is_file():
        expected |= {"train": 4, "audit": 2}
    else:
        expected["prep"] = 1
    assert job_counts(done.stdout) == expected


def test_dry_run_with_the_slurm_profile(tmp_path):
    done = snakemake(tmp_path, "-n", "--profile", str(ROOT / "workflow" / "profiles" / "slurm"),
                     config=["seeds=20", "domains=[synthetic_linear]"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert job_counts(done.stdout) == {"dgp": 20, "train": 20, "audit": 1, "report": 1, "calibrate": 1, "html": 1,
                                       "all": 1}


def test_a_domain_without_its_inputs_is_skipped_with_the_reason(tmp_path):
    done = snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[synthetic_linear, economics]"],
                     env={"ACGATE_RAW_DIR": str(tmp_path / "empty")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"skipped economics: .*pwt110.* not found \(run `make data`", done.stderr)
    assert "prep" not in job_counts(done.stdout)


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """A tiny grid killed (SIGKILL to the whole process group) while training its first seed, then rerun."""
    workdir = tmp_path_factory.mktemp("grid")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "workflow" / "Snakefile"), "--directory",
           str(workdir), "--cores", "2"]
    config = ["--config", *SMOKE, f"domains=[{', '.join(DOMAINS)}]"]
    env = {**os.environ, "ACGATE_RAW_DIR": str(SHARED)}
    first = subprocess.Popen(cmd + config, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                             start_new_session=True)
    seed_dir = workdir / "runs" / "synthetic_linear" / "seed00"
    deadline = time.time() + 300
    while not (seed_dir / "acgate" / "metrics.json").is_file():  # mid-run: one method done, the others not
        assert first.poll() is None and time.time() < deadline, "the grid ended before it could be killed"
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    killed_at = time.time()
    assert not (seed_dir / "03_train.ipynb").exists()
    # after a hard kill (or a power loss) Snakemake's lock remains; --unlock releases it (make unlock)
    assert subprocess.run([*cmd, "--unlock", *config], capture_output=True, env=env).returncode == 0
    rerun = subprocess.run([*cmd, "--rerun-incomplete", *config], capture_output=True, text=True, env=env)
    assert rerun.returncode == 0, rerun.stderr[-5000:]
    return workdir, killed_at, rerun.stderr


def test_the_rerun_completes_the_grid_with_no_stale_artifact(grid):
    workdir, killed_at, _ = grid
    for domain in DOMAINS:
        for seed in ("00", "01"):
            seed_dir = workdir / "runs" / domain / f"seed{seed}"
            assert (seed_dir / "03_train.ipynb").is_file()
            for metrics in seed_dir.glob("*/metrics.json"):  # every method's files are from one finished run
                method = metrics.parent
                for name in ("manifest.json", "lags.csv", "predictions.csv", "history.csv"):
                    assert (method / name).stat().st_mtime <= metrics.stat().st_mtime
        assert (workdir / "runs" / domain / "audit" / "04_audit.ipynb").is_file()
    # the killed seed is completed: a method that had finished before the kill is kept (its run is current), the
    # others are trained anew, and its executed notebook appears only after the kill
    killed = workdir / "runs" / "synthetic_linear" / "seed00"
    assert (killed / "03_train.ipynb").stat().st_mtime > killed_at
    redone = [m.parent.name for m in killed.glob("*/metrics.json") if m.stat().st_mtime > killed_at]
    assert "acgate" not in redone and len(redone) == len(list(killed.glob("*/metrics.json"))) - 1
    leftovers = [p for p in workdir.rglob(".*") if p.is_file() and ".snakemake" not in p.parts
                 and p.name != ".workflow_started.json"]
    assert leftovers == []  # no .partial / .input notebooks, no .tmp files of atomic writes


def test_the_grid_ends_in_the_report_and_the_html_view(grid):
    workdir, _, log = grid
    tables, figures = workdir / "tables", workdir / "figures"
    for name in ("synthetic_summary", "verdict_matrix", "wilcoxon_synthetic_kstar", "controlled_comparison",
                 "reproduction"):
        for ext in ("csv", "tex", "md"):
            assert (tables / f"{name}.{ext}").is_file(), f"{name}.{ext}"
    for name in ("evidence", "use_case", "architecture") + (("case_study", "forecast_r2") if REAL else ()):
        assert (figures / f"{name}.png").stat().st_size > 10_000 and (figures / f"{name}.pdf").is_file()
    summary = pd.read_csv(tables / "synthetic_summary.csv")
    assert (summary[summary.domain == "synthetic_linear"].seeds == 2).all()
    index = (workdir / "runs" / "html" / "index.html").read_text()
    assert index.count("03_train</a>") == 4 and "05_report</a>" in index
    calibration = pd.read_csv(tables / "audit_calibration.csv")
    assert set(calibration.scenario) == {"lag_free"} and (calibration.replicates == 2).all()
    assert (figures / "audit_calibration.png").is_file()
    assert (workdir / "runs" / "html" / "runs" / "synthetic_linear" / "seed01" / "03_train.html").is_file()
    assert "workflow finished in" in log


def test_a_finished_grid_is_not_rerun_and_a_changed_params_file_is(grid, tmp_path):
    workdir, _, _ = grid
    config = [*SMOKE, f"domains=[{', '.join(DOMAINS)}]"]
    done = snakemake(workdir, "-n", config=config)
    assert "Nothing to be done" in done.stdout + done.stderr
    overlay = tmp_path / "smoke_changed.yaml"  # a newer copy of the overlay: everything of its kind is stale
    overlay.write_text((ROOT / "params" / "smoke.yaml").read_text().replace("max_epochs: 15", "max_epochs: 14"))
    config[0] = f"profiles={{synthetic: {overlay}, data: params/smoke_panel.yaml}}"
    counts = job_counts(snakemake(workdir, "-n", config=config).stdout)
    assert counts["train"] == 2 * sum(d.startswith("synthetic") for d in DOMAINS) and counts["dgp"] == 2 * len(
        [d for d in DOMAINS if d.startswith("synthetic")])
