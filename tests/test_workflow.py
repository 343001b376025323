"""The Snakemake workflow: its dry run lists the grid's jobs (locally and with the SLURM profile), a tiny grid
(smoke profiles, 2 seeds, 2 domains) runs end to end through Papermill to the report and the HTML view, and a
grid killed mid-run completes on the rerun with no stale or half-written artifact."""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml
from snakemake.cli import parse_args

from acgate.audit import calibration, verdicts
from acgate.config import load_params
from acgate.data.example import write_example

ROOT = Path(__file__).resolve().parents[1]

SMOKE = ["profiles={synthetic: params/smoke.yaml, data: params/smoke_panel.yaml}", "seeds=2",
         "calibration_negative_replicates=2", "calibration_positive_replicates=1", "calibration_scenarios=[lag_free]"]
GRID = Path("runs/smoke+smoke_panel")  # the smoke profiles' grid folder: runs, panels, tables and figures
RAW = Path(os.environ.get("ACGATE_RAW_DIR", "/nonexistent"))  # real inputs only through ACGATE_RAW_DIR
REAL = (RAW / "pwt110.dta").is_file()
DOMAINS = ["synthetic_linear", "economics" if REAL else "synthetic_nonlinear"]


# the default profile's scheduling timespan (20 s, for the paper grid) is waited out at the end of every run: the
# tests' small grids take make audit's instead
TIMESPAN = ["--max-jobs-per-timespan", "100/1s"]


def snakemake(workdir, *args, config=(), env=None, cores="2", **kwargs):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "workflow" / "Snakefile"), "--directory",
           str(workdir), *(["--cores", cores] if cores else []), *TIMESPAN, *args, "--config", *config]
    env = {**os.environ, "ACGATE_RAW_DIR": str(RAW), **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, **kwargs)


def job_counts(output: str) -> dict[str, int]:
    """Jobs per rule of a dry run; the training rules of each domain and group of seeds
    (train_<domain>_seeds<first>_<last>) and the DGP rules of each domain (dgp_...) are counted as 'train' and
    'dgp'."""
    assert "Job stats:" in output, f"no job planned: {output[-500:]}"
    start = output.index("Job stats:")
    table = output[start:output.index("total", start)]  # the first table (a run prints it again at the end)
    counts: dict[str, int] = {}
    for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.MULTILINE):
        rule = next((kind for kind in ("train", "dgp") if m[1].startswith(f"{kind}_")), m[1])
        counts[rule] = counts.get(rule, 0) + int(m[2])
    return counts


def rule_edges(dot: str) -> set[tuple[str, str]]:
    """The (rule, rule that needs its output) pairs of Snakemake's --rulegraph."""
    names = dict(re.findall(r"^\s*(\d+)\[label = \"(\w+)\"", dot, re.MULTILINE))
    return {(names[a], names[b]) for a, b in re.findall(r"^\s*(\d+) -> (\d+)$", dot, re.MULTILINE)}


def test_dry_run_lists_the_grid(tmp_path):
    done = snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[synthetic_linear, synthetic_nonlinear, energy]"])
    assert done.returncode == 0, done.stderr[-3000:]
    # a job per domain for its 2 seeds (seeds_per_job 5); with seeds_per_job=1 a training job per seed, and still a
    # DGP job per synthetic domain
    expected = {"dgp": 2, "train": 3, "audit": 3, "report": 1, "calibrate": 1, "html": 1, "all": 1}
    if not (RAW / "owid-energy-data.csv").is_file():
        expected |= {"train": 2, "audit": 2}
    else:
        expected["prep"] = 1
    assert job_counts(done.stdout) == expected
    one = snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[synthetic_linear, synthetic_nonlinear, energy]",
                                             "seeds_per_job=1"])
    assert job_counts(one.stdout) == expected | {"train": 2 * expected["train"]}
    # 8 seeds at 5 a job: two jobs of 4, which two cores finish together (5 and 3 left one idle for a third of the run)
    eight = snakemake(tmp_path, "-n", "-p", config=[*SMOKE, "domains=[synthetic_linear]", "seeds=8"])
    assert sorted(re.findall(r"^Job \d+: train_synthetic_linear_(seeds\w+)", eight.stdout, re.MULTILINE)) == [
        "seeds00_03", "seeds04_07"]
    # each job's notebooks learn its seeds, which train as one stacked model where train.stacked stacks (a GPU)
    assert sorted(re.findall(r"'stack_seeds=(\[[\d, ]+\])'", eight.stdout)) == ["[0, 1, 2, 3]", "[4, 5, 6, 7]"]


def test_each_job_is_printed_as_one_line_that_names_its_rule(tmp_path):
    """Snakemake prints a job as its rule's message (the rule, what it does, its log) instead of its input and output
    lists, and without its reason, which lists as many files: rule all's input was the grid's every file on one
    line (61 552 characters in the paper's grid, 7 886 in this one); the per-rule reasons still end a dry run."""
    done = snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[synthetic_linear, synthetic_nonlinear]"])
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [re.sub(r"^(train|dgp)_\w+", r"\1", rule)
               for rule in re.findall(r"^Job \d+: (\w+)", done.stdout, re.MULTILINE)]
    assert {rule: printed.count(rule) for rule in printed} == job_counts(done.stdout)
    assert "input:" not in done.stdout and "Reason:" not in done.stdout
    assert "output files have to be generated" in done.stdout
    assert max(len(line) for line in done.stdout.splitlines() if line.startswith("Job ")) < 250, done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) < 1000, done.stdout  # (the command line is one)


def test_the_config_readme_describes_every_key_of_the_config():
    """The grid's config sits in config/ (the standard workflow layout) with a README that has a row for each of its
    keys, and no row for a key it lacks."""
    keys = set(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    described = re.findall(r"^\| `(\w+)` \|", (ROOT / "config" / "README.md").read_text(), re.MULTILINE)
    assert sorted(described) == sorted(keys)


def test_dry_run_with_the_slurm_profile(tmp_path):
    done = snakemake(tmp_path, "-n", "--profile", str(ROOT / "workflow" / "profiles" / "slurm"),
                     config=["seeds=20", "domains=[synthetic_linear]", "calibration_negative_replicates=3"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert job_counts(done.stdout) == {"dgp": 1, "train": 4, "audit": 1, "report": 1, "calibrate": 1, "html": 1,
                                       "all": 1}


def test_a_calibration_of_the_current_rules_is_kept_and_a_stale_one_is_not(tmp_path):
    """A calibration in the grid's tables folder measured under the current rules and settings is kept (no calibrate
    job, and the workflow says so); one measured under other rules is run again, and the workflow says why."""
    config = [*SMOKE, "domains=[synthetic_linear]", "runs_dir=runs/cal", "calibration_negative_replicates=3",
              "calibration_positive_replicates=2"]
    tables = tmp_path / "runs" / "cal" / "tables"  # a grid whose runs folder is not runs/ keeps its tables there
    tables.mkdir(parents=True)
    (tables / "audit_calibration.csv").write_text("scenario\nlag_free\n")
    params = load_params(ROOT / "params" / "audit_calibration.yaml")
    calibration.write_record(tables, params, ["lag_free"], 3, 2, minutes=0.1, workers=1,
                             started=calibration.provenance(params))
    kept = snakemake(tmp_path, "-n", config=config)
    assert kept.returncode == 0, kept.stderr[-3000:]
    assert "calibrate" not in job_counts(kept.stdout) and "measured the current rules" in kept.stderr
    record = json.loads((tables / calibration.RECORD).read_text())
    older = {**record["rules_version"], "moderated_dl": record["rules_version"]["moderated_dl"] - 1}
    (tables / calibration.RECORD).write_text(json.dumps({**record, "rules_version": older}))
    stale = snakemake(tmp_path, "-n", config=config)
    assert job_counts(stale.stdout)["calibrate"] == 1
    assert f"the rules are now versions {verdicts.versions_text(record['rules_version'])}" in stale.stderr, \
        stale.stderr[-2000:]


def test_a_domain_without_its_inputs_is_skipped_with_the_reason(tmp_path):
    done = snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[synthetic_linear, economics]"],
                     env={"ACGATE_RAW_DIR": str(tmp_path / "empty")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"skipped economics: .*pwt110.* not found \(run `make data`", done.stderr)
    assert "prep" not in job_counts(done.stdout)


@pytest.fixture(scope="module")
def grid(tmp_path_factory, request):
    """A tiny grid killed (SIGKILL to the whole process group) while training its first seed, then rerun."""
    workdir = tmp_path_factory.mktemp("grid")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "workflow" / "Snakefile"), "--directory",
           str(workdir), "--cores", "2"]
    config = ["--config", *SMOKE, f"domains=[{', '.join(DOMAINS)}]"]
    # the killed kernels cannot remove their sockets' folders: these go to a temporary folder of the test's own
    # (a short path: a Unix socket's path is limited to about 100 characters), removed at the end
    sockets = tempfile.mkdtemp(prefix="acgate-test-")
    request.addfinalizer(lambda: shutil.rmtree(sockets, ignore_errors=True))
    env = {**os.environ, "ACGATE_RAW_DIR": str(RAW), "TMPDIR": sockets}
    first = subprocess.Popen(cmd + config, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                             start_new_session=True)
    seed_dir = workdir / GRID / "synthetic_linear" / "seed00"
    deadline = time.time() + 300
    while not (seed_dir / "acgate" / "metrics.json").is_file():  # mid-run: one method done, the others not
        assert first.poll() is None and time.time() < deadline, "the grid ended before it could be killed"
        time.sleep(0.1)
    started = psutil.Process(first.pid).children(recursive=True)  # Snakemake, the notebook runner, its kernel
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    # the kernel runs in a session of its own: it ends within a second of finding its runner gone (ipykernel polls
    # for its parent), and may complete the run it is in first
    assert not psutil.wait_procs(started, timeout=30)[1], "a process of the killed grid still runs"
    killed_at = time.time()
    assert not (seed_dir / "03_train.ipynb").exists()
    # after a hard kill (or a power loss) Snakemake's lock remains; --unlock releases it (make unlock)
    assert subprocess.run([*cmd, "--unlock", *config], capture_output=True, env=env).returncode == 0
    rerun = subprocess.run([*cmd, "--rerun-incomplete", *config], capture_output=True, text=True, env=env)
    assert rerun.returncode == 0, rerun.stderr[-5000:]
    return workdir, killed_at, rerun.stderr


def killed_seed_methods(log: str) -> tuple[set[str], set[str]]:
    """The methods of the killed seed that the rerun's terminal reports kept, and those it reports trained."""
    lines = [line for line in log.splitlines() if "synthetic_linear/seed00:" in line]
    return ({m[1] for line in lines if (m := re.search(r"\[(\w+) seed 0\] kept:", line))},
            {m[1] for line in lines if (m := re.search(r"\[(\w+) seed 0\] done in [\d.]+ s", line))})


def test_the_rerun_completes_the_grid_with_no_stale_artifact(grid):
    workdir, killed_at, log = grid
    for domain in DOMAINS:
        for seed in ("00", "01"):
            seed_dir = workdir / GRID / domain / f"seed{seed}"
            assert (seed_dir / "03_train.ipynb").is_file()
            for metrics in seed_dir.glob("*/metrics.json"):  # every method's files are from one finished run
                method = metrics.parent
                for name in ("manifest.json", "lags.csv", "predictions.csv", "history.csv"):
                    assert (method / name).stat().st_mtime <= metrics.stat().st_mtime
        assert (workdir / GRID / domain / "audit" / "04_audit.ipynb").is_file()
    # the killed seed is completed: a method that had finished before the kill is kept (its run is current), the
    # others are trained anew, and its executed notebook appears only after the kill
    killed = workdir / GRID / "synthetic_linear" / "seed00"
    assert (killed / "03_train.ipynb").stat().st_mtime > killed_at
    kept, trained = killed_seed_methods(log)
    assert "acgate" in kept and not kept & trained, (kept, trained)
    assert kept | trained == {m.parent.name for m in killed.glob("*/metrics.json")}, (kept, trained)
    # (manifest.json tells: Snakemake touches a kept run's metrics.json, an output of the job)
    assert {m.parent.name for m in killed.glob("*/manifest.json") if m.stat().st_mtime > killed_at} == trained
    leftovers = [p for p in workdir.rglob(".*") if p.is_file() and ".snakemake" not in p.parts
                 and p.name != ".workflow_started.json" and p.suffix != ".lock"]  # a run folder's lock stays
    assert leftovers == []  # no .partial / .input notebooks, no .tmp files of atomic writes


def test_the_grid_ends_in_the_report_and_the_html_view(grid):
    workdir, _, log = grid
    tables, figures = workdir / GRID / "tables", workdir / GRID / "figures"
    for name in ("synthetic_summary", "verdict_matrix", "wilcoxon_synthetic_kstar", "controlled_comparison",
                 "reproduction"):
        for ext in ("csv", "md") if name == "reproduction" else ("csv", "tex", "md"):  # a lookup: no LaTeX
            assert (tables / f"{name}.{ext}").is_file(), f"{name}.{ext}"
    for name in ("evidence", "use_case", "architecture") + (("case_study", "forecast_r2") if REAL else ()):
        assert (figures / f"{name}.png").stat().st_size > 10_000 and (figures / f"{name}.pdf").is_file(), name
    summary = pd.read_csv(tables / "synthetic_summary.csv")
    assert (summary[summary.domain == "synthetic_linear"].seeds == 2).all(), summary[["domain", "method", "seeds"]]
    index = (workdir / GRID / "html" / "index.html").read_text()
    assert index.count("03_train</a>") == 4 and "05_report</a>" in index, index
    calibration = pd.read_csv(tables / "audit_calibration.csv")
    assert set(calibration.scenario) == {"lag_free"} and (calibration.replicates == 2).all(), calibration
    assert (figures / "audit_calibration.png").is_file()
    assert (workdir / GRID / "html" / GRID / "synthetic_linear" / "seed01" / "03_train.html").is_file()
    assert "workflow finished in" in log, log[-3000:]
    reports = re.search(r"^audit reports, one page a domain: (.*)$", log, re.MULTILINE)  # the last lines name them
    assert reports and reports.group(1).split(", ") == [str(GRID / d / "audit" / "report.html") for d in DOMAINS]
    kept, trained = killed_seed_methods(log)  # the killed seed's progress, each method kept or trained anew
    expected = load_params(ROOT / "params" / "synthetic_linear.yaml", ROOT / "params" / "smoke.yaml").methods
    assert kept | trained == set(expected), (kept, trained)


def test_snakemakes_report_shows_the_results_with_their_captions(grid, tmp_path):
    """`snakemake --report` on a finished grid, as docs/workflow.md gives it (no --cores: the workflow's check of the
    cores stopped it, "Workflow requires a total number of cores"), gathers the figures and tables marked report() in
    the Snakefile, each with its caption (workflow/report/<name>.rst), and leaves the grid as it was."""
    workdir = grid[0]
    files = [path for path in (workdir / GRID).rglob("*") if path.is_file()]
    before = {path: path.stat().st_mtime_ns for path in files}
    page = tmp_path / "report.html"
    done = snakemake(workdir, "--report", str(page), config=[*SMOKE, f"domains=[{', '.join(DOMAINS)}]"], cores=None)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("evidence.png", "use_case.png", "architecture.png", "verdict_matrix.csv", "synthetic_summary.csv",
                 "reproduction.csv", "report.html"):  # report.html: each domain's audit report page
        assert f"Adding {name} (" in done.stderr, (name, done.stderr[-3000:])
    html = page.read_text()
    for caption in ("evidence", "verdict_matrix", "workflow", "audit_page"):  # each from its file (its first words)
        assert " ".join((ROOT / "workflow" / "report" / f"{caption}.rst").read_text().split()[:3]) in html, caption
    assert {path: path.stat().st_mtime_ns for path in files} == before


def test_a_finished_grid_is_not_rerun_and_a_changed_params_file_is(grid, tmp_path):
    workdir, _, _ = grid
    config = [*SMOKE, f"domains=[{', '.join(DOMAINS)}]"]
    done = snakemake(workdir, "-n", config=config)
    assert "Nothing to be done" in done.stdout + done.stderr
    overlay = tmp_path / "smoke_changed.yaml"  # a newer copy of the overlay: everything of its kind is stale
    overlay.write_text((ROOT / "params" / "smoke.yaml").read_text().replace("max_epochs: 15", "max_epochs: 14"))
    config[0] = f"profiles={{synthetic: {overlay}, data: params/smoke_panel.yaml}}"
    config.append(f"runs_dir={GRID}")  # the changed params in the same grid folder
    counts = job_counts(snakemake(workdir, "-n", config=config).stdout)
    synthetic = sum(d.startswith("synthetic") for d in DOMAINS)  # a job for both seeds of each
    assert counts["train"] == synthetic and counts["dgp"] == synthetic


def test_grids_with_different_profiles_keep_their_panels_and_runs_apart(grid, tmp_path):
    workdir = grid[0]  # (not a copy: the notebooks' paths are absolute, so a moved grid would rerun)
    overlay = tmp_path / "tiny.yaml"  # another profile: fewer entities, so another panel
    overlay.write_text((ROOT / "params" / "smoke.yaml").read_text().replace("n_entities: 40", "n_entities: 30"))
    other = [f"profiles={{synthetic: {overlay}}}", "seeds=1", "domains=[synthetic_linear]", "methods=[acgate]",
             *SMOKE[2:]]
    done = snakemake(workdir, "runs/tiny/synthetic_linear/audit/04_audit.ipynb", config=other)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (workdir / "runs" / "tiny" / "data" / "processed" / "synthetic_linear" / "seed00" / "panel.npz").is_file()
    again = snakemake(workdir, "-n", config=[*SMOKE, f"domains=[{', '.join(DOMAINS)}]"])
    assert "Nothing to be done" in again.stdout + again.stderr  # the first grid is untouched


def test_a_deleted_finished_marker_retrains_that_run_only(grid):
    workdir, _, _ = grid
    config = [*SMOKE, f"domains=[{', '.join(DOMAINS)}]"]
    seed_dir = workdir / GRID / "synthetic_linear" / "seed01"
    (seed_dir / "tft" / "metrics.json").unlink()
    counts = job_counts(snakemake(workdir, "-n", config=config).stdout)
    assert counts["train"] == 1 and counts["audit"] == 1 and "dgp" not in counts
    before = {m.parent.name: m.stat().st_mtime for m in seed_dir.glob("*/manifest.json")}
    done = snakemake(workdir, config=config)
    assert done.returncode == 0, done.stderr[-3000:]
    after = {m.parent.name: m.stat().st_mtime for m in seed_dir.glob("*/manifest.json")}
    assert after.pop("tft") > before.pop("tft") and after == before  # tft retrained, the other methods kept
    verdicts = json.loads((workdir / GRID / "synthetic_linear" / "audit" / "verdicts.json").read_text())
    assert verdicts["excluded_runs"] == []


def test_every_deleted_output_is_made_again_with_the_steps_after_it(grid, tmp_path):
    """A step reruns when its output is missing (docs/workflow.md, "What is stale"), though what the steps after it
    wrote is newer: an audit's folder or one of its files, a training notebook, a panel's folder or one of its files.
    (Each is moved away for a dry run, then back, so that the grid stays as the other tests expect.)"""
    workdir = grid[0]
    config = [*SMOKE, f"domains=[{', '.join(DOMAINS)}]"]
    linear, panels = workdir / GRID / "synthetic_linear", workdir / GRID / "data" / "processed" / "synthetic_linear"
    after_audit = {"audit": 1, "report": 1, "html": 1, "all": 1}
    after_panel = {"dgp": 1, "train": 1} | after_audit  # a DGP job draws every seed's panel, a training job trains both
    for path, expected in ((linear / "audit", after_audit), (linear / "audit" / "verdicts.json", after_audit),
                           (linear / "seed01" / "03_train.ipynb", {"train": 1} | after_audit),
                           (panels, after_panel), (panels / "seed00" / "panel.npz", after_panel)):
        moved = tmp_path / path.name
        path.rename(moved)
        try:
            done = snakemake(workdir, "-n", config=config)
        finally:
            moved.rename(path)
        assert done.returncode == 0, done.stderr[-3000:]
        assert job_counts(done.stdout) == expected, path


def keep_a_calibration(workdir: Path) -> None:
    """A calibration of the current rules in the smoke grid's tables folder, so that its grid keeps it (runs none)."""
    tables = workdir / GRID / "tables"
    tables.mkdir(parents=True)
    (tables / "audit_calibration.csv").write_text("scenario\nlag_free\n")
    params = load_params(ROOT / "params" / "audit_calibration.yaml")
    calibration.write_record(tables, params, ["lag_free"], 2, 1, minutes=0.1, workers=1,
                             started=calibration.provenance(params))


def test_a_failed_training_job_keeps_the_runs_it_finished(tmp_path):
    """A training job of two seeds whose second seed fails (a folder where its history.csv goes): the first seed's
    run, trained by this job, stays (Snakemake deletes a failed job's outputs, and its finished marker is one), and the
    next run trains only the seed that failed."""
    config = [*SMOKE, "domains=[synthetic_linear]", "seeds=2", "methods=[acgate]"]
    keep_a_calibration(tmp_path)
    seeds = tmp_path / GRID / "synthetic_linear"
    (seeds / "seed01" / "acgate" / "history.csv").mkdir(parents=True)
    failed = snakemake(tmp_path, config=config)
    assert failed.returncode != 0 and "seed 1" in failed.stderr, failed.stderr[-3000:]
    assert (seeds / "seed00" / "acgate" / "metrics.json").is_file(), failed.stderr[-3000:]
    assert not (seeds / "seed01" / "acgate" / "metrics.json").exists()
    (seeds / "seed01" / "acgate" / "history.csv").rmdir()
    again = snakemake(tmp_path, config=config)
    assert again.returncode == 0, again.stderr[-3000:]
    kept, trained = (set(re.findall(rf"\[acgate seed (\d)\] {word}", again.stderr)) for word in ("kept:", "done in"))
    assert (kept, trained) == ({"0"}, {"1"}), again.stderr[-3000:]


def test_a_failed_retraining_is_redone_by_the_next_run(tmp_path):
    """A failed training job loses its executed notebooks, while Snakemake puts back the finished markers it had
    (update()): the same command again must redo the job, not find every file it asks for present. A grid of its own,
    one domain, seed and method (in the shared grid another domain's due steps would ask for the notebooks and hide
    the fault), whose retrain=true job fails writing its run (a folder where history.csv goes; a damaged synthetic
    panel would be drawn again)."""
    config = [*SMOKE, "domains=[synthetic_linear]", "seeds=1", "methods=[acgate]"]
    keep_a_calibration(tmp_path)
    done = snakemake(tmp_path, config=config)
    assert done.returncode == 0, done.stderr[-3000:]
    seed_dir = tmp_path / GRID / "synthetic_linear" / "seed00"
    (seed_dir / "acgate" / "history.csv").unlink()
    (seed_dir / "acgate" / "history.csv").mkdir()
    retrain = [*config, "retrain=true"]
    failed = snakemake(tmp_path, config=retrain)
    assert failed.returncode != 0 and not (seed_dir / "03_train.ipynb").exists(), failed.stderr[-3000:]
    assert (seed_dir / "acgate" / "metrics.json").is_file()  # put back
    again = snakemake(tmp_path, "-n", config=retrain)
    assert job_counts(again.stdout) == {"train": 1, "audit": 1, "report": 1, "html": 1, "all": 1}, again.stdout[-3000:]


def test_a_failed_html_view_prints_its_cause_in_the_terminal(grid, tmp_path):
    """The HTML view's log takes only its summary line: its error (here a folder of pages that cannot be made; on a
    full disk, No space left on device) reaches the terminal with the file it names, not a log that may not be
    writable. The view is then made again, so that the other tests find the grid finished."""
    workdir = grid[0]
    config = [*SMOKE, f"domains=[{', '.join(DOMAINS)}]"]
    pages = workdir / GRID / "html" / "runs"  # the pages of the notebooks under runs/
    pages.rename(tmp_path / "pages")
    pages.write_text("")  # a file where the pages' folder goes
    try:
        failed = snakemake(workdir, "--forcerun", "html", config=config)
    finally:
        pages.unlink()
        (tmp_path / "pages").rename(pages)
        made = snakemake(workdir, config=config)
    assert failed.returncode != 0
    assert re.search(r"the HTML view \S*index\.html failed: \[Errno 20\] Not a directory: '\S*html/runs/",
                     failed.stderr), failed.stderr[-3000:]
    assert made.returncode == 0, made.stderr[-3000:]


def test_bad_seeds_domains_and_methods_stop_with_the_value_named(tmp_path):
    for value, message in (("seeds=abc", "seeds = 'abc': must be a positive whole number"),
                           ("seeds=-1", "seeds = -1: must be a positive whole number"),
                           ("methods=[acgat]", "methods = ['acgat']: must be a list of method names from acgate"),
                           ("methods=[acgat]", "unknown: acgat"),
                           ("domains=synthetic_linear", "domains = 'synthetic_linear': must be a non-empty list"),
                           ("domains=[]", "domains = []: must be a non-empty list"),
                           ("domains=[synthetic_lineer]", "no params file"),
                           ("domains=[synthetic_lineer]", "the params files here: "),
                           ("methods=[grouped_ardl]", "domain 'synthetic_linear': method(s) grouped_ardl not in its "
                                                      "params file"),
                           ("seeds_per_job=0", "seeds_per_job = 0: must be a positive whole number"),
                           ("panel_matched_null_replicates=-1", "panel_matched_null_replicates = -1: must be a whole "
                                                                "number, 0 or more"),
                           ("run_dir=elsewhere", "config key 'run_dir' is not one of the workflow's: did you mean "
                                                 "'runs_dir'?"),
                           ("seed=3", "config key 'seed' is not one of the workflow's: did you mean 'seeds'?")):
        done = snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[synthetic_linear]", value])
        assert done.returncode != 0 and message in done.stdout + done.stderr, (value, done.stdout[-2000:])


def test_leave_out_drops_a_method_from_one_domain_only_and_says_so(tmp_path):
    """A method left out of one domain is neither trained nor audited there (no finished marker asked for, not in
    its jobs' methods), the other domain still runs it, and the workflow names it at its start; a method that
    `methods` asks for but a domain's params file lacks (tft in synthetic_null) may be left out of that domain."""
    methods = "methods=[acgate, no_ac_encoder, tft, moderated_dl, shared_dl]"
    config = [*SMOKE, "domains=[synthetic_linear, synthetic_null]", methods, "leave_out={synthetic_null: [tft]}"]
    done = snakemake(tmp_path, "--summary", config=config)
    assert done.returncode == 0, done.stderr[-3000:]
    asked = set(re.findall(r"^(\S+/metrics\.json)\t", done.stdout, re.MULTILINE))
    for domain, trained in (("synthetic_linear", {"acgate", "no_ac_encoder", "tft", "moderated_dl", "shared_dl"}),
                            ("synthetic_null", {"acgate", "no_ac_encoder", "moderated_dl", "shared_dl"})):
        for seed in ("00", "01"):
            found = {Path(p).parent.name for p in asked if f"/{domain}/seed{seed}/" in p}
            assert found == trained, (domain, seed, found)
    assert "synthetic_null: leaving out tft (leave_out in the config; the tables and figures show it for the other " \
        "domains only)" in done.stderr, done.stderr[-2000:]
    planned = snakemake(tmp_path, "-n", "-p", config=config)
    assert planned.returncode == 0, planned.stderr[-3000:]
    jobs = [line for line in planned.stdout.splitlines() if "03_train.py" in line or "04_audit.py" in line]
    assert len(jobs) == 4 and all(("tft" in line) == ("domain=synthetic_linear" in line) for line in jobs), jobs


def test_a_bad_leave_out_stops_with_the_value_named(tmp_path):
    for value, message in (("leave_out=tft", "leave_out = 'tft': must be a mapping of domains to lists of methods"),
                           ("leave_out={synthetic_linear: tft}", "leave_out = {'synthetic_linear': 'tft'}: must be a "
                                                                 "mapping of domains to lists of methods"),
                           ("leave_out={economics: [tft]}", "leave_out = {'economics': ['tft']}: economics not among "
                                                            "this grid's domains (synthetic_linear)"),
                           ("leave_out={synthetic_linear: [tfx]}", "tfx not among the methods of 'synthetic_linear'"),
                           ("leave_out={synthetic_linear: [acgate, moderated_dl]}",
                            "leaves no method of 'synthetic_linear'")):
        done = snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[synthetic_linear]",
                                                 "methods=[acgate, moderated_dl]", value])
        assert done.returncode != 0 and message in done.stdout + done.stderr, (value, done.stderr[-2000:])


def test_a_hyphenated_domain_name_is_refused_before_any_job(tmp_path):
    """'-' once passed the params check and failed the {domain} wildcard (MissingInputException in rule report):
    both now use config.NAME_PATTERN, and the config's list and a params file's domain key are refused alike."""
    done = snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[my-panel]"])
    assert done.returncode != 0, done.stdout[-2000:]
    assert "domains: 'my-panel' is not allowed: a domain name must be a plain name of letters, digits and _" in \
        done.stdout + done.stderr, done.stderr[-2000:]
    own = tmp_path / "my_panel.yaml"
    own.write_text(yaml.safe_dump({"extends": str(ROOT / "params" / "synthetic_linear.yaml"), "domain": "my-panel"}))
    done = snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[my_panel]", f"params={{my_panel: '{own}'}}"])
    assert done.returncode != 0 and "domain = 'my-panel' is not allowed" in done.stdout + done.stderr, \
        done.stderr[-2000:]


def make(*args, env=None, timeout=120):
    """``make`` in the project root with this interpreter's environment as the Makefile's VENV, whose set-up it
    leaves alone (-o: an environment made otherwise, conda's say, has no .installed)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    cmd = ["make", "-C", str(ROOT), "-o", f"{sys.prefix}/.installed", f"VENV={sys.prefix}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def snakemake_options(argv: list[str], monkeypatch) -> argparse.Namespace:
    """The options Snakemake runs with for the command line ``snakemake <argv>`` in the project root: its own
    parser, which reads the profiles (--profile, and the workflow's default profile) as a run does."""
    monkeypatch.chdir(ROOT)
    return parse_args(argv)[1]


def assert_the_workflows_options(options: argparse.Namespace):
    assert options.rerun_incomplete and options.keep_going and options.keep_incomplete
    assert (options.max_jobs_per_timespan.max_jobs, options.max_jobs_per_timespan.timespan) == (500, 20)


def test_plain_snakemake_runs_with_the_options_of_make_paper(monkeypatch):
    """docs/workflow.md's `snakemake --cores 2` takes the workflow's options from its default profile, as make paper
    does: an interrupted job is rerun, a failed one does not stop the others, the scheduler's passes are rationed."""
    assert_the_workflows_options(snakemake_options(["--cores", "2"], monkeypatch))
    assert_the_workflows_options(snakemake_options(["-s", str(ROOT / "workflow" / "Snakefile"), "--cores", "2"],
                                                   monkeypatch))
    # a command-line option wins over the profile's; --workflow-profile none leaves the profile out
    assert snakemake_options(["--cores", "2", "--max-jobs-per-timespan", "10/1s"],
                             monkeypatch).max_jobs_per_timespan.max_jobs == 10
    assert not snakemake_options(["--cores", "2", "--workflow-profile", "none"], monkeypatch).keep_going


def test_make_paper_runs_with_the_workflows_options_and_a_profile(monkeypatch):
    """make paper leaves the workflow's options to its default profile; SNAKEMAKE_PROFILE adds the SLURM profile's
    (its executor and job count), and the workflow's options stay."""
    for profile in ("", "workflow/profiles/slurm"):
        done = make("-n", "paper", "JOBS=2", f"SNAKEMAKE_PROFILE={profile}")
        assert done.returncode == 0, done.stderr[-2000:]
        line = next(line for line in done.stdout.splitlines() if "--snakefile workflow/Snakefile" in line)
        options = snakemake_options(shlex.split(line)[1:], monkeypatch)
        assert_the_workflows_options(options)
        assert options.cores == 2
        assert (options.executor, options.jobs) == (("slurm", 100) if profile else (None, None)), line


def test_jobs_below_one_or_not_a_number_stop_with_the_fix(tmp_path):
    """Snakemake takes --cores 0 and then waits for ever at "Select jobs to execute...": make refuses such a JOBS
    before it starts anything (-n: it would run nothing either way), and the Snakefile refuses --cores 0."""
    for jobs in ("0", "two", "-1", ""):
        done = make("-n", "paper", f"JOBS={jobs}")
        assert done.returncode != 0, (jobs, done.stdout[-2000:])
        assert (f"JOBS={jobs}: the number of parallel jobs must be a whole number, 1 or more (or all), e.g. make "
                "paper JOBS=2" in done.stderr), (jobs, done.stderr[-2000:])
    for jobs in ("3", "all"):  # all: Snakemake's every core
        assert make("-n", "paper", f"JOBS={jobs}").stdout.count(f"--cores {jobs} ") == 1
    done = snakemake(tmp_path, "-n", "--cores", "0", config=[*SMOKE, "domains=[synthetic_linear]"])
    assert done.returncode != 0 and "--cores 0: no job could ever start; give 1 or more" in done.stdout + done.stderr


def test_make_lab_runs_as_root_where_jupyter_would_refuse():
    """`jupyter lab` stops as root (containers) unless told --allow-root; make lab says it for root only."""
    done = make("-n", "lab")
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("--allow-root" in done.stdout) == (os.geteuid() == 0), done.stdout[-2000:]


def test_the_grid_is_the_project_roots_from_any_folder_inside_it():
    """Snakemake started in lib/ (or any folder of the project) plans the grid under the project root, as from the
    root, not a second grid under lib/ (a dry run: nothing is written)."""
    runs = "runs/test_the_grid_is_the_project_roots"  # no grid of this name exists: every job is planned
    done = snakemake(ROOT / "lib", "-n", "-p", config=[*SMOKE, "domains=[synthetic_linear]", f"runs_dir={runs}"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert str(ROOT / "lib" / "runs") not in done.stdout
    assert not (ROOT / "lib" / "runs").exists() and not (ROOT / "lib" / ".snakemake").exists()
    # the notebooks get their folders relative to the root (they join them to it), so that an executed notebook,
    # which records its parameters, names no folder of the machine
    assert f"runs_dir={runs} " in done.stdout and f"data_dir={runs}/data " in done.stdout
    assert "params_file=params/synthetic_linear.yaml " in done.stdout
    assert not re.search(rf"\w+_(dir|file)={re.escape(str(ROOT))}", done.stdout), done.stdout[-3000:]


def test_make_audit_runs_an_own_panel_in_runs_panels_and_says_what_it_needs():
    """make audit DOMAIN=d: the grid of that one domain in runs/panels/ (its page at runs/panels/d/audit/report.html,
    not runs/d/d/...), without the 20-s wait the paper grid's scheduling timespan leaves at its end."""
    done = make("-n", "audit", "DOMAIN=example_panel", "JOBS=2")
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(line for line in done.stdout.splitlines() if "--snakefile workflow/Snakefile" in line)
    assert "'domains=[example_panel]' runs_dir=runs/panels" in line, line
    assert "--max-jobs-per-timespan 100/1s" in line, line
    for domain in ("", "a-b", "a b", "x' ;touch injected; echo 'y", "a\nb"):  # refused as make reads the Makefile:
        refused = make("-n", "audit", f"DOMAIN={domain}")       # before the set-up, and never through a shell
        assert refused.returncode != 0 and "make audit needs DOMAIN=<your_domain>" in refused.stderr, domain
        assert f"(given: DOMAIN={domain})" in refused.stderr, refused.stderr
    assert not (ROOT / "injected").exists()


def test_an_unwritable_home_does_not_stop_make(tmp_path):
    """Snakemake's cache goes to $XDG_CACHE_HOME, else ~/.cache; where that cannot be made (HOME under a file: even
    root cannot create it), make sends the cache to .snakemake/cache and says so, instead of Snakemake's traceback."""
    (tmp_path / "file").write_text("")
    env = {**{k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}, "HOME": str(tmp_path / "file" / "home"),
           "ACGATE_RAW_DIR": str(RAW)}
    config = " ".join(f"'{value}'" for value in [*SMOKE, "domains=[synthetic_linear]", f"runs_dir={tmp_path / 'runs'}"])
    done = make("dry-run", "JOBS=1", f"CONFIG={config}", env=env, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"{tmp_path}/file/home/.cache cannot be written: Snakemake's cache goes to {ROOT}/.snakemake/cache" \
        in done.stdout, done.stdout[-2000:]
    assert job_counts(done.stdout)["train"] == 1


@pytest.fixture
def own_panel(tmp_path):
    """A folder whose path has a space, holding the example CSV and a params file for it (absolute csv_file)."""
    folder = tmp_path / "my project"
    csv = write_example(folder / "panel.csv")
    spec = yaml.safe_load((ROOT / "params" / "example_panel.yaml").read_text())
    spec["data"]["csv_file"] = str(csv)
    (folder / "own.yaml").write_text(yaml.safe_dump(spec))
    config = [*SMOKE, "domains=[example_panel]", f"params={{example_panel: '{folder / 'own.yaml'}'}}"]
    return folder, csv, config


def test_an_own_panels_grid_runs_its_panel_matched_study_before_its_audit(own_panel, tmp_path):
    folder, _, config = own_panel
    done = snakemake(folder, "-n", config=config)
    assert done.returncode == 0, done.stderr[-3000:]
    assert job_counts(done.stdout)["panel_matched"] == 1
    graph = snakemake(folder, "--rulegraph", config=config)
    assert ("panel_matched", "audit") in rule_edges(graph.stdout), graph.stdout  # the audit waits for it
    # the paper's real panels only when asked; a synthetic domain never
    assert "panel_matched" not in job_counts(snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[synthetic_linear]"])
                                             .stdout)
    for value, message in (("panel_matched_domains=[synthetic_linear]", "synthetic_linear is synthetic"),
                           ("panel_matched_domains=3", "must be auto or a list of data domains")):
        bad = snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[synthetic_linear]", value])
        assert bad.returncode != 0 and message in bad.stdout + bad.stderr, value


def test_a_replaced_input_reruns_its_preparation_even_when_older(own_panel):
    folder, csv, config = own_panel
    target = str(GRID / "data" / "processed" / "example_panel" / "01_data_prep.ipynb")
    done = snakemake(folder, target, config=config)
    assert done.returncode == 0, done.stderr[-3000:]  # paths with a space work
    assert "Nothing to be done" in snakemake(folder, "-n", target, config=config).stdout
    # a file of its panel deleted: the grid (no target; --until: what it plans up to this step) makes it again
    panel = folder / GRID / "data" / "processed" / "example_panel" / "panel.npz"
    panel.rename(folder / "panel.npz")
    assert job_counts(snakemake(folder, "-n", "--until", "prep", config=config).stdout) == {"prep": 1}
    (folder / "panel.npz").rename(panel)
    stamp = csv.stat().st_mtime
    frame = pd.read_csv(csv)
    frame.loc[0, "driver"] += 1.0
    frame.to_csv(csv, index=False)
    os.utime(csv, (stamp - 3600, stamp - 3600))  # older than the panel made from it, but different
    assert job_counts(snakemake(folder, "-n", target, config=config).stdout) == {"prep": 1}


def test_a_failed_notebook_prints_its_error_in_the_terminal(own_panel):
    folder, _, config = own_panel
    spec = yaml.safe_load((folder / "own.yaml").read_text())
    spec["data"]["first_time"], spec["split"] = 1990, {"val_start": 2017, "test_start": 2021}
    (folder / "own.yaml").write_text(yaml.safe_dump(spec))
    done = snakemake(folder, str(GRID / "data" / "processed" / "example_panel" / "01_data_prep.ipynb"), config=config)
    assert done.returncode != 0
    assert re.search(r"01_data_prep.py failed: PrepError: .*first_time..last_time = 1990..2024 is outside the data's "
                     r"time range 2000..2024", done.stderr), done.stderr[-3000:]
    assert "log: " in done.stderr and "01_data_prep.log" in done.stderr


def test_a_run_made_stale_by_a_params_change_is_retrained_before_it_is_audited(grid, tmp_path):
    workdir = tmp_path / "grid"
    shutil.copytree(grid[0], workdir, symlinks=True)  # a copy: the shared grid stays as the other tests expect
    overlay = tmp_path / "smoke_changed.yaml"
    overlay.write_text((ROOT / "params" / "smoke.yaml").read_text().replace("max_epochs: 15", "max_epochs: 14"))
    config = [f"profiles={{synthetic: {overlay}, data: params/smoke_panel.yaml}}", *SMOKE[1:],
              "domains=[synthetic_linear]", f"runs_dir={GRID}"]  # the changed params in the same grid folder
    done = snakemake(workdir, config=config)
    assert done.returncode == 0, done.stderr[-3000:]
    digest = load_params(ROOT / "params" / "synthetic_linear.yaml", overlay).digest()
    audit_dir = workdir / GRID / "synthetic_linear" / "audit"
    runs = list((workdir / GRID / "synthetic_linear").glob("seed*/*/metrics.json"))
    methods = load_params(ROOT / "params" / "synthetic_linear.yaml").methods
    assert len(runs) == 2 * len(methods) and all(json.loads(m.read_text())["params_hash"] == digest for m in runs)
    assert json.loads((audit_dir / "verdicts.json").read_text())["excluded_runs"] == []
    assert (audit_dir / "04_audit.ipynb").stat().st_mtime > max(m.stat().st_mtime for m in runs)


def test_files_dated_in_the_future_stop_the_workflow_with_the_fix(tmp_path):
    """With a grid's files dated a day ahead, a failing job made Snakemake delete the metrics.json of 22 finished runs
    ("Cannot restore ... no backup found"), and an edited max_lag went unseen ("Nothing to be done")."""
    future = tmp_path / GRID / "synthetic_linear" / "seed00" / "acgate" / "metrics.json"
    future.parent.mkdir(parents=True)
    future.write_text("{}")
    ahead = time.time() + 86_400
    os.utime(future, (ahead, ahead))
    done = snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[synthetic_linear]"])
    assert done.returncode != 0
    assert re.search(r"clock skew: .*seed00/acgate/metrics.json is dated .*, after this machine's clock .*"
                     r"-newermt now -exec touch", done.stdout + done.stderr), done.stdout[-2000:]
    os.utime(future, (time.time(), time.time()))  # given today's date, the grid plans as usual
    assert snakemake(tmp_path, "-n", config=[*SMOKE, "domains=[synthetic_linear]"]).returncode == 0


@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="reads the processes' folders in /proc (Linux)")
def test_make_unlock_leaves_a_running_workflows_lock_alone():
    """`make unlock` removed every lock of the project, another running grid's too, which then failed."""
    grid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "snakemake"], cwd=ROOT)
    try:
        done = make("unlock")
    finally:
        grid.kill()
        grid.wait()
    assert done.returncode != 0
    running = re.search(rf"a workflow is running in {re.escape(str(ROOT))} \(process ([\d ]+)\); its lock is not "
                        "stale", done.stdout)
    assert running and str(grid.pid) in running.group(1).split(), done.stdout
