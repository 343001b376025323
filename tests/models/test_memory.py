"""Tests of acgate.models.memory: the memory a run plans for, the block it takes, and the stop before a run that
cannot fit."""

import dataclasses
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from acgate.data.panel import Normalisers
from acgate.models import memory, train
from acgate.models.networks import build
from tests.models.conftest import quiet

GB = 1e9


def _with_block(params, block):
    return dataclasses.replace(params, train=dataclasses.replace(params.train, block_entities=block))


def _model_and_batch(params, panel, method="acgate"):
    batch = train.Batch.build(panel, Normalisers.fit(panel), params.model.max_lag, torch.device("cpu"))
    return build(params.model, method, panel.n_entities, panel.X.shape[2], panel.P.shape[1], panel.S.shape[1]), batch


def _plan(params, panel, method="acgate"):
    return memory.MemoryPlan.measure(*_model_and_batch(params, panel, method), params.train.block_entities)


def test_the_activations_are_those_autograd_keeps_per_entity(smoke_params, panel):
    """The probe's count per entity, times 40 entities, is what one pass over the 40 keeps (within the rounding of
    a few per-block tensors), and TFT (attention over the steps) keeps more than AC-GATE."""
    for method in ("acgate", "tft"):
        model, batch = _model_and_batch(smoke_params, panel, method)
        shared = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(),
                                                           *memory._tensors(batch)]}
        kept: dict[int, int] = {}

        def pack(t, kept=kept):
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model.train()(*batch.inputs())
        whole = sum(size for pointer, size in kept.items() if pointer not in shared)
        assert memory.activation_bytes(model, batch) * panel.n_entities == pytest.approx(whole, rel=0.1)
    assert _plan(smoke_params, panel, "tft").per_entity > _plan(smoke_params, panel, "acgate").per_entity


def test_measuring_changes_no_random_draw(smoke_params, panel):
    model, batch = _model_and_batch(smoke_params, panel)
    torch.manual_seed(0)
    memory.activation_bytes(model, batch)  # a training-mode pass, whose dropout draws come from a forked generator
    after = torch.rand(3)
    torch.manual_seed(0)
    torch.testing.assert_close(after, torch.rand(3))


def test_auto_takes_the_whole_panel_up_to_the_cap_and_less_when_memory_is_short(smoke_params, panel, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1e12)
    plan = _plan(smoke_params, panel)
    assert (plan.block, plan.blocks) == (panel.n_entities, 1)
    monkeypatch.setattr(memory, "BLOCK_CAP", 16)  # a panel past the cap: blocks of the cap ...
    assert _plan(smoke_params, panel).block == 16
    monkeypatch.setattr(memory, "BLOCK_ACTIVATIONS", 12.5 * plan.per_entity)  # ... or fewer, by their activations
    assert _plan(smoke_params, panel).block == 12
    monkeypatch.setattr(memory, "BLOCK_CAP", 40)  # a panel within the cap is one block whatever its activations
    assert _plan(smoke_params, panel).block == 40
    # room for 10 entities' activations beside the fixed part, within the headroom
    monkeypatch.setattr(memory, "available_bytes",
                        lambda device: (plan.fixed + 10.5 * plan.per_entity) / memory.HEADROOM)
    short = _plan(smoke_params, panel)
    assert (short.block, short.blocks) == (10, 4)
    result = train.fit(panel, smoke_params, "acgate", 0, quiet)
    assert (result.memory.block, result.memory.blocks) == (10, 4)


def test_a_block_too_big_stops_before_training_naming_the_need_and_the_setting(smoke_params, panel, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1e12)
    plan = _plan(smoke_params, panel, "tft")
    monkeypatch.setattr(memory, "available_bytes",
                        lambda device: (plan.fixed + 12.5 * plan.per_entity) / memory.HEADROOM)
    monkeypatch.setattr(train, "_train_step", lambda *a: pytest.fail("training started"))
    need = plan.needed(panel.n_entities) / GB
    with pytest.raises(memory.MemoryShortage, match=re.escape(
            f"[synthetic_linear seed 2 tft] needs {need:.2f} GB to train on a panel of 40 entities × 20 times × 1 "
            "feature in blocks of 40 entities (") + r".*" + re.escape(
            "is available (80% of it is planned for): set train.block_entities to 12 or less, or to auto (the "
            "largest block that fits)")):
        train.fit(panel, _with_block(smoke_params, 40), "tft", 2, quiet)


def test_a_panel_too_big_for_even_one_entity_a_block_names_the_leave_out_setting(smoke_params, panel, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1e8)  # under the fixed part's working reserve
    monkeypatch.setattr(train, "_train_step", lambda *a: pytest.fail("training started"))
    with pytest.raises(memory.MemoryShortage, match=r"^\[synthetic_linear seed 0 acgate\] cannot train on a panel of "
                                                    r"40 entities × 20 times × 1 feature: even one entity a block "
                                                    r"needs 0\.2\d GB .* and 0\.10 GB is available .*leave the method "
                                                    r"out of this domain \(make paper CONFIG=\"'leave_out="
                                                    r"\{synthetic_linear: \[acgate\]\}'\"\)$"):
        train.fit(panel, smoke_params, "acgate", 0, quiet)


def test_available_memory_is_the_least_of_the_system_and_the_control_group(tmp_path):
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    proc.mkdir()
    cgroup.mkdir()
    (proc / "meminfo").write_text("MemTotal:       24000000 kB\nMemAvailable:    2000000 kB\n")
    cpu = torch.device("cpu")
    assert memory.available_bytes(cpu, proc, cgroup) == 2_048_000_000  # no control group files: the system's
    (cgroup / "memory.max").write_text("max\n")
    (cgroup / "memory.current").write_text("500000000\n")
    assert memory.available_bytes(cpu, proc, cgroup) == 2_048_000_000  # a group without a limit
    (cgroup / "memory.max").write_text("1000000000\n")
    (cgroup / "memory.stat").write_text("anon 300000000\ninactive_file 100000000\n")
    assert memory.available_bytes(cpu, proc, cgroup) == 600_000_000  # limit - usage + reclaimable page cache
    assert memory.available_bytes(cpu, tmp_path / "none", tmp_path / "none") is None


FIT_IN_A_FRESH_PROCESS = """
import dataclasses, json, resource, sys
from acgate.config import load_params
from acgate.data.dgp import simulate
from acgate.models import train
params = load_params("params/synthetic_linear.yaml")
params = dataclasses.replace(params, train=dataclasses.replace(
    params.train, max_epochs=10, device="cpu", keep_freed_memory=sys.argv[1] == "keep"))
panel = simulate(params.synthetic, 0, params.split.val_start, params.split.test_start)
train.fit(panel, params, "tft", 0, log=lambda line: None)  # the process's first allocations
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
result = train.fit(panel, params, "tft", 1, log=lambda line: None)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
print(json.dumps({"faults_per_epoch": faults / result.epochs_run, "history": result.history.values.tolist(),
                  "y_hat": result.output.y_hat.tolist()}))
"""


@pytest.mark.slow
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt is not available (not Linux with glibc)")
def test_keeping_freed_memory_changes_no_number_and_stops_the_page_faults():
    """TFT on the paper's synthetic panel, trained in two fresh processes, with train.keep_freed_memory and without
    (glibc's own settings): the losses of every epoch and the predictions are the same to the bit. Without it, every
    step maps its MB-sized activations afresh (thousands of page faults an epoch); with it, a fifth of those at most.
    Where the kernel backs those mappings with huge pages, the faults are few either way, and only the numbers are
    compared."""
    root = Path(__file__).resolve().parents[2]
    runs = {}
    for setting in ("keep", "glibc"):
        done = subprocess.run([sys.executable, "-c", FIT_IN_A_FRESH_PROCESS, setting], cwd=root, capture_output=True,
                              text=True, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, done.stderr[-2000:]
        runs[setting] = json.loads(done.stdout.strip().splitlines()[-1])
    assert runs["keep"]["history"] == runs["glibc"]["history"]
    assert runs["keep"]["y_hat"] == runs["glibc"]["y_hat"]
    faults = {setting: run["faults_per_epoch"] for setting, run in runs.items()}
    if faults["glibc"] > 1000:
        assert faults["keep"] < faults["glibc"] / 5, faults
