"""How much memory a training run needs, how much the machine has, and so the block of entities a training step
computes at once (``train.block_entities``).

A run needs a fixed part (the panel's tensors; the weights, their gradients, Adam's two moments and the best epoch's
copy), the activations autograd keeps for the backward pass of the block being computed, which grow with the
entities in the block, and ``SLACK`` for the passes' temporaries and what the allocator holds beyond the live
tensors. The activations are measured, not modelled: one training-mode forward pass over a few entities adds up the
tensors autograd saves (:func:`activation_bytes`). ``make bench BENCH=--scale`` prints this estimate next to the
peak memory of every run it times: on the CPU, what training added to a process's peak was 34-77 % of it (N 1,000 to
20,000, T 40 and 60, AC-GATE, GA-Net and TFT, in blocks and in one pass), so it errs on the safe side.

    plan = MemoryPlan.measure(model, batch, setting="auto")   # the block, and what it needs
    plan.check("economics", 0, "tft", panel="88 entities × 40 times × 3 features")   # stops a run that cannot fit
"""

from __future__ import annotations

import ctypes
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from acgate.models.batch import Batch

GB = 1e9
# auto on the CPU: a panel of up to BLOCK_CAP entities is one block (the paper's panels among them); a larger one is
# computed in blocks of at most BLOCK_CAP entities whose saved activations stay under BLOCK_ACTIVATIONS. Past that a
# block's largest tensors (oneDNN's LSTM workspace) outgrow glibc's 32 MiB mmap threshold and come back as fresh,
# zeroed pages every step: at N 4,000 and T 60 an AC-GATE step took 1.42 s in blocks of 256 (175,000 page faults)
# against 1.04 s in blocks of 128 (none); a whole-panel epoch at N 16,000, T 40 took 6.2 s, in blocks 3.2 s
BLOCK_CAP = 256
BLOCK_ACTIVATIONS = 96e6
PROBE_ENTITIES = 16  # entities of the forward pass that measures the activations
SLACK = 0.25 * GB  # the passes' temporaries and the allocator's reserve, above the saved activations
HEADROOM = 0.8  # a run plans to use at most this share of the memory available when it starts


# glibc's mallopt(3) parameters (<malloc.h>) and the values keep_freed_memory sets
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 2**20  # the most glibc accepts on 64-bit systems
TRIM_THRESHOLD = 2**30


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep the memory this process frees for its next allocations (``train.keep_freed_memory``,
    the one place this is done); True where it did. By default glibc serves a large allocation with a mapping of
    its own and unmaps it when it is freed, and hands the free top of its heap back to the system: a training step's
    MB-sized activations then come back every step as fresh pages that the kernel must zero, thousands of page
    faults a step. With allocations up to ``MMAP_THRESHOLD`` taken from the heap and the heap trimmed only past
    ``TRIM_THRESHOLD`` of free memory, the process keeps its peak memory until it ends and reuses it. Where the
    numbers come from changes none of them; what it saves is in docs/speed.md. Not Linux with glibc (macOS, musl):
    False, nothing changed."""
    if not sys.platform.startswith("linux"):
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


class MemoryShortage(RuntimeError):
    """A run cannot fit in the memory available; the message names what it needs, what there is and the fix."""


def activation_bytes(model: torch.nn.Module, batch: Batch) -> float:
    """Bytes per entity that autograd keeps for the backward pass of one training-mode forward pass: measured on the
    first ``PROBE_ENTITIES`` entities of ``batch``. The weights and the batch's own tensors are left out (the fixed
    part counts them); the random generators are restored afterwards, so the measurement changes no run."""
    part = batch.blocks(PROBE_ENTITIES)[0]
    shared = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), *_tensors(batch)]}
    kept: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in shared:
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    device = part.y.device
    cuda = [device.index or 0] if device.type == "cuda" else []
    was_training = model.training
    with torch.random.fork_rng(devices=cuda), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.train()
        model(*part.inputs())
    model.train(was_training)
    return sum(kept.values()) / part.n_entities


def _tensors(batch: Batch) -> list[torch.Tensor]:
    return [batch.lags, batch.y, batch.proxies, batch.static, batch.entity_index, *batch.masks.values()]


def fixed_bytes(model: torch.nn.Module, batch: Batch) -> float:
    """The panel's tensors, five copies of the weights (themselves, their gradients, Adam's two moments and the best
    epoch's copy) and ``SLACK``."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return sum(t.numel() * t.element_size() for t in _tensors(batch)) + 5 * weights + SLACK


def available_bytes(device: torch.device, proc: Path = Path("/proc"), cgroup: Path = Path("/sys/fs/cgroup")
                    ) -> float | None:
    """Memory a new allocation can take now: the GPU's free memory; on the CPU, the system's available memory and
    what the control group (a container's or a SLURM job's limit) leaves, whichever is less (its page cache counts
    as free: the kernel gives it back on demand). None when unknown."""
    if device.type == "cuda":  # free, and what PyTorch holds cached but unused
        return float(torch.cuda.mem_get_info(device)[0] + torch.cuda.memory_reserved(device)
                     - torch.cuda.memory_allocated(device))
    found = []
    meminfo = _read(proc / "meminfo")
    if meminfo and (match := re.search(r"^MemAvailable:\s+(\d+) kB", meminfo, re.MULTILINE)):
        found.append(int(match.group(1)) * 1024)
    for limit, usage, stat in (("memory.max", "memory.current", "memory.stat"),  # cgroup v2, then v1
                               ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat")):
        cap, used = _read(cgroup / limit), _read(cgroup / usage)
        if cap and used and cap.strip().isdigit() and int(cap) < 2**60:  # v2 says "max", v1 a huge number: no limit
            cache = re.search(r"^(?:total_)?inactive_file (\d+)", _read(cgroup / stat) or "", re.MULTILINE)
            found.append(int(cap) - int(used) + (int(cache.group(1)) if cache else 0))
            break
    return float(min(found)) if found else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


@dataclass(frozen=True)
class MemoryPlan:
    """The block a run computes at once, and the memory it needs for it (bytes)."""

    entities: int
    block: int
    fixed: float
    per_entity: float  # the activations a block keeps for its backward pass, per entity
    available: float | None
    setting: int | str  # train.block_entities

    @classmethod
    def measure(cls, model: torch.nn.Module, batch: Batch, setting: int | str) -> MemoryPlan:
        """The plan of training ``model`` on ``batch`` under ``train.block_entities = setting``: a number is taken as
        it is; auto takes the whole panel (on the CPU, a panel of more than ``BLOCK_CAP`` entities in blocks of at
        most ``BLOCK_CAP`` that keep under ``BLOCK_ACTIVATIONS``), and less where memory asks for it."""
        device = batch.y.device
        plan = cls(entities=batch.n_entities, block=batch.n_entities, fixed=fixed_bytes(model, batch),
                   per_entity=max(1.0, activation_bytes(model, batch)), available=available_bytes(device),
                   setting=setting)
        if setting != "auto":
            return plan._with_block(int(setting))
        fits = plan.largest_block()
        cap = batch.n_entities
        if device.type == "cpu" and cap > BLOCK_CAP:
            cap = max(1, min(BLOCK_CAP, int(BLOCK_ACTIVATIONS // plan.per_entity)))
        return plan._with_block(min(cap, fits if fits is not None else cap))

    def _with_block(self, block: int) -> MemoryPlan:
        return MemoryPlan(self.entities, max(1, min(block, self.entities)), self.fixed, self.per_entity,
                          self.available, self.setting)

    @property
    def blocks(self) -> int:
        return math.ceil(self.entities / self.block)

    def needed(self, block: int | None = None) -> float:
        """Bytes a training step needs with ``block`` entities at once (default: the plan's block)."""
        return self.fixed + self.per_entity * (self.block if block is None else block)

    def largest_block(self) -> int | None:
        """The most entities a block can hold within ``HEADROOM`` of the available memory (0: not even one); None
        when the available memory is unknown."""
        if self.available is None:
            return None
        return max(0, int((HEADROOM * self.available - self.fixed) // self.per_entity))

    def check(self, domain: str, seed: int, method: str, panel: str) -> None:
        """Raise :class:`MemoryShortage` when the block does not fit, naming the run, the panel (``panel``: its size
        in words), the gigabytes needed and available, and the setting to change."""
        run = f"[{domain} seed {seed} {method}]"
        largest = self.largest_block()
        if largest is None or largest >= self.block:
            return
        have = f"{self.available / GB:.2f} GB is available ({HEADROOM:.0%} of it is planned for)"
        if largest == 0:
            raise MemoryShortage(
                f"{run} cannot train on a panel of {panel}: even one entity a block needs {self.needed(1) / GB:.2f} GB "
                f"(the panel's tensors, the model's weights, gradients and optimiser state, and a working reserve "
                f"take {self.fixed / GB:.2f} GB) and {have}. Train on fewer entities or times, with a smaller "
                "model.hidden, on a machine with more memory, or leave the method out of this domain (make paper "
                f"CONFIG=\"'leave_out={{{domain}: [{method}]}}'\")")
        raise MemoryShortage(
            f"{run} needs {self.needed() / GB:.2f} GB to train on a panel of {panel} in blocks of {self.block:,} "
            f"entities ({self.fixed / GB:.2f} GB fixed, {self.per_entity * 1000 / GB:.2f} GB per 1,000 entities of a "
            f"block) and {have}: set train.block_entities to {largest:,} or less, or to auto (the largest block "
            "that fits)")

    def describe(self) -> str:
        return (f"{self.blocks} block(s) of up to {self.block:,} entities, about {self.needed() / GB:.2f} GB"
                + (f" of {self.available / GB:.1f} GB available" if self.available is not None else ""))
