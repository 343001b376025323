"""Fixtures shared by the test modules. Real input files are found only through ``$ACGATE_RAW_DIR`` (a folder
holding pwt110.dta, owid-co2-data.csv, owid-energy-data.csv and wgidataset.xlsx); tests that need them skip
without it. Hand-built runs folders whose k* is known (``make_domain``) serve the audit's tests and the report's."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from acgate.config import Params, load_params
from acgate.data import sources
from acgate.data.panel import Panel
from acgate.models import metrics

ROOT = Path(__file__).resolve().parents[1]
RAW_FILES = ("pwt110.dta", "owid-co2-data.csv", "owid-energy-data.csv", "wgidataset.xlsx")


@pytest.fixture(scope="session", autouse=True)
def data_folders(tmp_path_factory):
    """The tests' panel CSVs live in their temporary folders: named as a user names a folder of their own, through
    ``$ACGATE_DATA_DIRS`` (inherited by the notebooks and workflows the tests start)."""
    named = os.environ.get(sources.DATA_DIRS)
    os.environ[sources.DATA_DIRS] = str(tmp_path_factory.getbasetemp())
    yield
    if named is None:
        os.environ.pop(sources.DATA_DIRS)
    else:
        os.environ[sources.DATA_DIRS] = named


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


# --- hand-built runs folders


N, K = 60, 10


def make_domain(root, domain, seeds, methods, kstar_of, shared_entities=False, noise_proxy=False,
                error_sd=lambda method: 0.1 if method == "acgate" else 0.2, params_hash=None, target=0.0,
                proxies_of=None):
    """Write panels and finished runs whose k* per entity is ``kstar_of(method, seed, z, rng)`` and whose test
    predictions miss the target (``target`` after time 0) by N(0, error_sd(method)) draws, recorded as trained
    under ``params_hash`` (default: the smoke params of ``domain``); the two proxies ``proxies_of(z, rng)`` (N, 2)
    where given."""
    params_hash = params_hash or domain_params(domain).digest()
    for seed in seeds:
        rng = np.random.default_rng(100 + (0 if shared_entities else seed))
        z = rng.uniform(size=N)
        entities = np.array([f"c{i:02d}" for i in range(N)])
        proxy = rng.normal(size=N) if noise_proxy else z + rng.normal(0, 0.01, N)
        y = np.full((N, 12), target, np.float32)
        y[:, 0] = 0 if shared_entities else seed  # a new draw per seed, as a synthetic panel is (time 0 is no target)
        panel = Panel(entities=entities, times=np.arange(12), X=np.zeros((N, 12, 1), np.float32),
                      Y=y, P=np.stack([proxy, rng.normal(size=N)], 1) if proxies_of is None else proxies_of(z, rng),
                      S=np.zeros((N, 0)), feature_names=["x"], proxy_names=["z", "other"], static_names=[],
                      val_start=8, test_start=10,
                      stratifiers=pd.DataFrame({"latent_z": z, "noise": rng.normal(size=N)},
                                               index=pd.Index(entities, name="entity")))
        panel.save(root / "data" / "processed" / domain / ("" if shared_entities else f"seed{seed:02d}"))
        truth = np.clip(np.round(3 + 7 * (1 - z)), 1, K)
        for method in methods:
            kstar = kstar_of(method, seed, z, np.random.default_rng([seed, len(method)]))
            out = root / "runs" / domain / f"seed{seed:02d}" / method
            out.mkdir(parents=True)
            pd.DataFrame({"entity": entities, "kstar": kstar, "kstar_kind": "structural", "kstar_true": truth,
                          "dgp_mean_lag": truth}).to_csv(out / "lags.csv", index=False)
            times = np.arange(5, 12)  # targets after K = 5 warm-up steps (the smoke profile)
            rows = pd.DataFrame({"entity": np.repeat(entities, len(times)), "time": np.tile(times, N)})
            rows["split"] = np.where(rows.time < 8, "train", np.where(rows.time < 10, "val", "test"))
            rows["y"] = target
            rows["y_hat"] = target + np.random.default_rng([seed, len(method), 1]).normal(0, error_sd(method),
                                                                                          len(rows))
            rows.to_csv(out / "predictions.csv", index=False)
            (out / "history.csv").write_text("epoch,train_loss,recon_loss,val_loss\n")
            (out / "manifest.json").write_text("{}")
            scores = {split: metrics.forecast_metrics(*(g[c].to_numpy() for c in ("y", "y_hat", "time")))
                      for split, g in rows.groupby("split")}
            lag_summary = {"kstar_kind": "structural", "kstar_sd": float(np.std(kstar)), "omega_entropy": None,
                           "gate_sensitivity": None}
            json.dump({**scores, "lags": lag_summary, "epochs_run": 1, "seconds": 0.0, "params_hash": params_hash,
                       "panel_digest": panel.digest()}, (out / "metrics.json").open("w"))


def recovering(method, seed, z, rng):
    if method in ("uniform_lag", "no_ac_encoder"):
        return np.full(len(z), 5.5)
    return 3 + 7 * (1 - z) + rng.normal(0, 0.3, len(z))


def domain_params(domain):
    """The smoke params as domain ``domain``, with 500 permutations."""
    smoke = load_params(ROOT / "params" / "synthetic_linear.yaml", ROOT / "params" / "smoke.yaml")
    return dataclasses.replace(smoke, domain=domain, audit=dataclasses.replace(smoke.audit, permutations=500))


@pytest.fixture
def params():
    return domain_params


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
