"""Fixtures shared by the test modules. Real input files are found only through ``$ACGATE_RAW_DIR`` (a folder
holding pwt110.dta, owid-co2-data.csv, owid-energy-data.csv and wgidataset.xlsx); tests that need them skip
without it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from acgate.config import Params, load_params

ROOT = Path(__file__).resolve().parents[1]
RAW_FILES = ("pwt110.dta", "owid-co2-data.csv", "owid-energy-data.csv", "wgidataset.xlsx")


@pytest.fixture(scope="session")
def smoke_params() -> Params:
    """The linear synthetic domain under the smoke profile: 40 entities, 20 steps, K = 5, 15 epochs."""
    return load_params(ROOT / "params" / "synthetic_linear.yaml", ROOT / "params" / "smoke.yaml")


@pytest.fixture(scope="session")
def raw_dir() -> Path:
    """``$ACGATE_RAW_DIR`` when it holds the official input files; the test skips otherwise."""
    folder = Path(os.environ.get("ACGATE_RAW_DIR", ""))
    if not os.environ.get("ACGATE_RAW_DIR") or not all((folder / name).is_file() for name in RAW_FILES):
        pytest.skip("real input files not found: set ACGATE_RAW_DIR to a folder holding " + ", ".join(RAW_FILES))
    return folder


HOLD_LOCK = """
import sys, time
from acgate import runs
with runs.writing(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def other_writer():
    """``hold(folder)`` starts another process that writes run folder ``folder`` (holds its lock, as a notebook
    retraining the run would) and returns it (a ``subprocess.Popen``); any still running are stopped when the test
    ends."""
    started = []

    def hold(folder: Path) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(folder)], stdout=subprocess.PIPE, text=True)
        started.append(process)
        assert process.stdout.readline().strip() == "held"
        return process

    yield hold
    for process in started:
        process.kill()
        process.wait()
        process.stdout.close()


# `make test-fast` runs the tests not marked slow (pytest -m "not slow"). Besides the tests marked where they are
# written, these are slow: every test of a module or folder named in SLOW_MODULES (they execute notebooks or run the
# Snakemake workflow) and the tests named in SLOW_TESTS (a notebook executed, calibration replicates in worker
# processes). Names, not paths, so that they stay marked wherever under tests/ they move; a split or renamed module
# takes its new name here.
SLOW_MODULES = {"test_notebooks", "test_workflow", "notebook", "workflow"}
SLOW_TESTS = {"test_the_study_notebook_states_its_rates_in_the_audit",
              "test_replicates_in_worker_processes_report_while_they_run"}


def pytest_collection_modifyitems(items):
    tests = Path(__file__).resolve().parent
    for item in items:
        names = {item.path.stem, *item.path.resolve().relative_to(tests).parent.parts}  # the folders under tests/ only
        if names & SLOW_MODULES or getattr(item, "originalname", item.name) in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
