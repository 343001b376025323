"""Speed and memory benchmark (``make bench``): prints its figures and writes them to ``runs/bench/``.

    python -m acgate.tools.bench                                  # every method of synthetic_linear (and economics)
    python -m acgate.tools.bench --repeats 5 --domains synthetic_linear --methods acgate tft

Measures, on this machine:

- **one training run per method and domain** (``runner.run_method``, artifacts included; the classical yardstick's
  closed-form fits, tuning included, too) on one CPU thread, each in a fresh process: median wall seconds over
  ``--repeats`` runs, epochs run, seconds per epoch (training loop only), peak resident memory of the process;
- **achieved GFLOP/s of AC-GATE training** (floating-point operations of one epoch, counted by PyTorch's
  ``FlopCounterMode`` on the matrix products, divided by the measured seconds per epoch) against this machine's
  single-thread float32 matrix-multiply peak, measured in the same run;
- **the Papermill overhead** of one notebook run: what ``03_train`` for AC-GATE costs besides its training
  through ``acgate.notebook run``, against the same ``run_method`` call in a fresh process (run in alternation,
  median of the paired differences), split into what Papermill and the kernel cost and what the notebook's own
  extra cells (imports, plots, tables) cost;
- **seeds at once**: AC-GATE runs of ``--at-once`` seeds started together, one single-thread process each,
  against the same runs one after another (runs per minute; on CUDA, how far one GPU is filled by many seeds);
- **one audit-calibration replicate** (``calibration.run_replicate``: the ``linear`` scenario's 40 fits, 20 of them
  neural, and its audit, ``params/audit_calibration.yaml``) in a fresh single-thread process per device: the median
  over ``--repeats`` after an untimed warm-up;
- **one panel-matched replicate** (``panel_matched.run_replicate``: a surrogate of the example panel,
  ``params/example_panel.yaml``, generated and prepared under ``runs/bench/data``, 5 seeds) on CPU in a fresh
  single-thread process, with the classical family alone and with the AC-GATE family too, after an untimed warm-up;
  and what the default study of an own panel (``notebooks/07_panel_matched.py``) costs by that count;
- **the full-suite wall time** of the last ``make paper`` (from ``tables/run_manifest.json``);
- the same run timings on CUDA when a GPU is present, with its model and peak GPU memory.

``--stacked K ...`` measures instead, on every device, each method's seeds trained as one stacked model
(:mod:`acgate.models.stacked`) against the same seeds trained alone one after another: seconds per seed of each
(the lone runs timed on at most ``LONE_SEEDS`` seeds, after an untimed warm-up of both), the speed-up, and the
largest difference in any seed's validation losses and k* (dropout off in both, so that they can agree; GA-Net's gate
noise still differs).

``make bench BENCH=--scale`` times panels of many entities instead (:mod:`acgate.tools.scale`, which uses this
module's timers).

Timings are medians; the spread (min..max) is printed beside each. Run it on an otherwise idle machine. Synthetic
panels are drawn into ``runs/bench/data`` (:func:`data_root`), never over the grid's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from acgate.config import CLOSED_FORM_METHODS, METHODS, Params, load_params
from acgate.layout import panel_dir, project_root
from acgate.notebook.execution import SINGLE_THREAD
from acgate.runs import git_sha, machine, package_versions, write_json


def matmul_peak(threads: int = 1, sizes: tuple[int, ...] = (512, 1024, 2048), repeats: int = 5) -> dict:
    """Single-thread float32 matrix-multiply throughput (GFLOP/s): the best size's median of ``repeats``."""
    torch.set_num_threads(threads)
    best = {}
    for n in sizes:
        a, b = torch.rand(n, n), torch.rand(n, n)
        torch.mm(a, b)  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - start)
        best[n] = 2 * n**3 / statistics.median(times) / 1e9
    size = max(best, key=best.get)
    return {"gflops": best[size], "size": size, "by_size": {str(k): round(v, 1) for k, v in best.items()}}


def lstm_flops(input_size: int, hidden: int, layers: int, batch: int, steps: int) -> float:
    """Multiply-add FLOPs of one forward pass of a stacked LSTM: per layer and step, the four gates' products
    with the input and the previous hidden state (2 * 4H * (I + H) per sample); the pointwise gate arithmetic
    is left out (under 1 % at these sizes)."""
    sizes = [input_size] + [hidden] * (layers - 1)
    return float(sum(2 * batch * steps * 4 * hidden * (i + hidden) for i in sizes))


class LSTMFlops(TorchFunctionMode):
    """Counts the products of every ``torch.lstm`` call made inside it (an nn.LSTM's forward makes one), from the
    shapes it is called with: the fused LSTM kernel is invisible to PyTorch's FlopCounterMode. A call with gradients
    counts three passes (forward, and the input and weight gradients)."""

    def __init__(self):
        super().__init__()
        self.flops = 0.0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") == "lstm" and args and isinstance(args[0], torch.Tensor):
            x, weights = args[0], args[2]
            hidden, layers = weights[1].shape[1], len(weights) // 4
            passes = 3 if torch.is_grad_enabled() else 1
            self.flops += passes * lstm_flops(x.shape[-1], hidden, layers, x.shape[0], x.shape[1])
        return func(*args, **kwargs)


def epoch_flops(params: Params, seed: int = 0, method: str = "acgate") -> float:
    """Floating-point operations of one training epoch of ``method`` as ``train.fit`` runs it: the training
    forward and backward pass (through the last training target) and the validation forward pass (through the last
    validation step). Matrix products outside the LSTM are counted by PyTorch's FlopCounterMode, the LSTM's by
    :class:`LSTMFlops`."""
    from torch.utils.flop_counter import FlopCounterMode

    from acgate.data.panel import Normalisers
    from acgate.data.prep import panel_for_training
    from acgate.models.batch import Batch
    from acgate.models.networks import build
    from acgate.models.train import masked_mse, recon_loss

    panel = panel_for_training(params, seed, data_root(params))
    cfg = params.model
    batch = Batch.build(panel, Normalisers.fit(panel), cfg.max_lag, torch.device("cpu"))
    model = build(cfg, method, panel.n_entities, panel.X.shape[2], panel.P.shape[1], panel.S.shape[1])
    with FlopCounterMode(display=False) as counter, LSTMFlops() as lstm:
        train_batch = batch.through("train")
        out = model(*train_batch.inputs())
        task = masked_mse(out.y_hat, train_batch.y, train_batch.masks["train"])
        recon = recon_loss(out.p_hat, batch.proxies, cfg.recon_anchor_weight) if out.p_hat is not None else 0
        (task + model.recon_weight * recon).backward()
        model.eval()
        with torch.no_grad():
            model(*batch.through("val").inputs())
    return float(counter.get_total_flops()) + lstm.flops


LONE_SEEDS = 5  # --stacked: the lone runs are timed on at most this many seeds


def stacked_against_lone(domain: str, method: str, device: str, seeds: int, profile: str) -> dict:
    """Seeds 0..``seeds``-1 of ``method`` trained as one stacked model and alone (see the module's ``--stacked``),
    in this process, dropout off."""
    from acgate.data.prep import panel_for_training
    from acgate.models import runner, stacked, train

    params = _params(domain, profile)
    params = replace(params, model=replace(params.model, dropout=0.0), train=replace(params.train, device=device))
    panels = [panel_for_training(params, seed, data_root(params)) for seed in range(seeds)]
    alone = min(seeds, LONE_SEEDS)
    train.fit(panels[0], params, method, 0, log=lambda line: None)  # warm-up: first-call costs
    stacked.fit_stacked(panels[:2], params, method, [0, 1], log=lambda line: None)

    def timed(work):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        result = work()
        if device == "cuda":
            torch.cuda.synchronize()
        return result, time.perf_counter() - start

    lone, lone_seconds = timed(lambda: [train.fit(panels[s], params, method, s, log=lambda line: None)
                                        for s in range(alone)])
    together, stacked_seconds = timed(lambda: stacked.fit_stacked(panels, params, method, list(range(seeds)),
                                                                  log=lambda line: None))
    if together is None:
        return {"domain": domain, "method": method, "device": device, "seeds": seeds, "stacked": False}
    loss_diff = kstar_diff = 0.0
    for s, result in enumerate(lone):
        epochs = min(result.epochs_run, together[s].epochs_run)
        loss_diff = max(loss_diff, float(abs(result.history.val_loss[:epochs] - together[s].history.val_loss[:epochs])
                                         .max()))
        kstar_diff = max(kstar_diff, float(np.nanmax(abs(runner.lag_table(result, panels[s]).kstar.to_numpy()
                                                         - runner.lag_table(together[s], panels[s]).kstar.to_numpy()))))
    return {"domain": domain, "method": method, "device": device, "seeds": seeds, "stacked": True,
            "lone_seconds_per_seed": lone_seconds / alone, "lone_seeds_timed": alone,
            "stacked_seconds_per_seed": stacked_seconds / seeds, "speed_up": lone_seconds / alone / (stacked_seconds
                                                                                                     / seeds),
            "epochs_lone": [r.epochs_run for r in lone], "epochs_stacked": [r.epochs_run for r in together[:alone]],
            "largest_val_loss_difference": loss_diff, "largest_kstar_difference": kstar_diff}


def _params(domain: str, profile: str) -> Params:
    root = project_root()
    return load_params(root / "params" / f"{domain}.yaml", root / profile if profile else None)


def data_root(params: Params) -> Path:
    """Where the benchmark reads the panel of ``params.domain``: a real domain's prepared panel from the project's
    ``data/`` (01_data_prep's, read only), a synthetic draw from ``runs/bench/data`` (drawn there on first use).
    Never the project's ``data/processed/<synthetic domain>/``: the paper's runs record the digest of the panel
    they were trained on, and a draw under another profile written there would make them stale."""
    return project_root() / ("runs/bench/data" if params.synthetic is not None else "data")


def timed_runs(domain: str, method: str, seed: int, device: str, profile: str, repeats: int) -> dict:
    """In this process: one untimed warm-up run (its wall time is kept as ``cold_seconds``: first-call costs such
    as lazy imports and kernel initialisation), then ``repeats`` timed runs of ``run_method`` (artifacts into a
    temporary folder); the medians and ranges (page faults: minor faults per epoch, memory the process had to map
    again), and the process's peak resident memory."""
    from acgate.data.prep import panel_for_training
    from acgate.models.runner import run_method

    params = _params(domain, profile)
    params = replace(params, train=replace(params.train, device=device))
    panel = panel_for_training(params, seed, data_root(params))
    runs = []
    for _ in range(repeats + 1):
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        with tempfile.TemporaryDirectory() as folder:
            faults, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
            metrics = run_method(panel, params, method, seed, Path(folder), log=lambda line: None)
            if device == "cuda":
                torch.cuda.synchronize()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
            runs.append({"wall_seconds": time.perf_counter() - start, "fit_seconds": metrics["seconds"],
                         "page_faults": faults / metrics["epochs_run"] if metrics.get("epochs_run") else None,
                         "epochs_run": metrics["epochs_run"], "seconds_per_epoch": metrics.get("seconds_per_epoch"),
                         "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None})
    out = {"cold_seconds": runs[0]["wall_seconds"], "repeats": repeats,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    for key in ("wall_seconds", "fit_seconds", "seconds_per_epoch", "page_faults", "peak_gpu_mb"):
        values = [r[key] for r in runs[1:] if r[key] is not None]
        if values:
            out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    out["epochs_run"] = runs[-1]["epochs_run"]
    return out


def _launch(domain: str, method: str, seed: int, device: str, profile: str, repeats: int) -> subprocess.Popen:
    """:func:`timed_runs` started in a fresh Python process on one thread."""
    return _fresh_process("--one", domain, method, str(seed), device, profile or "-", str(repeats))


def _fresh_process(*arguments: str) -> subprocess.Popen:
    """``python -m acgate.tools.bench ARGUMENTS`` started on one thread; its JSON result comes from :func:`_result`."""
    return subprocess.Popen([sys.executable, "-m", "acgate.tools.bench", *arguments], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **SINGLE_THREAD})


def _result(process: subprocess.Popen) -> dict:
    out, err = process.communicate()
    if process.returncode != 0:
        command = process.args if isinstance(process.args, list) else [process.args]
        raise RuntimeError(f"benchmark process {' '.join(map(str, command[2:]))} failed:\n{err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def _in_fresh_process(domain: str, method: str, seed: int, device: str, profile: str, repeats: int) -> dict:
    """:func:`timed_runs` in a fresh Python process on one thread; adds the process's own wall seconds."""
    start = time.perf_counter()
    result = _result(_launch(domain, method, seed, device, profile, repeats))
    return result | {"process_seconds": time.perf_counter() - start}


def seeds_at_once(domain: str, seed: int, device: str, profile: str, processes: int) -> dict:
    """Throughput of AC-GATE training with ``processes`` seeds at once (seeds ``seed`` ..., one fresh single-thread
    process each, all started together) against the same runs one after another; process start-up included."""
    seeds = list(range(seed, seed + processes))
    start = time.perf_counter()
    for s in seeds:
        _result(_launch(domain, "acgate", s, device, profile, 0))
    alone = time.perf_counter() - start
    start = time.perf_counter()
    for process in [_launch(domain, "acgate", s, device, profile, 0) for s in seeds]:
        _result(process)
    together = time.perf_counter() - start
    return {"domain": domain, "device": device, "processes": processes, "seeds": seeds,
            "one_after_another_seconds": alone, "at_once_seconds": together,
            "runs_per_minute_one_after_another": 60 * processes / alone,
            "runs_per_minute_at_once": 60 * processes / together}


def calibration_replicate(device: str, repeats: int, scenario: str = "linear") -> dict:
    """In this process: one untimed warm-up replicate of the audit calibration (scenario ``scenario``, replicate 0,
    on ``device``), then ``repeats`` timed ones of the same replicate; the median and range of their seconds."""
    from acgate.audit.calibration import run_replicate

    params = load_params(project_root() / "params" / "audit_calibration.yaml")
    params = replace(params, train=replace(params.train, device=device))
    seconds = []
    for _ in range(repeats + 1):
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            run_replicate(scenario, 0, params, Path(folder))
            if device == "cuda":
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
    timed = seconds[1:]
    return {"scenario": scenario, "device": device, "fits": len(params.methods) * params.n_seeds,
            "cold_seconds": seconds[0], "repeats": repeats,
            "seconds": {"median": statistics.median(timed), "min": min(timed), "max": max(timed)}}


MATCHED_SCENARIO = "proxy_lags_one"  # the panel-matched replicate the benchmark times


def panel_matched_replicate(repeats: int) -> dict:
    """In this process: the example panel generated and prepared under ``runs/bench/data``, one untimed warm-up
    replicate of its panel-matched study, then ``repeats`` timed replicates with the classical family alone and
    ``repeats`` with the AC-GATE family too; the median and range of their seconds."""
    from acgate.audit import panel_matched, surrogates
    from acgate.data import prep, sources
    from acgate.data.example import write_example

    root = project_root()
    params = load_params(root / "params" / "example_panel.yaml")
    csv = write_example(root / "runs" / "bench" / "data" / "raw" / "example_panel.csv")
    os.environ[sources.DATA_DIRS] = str(csv.parent)  # the bench names the folder of its own panel
    params = replace(params, data=replace(params.data, csv_file=str(csv)))
    long, csv_source = prep.load_long(params, root)
    panel = prep.prepare(long, params, csv_source).panel
    source = surrogates.fit_source(panel, params)
    seeds, timings = 5, {}
    for kind, neural in (("classical", 0), ("with_acgate", 1)):
        seconds = []
        for _ in range(repeats + (kind == "classical")):  # the first, a warm-up, is dropped below
            with tempfile.TemporaryDirectory() as folder:
                start = time.perf_counter()
                panel_matched.run_replicate(MATCHED_SCENARIO, 0, source, params, Path(folder), seeds, neural)
                seconds.append(time.perf_counter() - start)
        timed = seconds[1:] if kind == "classical" else seconds
        timings[kind] = {"median": statistics.median(timed), "min": min(timed), "max": max(timed)}
    return {"panel": params.domain, "entities": panel.n_entities, "steps": len(panel.times), "seeds": seeds,
            "scenario": MATCHED_SCENARIO, "repeats": repeats, "seconds": timings}


def papermill_overhead(domain: str, seed: int, repeats: int, profile: str = "") -> dict:
    """The fixed cost of running 03_train (AC-GATE only) through ``python -m acgate.notebook run`` against calling
    ``run_method`` in a fresh process. Each path's own training time (the notebook's training cell, the direct
    call) is taken off its wall time, so the run-to-run spread of training does not swamp the difference; the two
    paths run in alternation, so a drift in the machine's speed falls on both, and the overhead is the median of
    the paired differences."""
    root, data = project_root(), data_root(_params(domain, profile))
    notebook_fixed, direct_fixed, outside_cells, extra_cells = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            output = Path(tmp) / "03_train.ipynb"
            start = time.perf_counter()  # as a workflow job runs it: a fresh process, interpreter start included
            done = subprocess.run([sys.executable, "-m", "acgate.notebook", "run",
                                   str(root / "notebooks" / "03_train.py"), str(output), f"domain={domain}",
                                   f"seed={seed}", "methods=[acgate]", f"runs_dir={tmp}", f"data_dir={data}",
                                   f"profile_file={profile}"],
                                  capture_output=True, text=True)
            wall = time.perf_counter() - start
            if done.returncode != 0:
                raise RuntimeError(f"03_train as a notebook failed:\n{done.stderr[-2000:]}")
            cells = nbformat.read(output, as_version=4).cells
            seconds = sum(c.metadata.get("papermill", {}).get("duration") or 0.0 for c in cells)
            training = next(c for c in cells if "run_method(" in c.source).metadata["papermill"]["duration"]
            notebook_fixed.append(wall - training)
            outside_cells.append(wall - seconds)
            extra_cells.append(seconds - training)
            direct = _in_fresh_process(domain, "acgate", seed, "cpu", profile, 0)
            direct_fixed.append(direct["process_seconds"] - direct["cold_seconds"])
    med = statistics.median
    differences = [n - d for n, d in zip(notebook_fixed, direct_fixed, strict=True)]
    return {"notebook_fixed_seconds": med(notebook_fixed), "direct_fixed_seconds": med(direct_fixed),
            "overhead_seconds": med(differences), "overhead_range": [min(differences), max(differences)],
            "papermill_and_kernel_seconds": med(outside_cells), "notebook_cells_seconds": med(extra_cells)}


def last_suite() -> dict | None:
    """The runs behind the committed tables (``tables/run_manifest.json``): how many, and the span from the first
    to the last run's creation, which is the full suite's wall time when one invocation made them all (the
    manifest's ``workflow`` entry says whether the last invocation did, or only redid the report); and the wall
    time of the last whole ``make paper`` per device and machine (``tables/suite_times.json``)."""
    tables = project_root() / "tables"
    path, times = tables / "run_manifest.json", tables / "suite_times.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    return {"runs": sum(d["runs"] for d in record["domains"].values()), "runs_made": record.get("runs_made"),
            "runs_git_sha": record["runs_git_sha"], "last_invocation": record["workflow"],
            "machine": record["machine"], "per_device": json.loads(times.read_text()) if times.is_file() else {}}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m acgate.tools.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", nargs="+", default=["synthetic_linear", "economics"],
                        help="params/<domain>.yaml to time (a real domain without its processed panel is skipped)")
    parser.add_argument("--methods", nargs="+", default=None, choices=METHODS,
                        help="methods (default: each domain's list; a method a domain does not run is left out there)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per (domain, method); the median is reported")
    parser.add_argument("--seed", type=int, default=0, help="training seed of every timed run")
    parser.add_argument("--profile", default="", help="overlay for every domain, e.g. params/smoke.yaml (a quick try)")
    parser.add_argument("--at-once", type=int, default=os.cpu_count() or 1,
                        help="seeds trained at once for the throughput figure, one process each (default: CPU cores)")
    parser.add_argument("--stacked", nargs="+", type=int, default=None, metavar="K",
                        help="measure only stacked training against lone runs, for K seeds each (e.g. 5 20 100)")
    parser.add_argument("--devices", nargs="+", default=None, choices=["cpu", "cuda"],
                        help="devices to time on (default: the CPU, and CUDA when present)")
    parser.add_argument("--out", default="runs/bench", help="folder for the JSON record, relative to the project root")
    parser.add_argument("--one", nargs=6, metavar=("DOMAIN", "METHOD", "SEED", "DEVICE", "PROFILE", "REPEATS"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--one-replicate", nargs=2, metavar=("DEVICE", "REPEATS"), help=argparse.SUPPRESS)
    parser.add_argument("--one-matched", metavar="REPEATS", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    if args.one:  # a single timed run in this (fresh) process, as JSON on stdout
        domain, method, seed, device, profile, repeats = args.one
        print(json.dumps(timed_runs(domain, method, int(seed), device, "" if profile == "-" else profile,
                                    int(repeats))))
        return
    if args.one_replicate:  # a calibration replicate timed in this (fresh) process, as JSON on stdout
        print(json.dumps(calibration_replicate(args.one_replicate[0], int(args.one_replicate[1]))))
        return
    if args.one_matched:  # panel-matched replicates timed in this (fresh) process, as JSON on stdout
        print(json.dumps(panel_matched_replicate(int(args.one_matched))))
        return
    devices = args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if args.stacked:
        _stacked(args, devices)
        return
    record = {"created_utc": datetime.now(UTC).isoformat(timespec="seconds"), "git_sha": git_sha(),
              "machine": machine(), "packages": package_versions(), "repeats": args.repeats, "seed": args.seed,
              "gpu": torch.cuda.get_device_name(0) if "cuda" in devices else None, "profile": args.profile,
              "runs": [], "matmul_peak": matmul_peak()}
    peak = record["matmul_peak"]
    print(f"single-thread float32 matmul peak: {peak['gflops']:.1f} GFLOP/s (n = {peak['size']}; "
          f"by size {peak['by_size']})", flush=True)
    for domain in args.domains:
        _time_domain(domain, args, devices, record)
    record["at_once"] = [_at_once(args, device) for device in devices]
    record["papermill"] = _papermill(args)
    record["calibration"] = [_calibration(args, device) for device in devices]
    record["panel_matched"] = _panel_matched(args)
    record["last_suite"] = _last_suite()
    out = project_root() / args.out
    stamp = record["created_utc"].replace(":", "").replace("-", "")
    write_json(out / f"bench-{stamp}.json", record)
    write_json(out / "latest.json", record)
    print(f"written: {out / 'latest.json'}")


def _stacked(args: argparse.Namespace, devices: list[str]) -> None:
    """The ``--stacked`` measurement of every (domain, method, device, K), in this process, into
    ``<out>/stacked-latest.json``."""
    record = {"created_utc": datetime.now(UTC).isoformat(timespec="seconds"), "git_sha": git_sha(),
              "machine": machine(), "packages": package_versions(), "profile": args.profile,
              "gpu": torch.cuda.get_device_name(0) if "cuda" in devices else None, "comparisons": []}
    torch.set_num_threads(1)
    for domain in args.domains:
        params = _params(domain, args.profile)
        for method in [m for m in args.methods or params.methods if m not in CLOSED_FORM_METHODS]:
            for device in devices:
                for seeds in args.stacked:
                    found = stacked_against_lone(domain, method, device, seeds, args.profile)
                    record["comparisons"].append(found)
                    print(f"{domain:18s} {method:12s} {device} K {seeds:3d}: " + (
                        f"alone {found['lone_seconds_per_seed']:.2f} s a seed, stacked "
                        f"{found['stacked_seconds_per_seed']:.2f} s a seed: x{found['speed_up']:.1f}; largest "
                        f"difference: validation loss {found['largest_val_loss_difference']:.1e}, k* "
                        f"{found['largest_kstar_difference']:.1e}" if found["stacked"] else "not stackable"),
                        flush=True)
    write_json(project_root() / args.out / "stacked-latest.json", record)
    print(f"written: {project_root() / args.out / 'stacked-latest.json'}")


def _time_domain(domain: str, args: argparse.Namespace, devices: list[str], record: dict) -> None:
    """Time every method of ``domain`` on every device (the closed-form fits on CPU) into ``record["runs"]``, and
    AC-GATE's arithmetic efficiency on a synthetic domain into ``record["acgate_efficiency"]``."""
    params = _params(domain, args.profile)
    if params.data is not None and not (panel_dir(data_root(params), domain) / "panel.json").is_file():
        print(f"{domain}: skipped, no processed panel (run make paper with its input files first)", flush=True)
        return
    for method in [m for m in args.methods or params.methods if m in params.methods]:
        for device in devices if method not in CLOSED_FORM_METHODS else ["cpu"]:
            summary = _in_fresh_process(domain, method, args.seed, device, args.profile, args.repeats)
            summary |= {"domain": domain, "method": method, "device": device}
            record["runs"].append(summary)
            per_epoch = (f", {summary['seconds_per_epoch']['median'] * 1000:.1f} ms/epoch over "
                         f"{summary['epochs_run']:.0f} epochs" if "seconds_per_epoch" in summary else "")
            wall = summary["wall_seconds"]
            print(f"{domain:20s} {method:14s} {device}: run {wall['median']:.2f} s ({wall['min']:.2f}.."
                  f"{wall['max']:.2f}){per_epoch}; first run in the process {summary['cold_seconds']:.2f} s; "
                  f"peak RSS {summary['peak_rss_mb']:.0f} MB" + (f", {summary['page_faults']['median']:.0f} page "
                  "faults per epoch" if "page_faults" in summary else ""), flush=True)
    timed = [r for r in record["runs"] if r["domain"] == domain and r["method"] == "acgate" and r["device"] == "cpu"]
    if domain.startswith("synthetic") and timed:
        flops, peak = epoch_flops(params, args.seed), record["matmul_peak"]["gflops"]
        achieved = flops / timed[0]["seconds_per_epoch"]["median"] / 1e9
        record["acgate_efficiency"] = {"domain": domain, "gflop_per_epoch": flops / 1e9,
                                       "achieved_gflops": achieved, "share_of_peak": achieved / peak}
        print(f"AC-GATE epoch on {domain}: {flops / 1e9:.2f} GFLOP, {achieved:.1f} GFLOP/s achieved = "
              f"{achieved / peak:.0%} of the matmul peak", flush=True)


def _at_once(args: argparse.Namespace, device: str) -> dict:
    batch = seeds_at_once(args.domains[0], args.seed, device, args.profile, args.at_once)
    print(f"AC-GATE, {batch['processes']} seeds at once on {device}: {batch['at_once_seconds']:.1f} s against "
          f"{batch['one_after_another_seconds']:.1f} s one after another: {batch['runs_per_minute_at_once']:.1f} "
          f"runs/min against {batch['runs_per_minute_one_after_another']:.1f}", flush=True)
    return batch


def _papermill(args: argparse.Namespace) -> dict:
    overhead = papermill_overhead(args.domains[0], args.seed, args.repeats, args.profile)
    print(f"Papermill: 03_train (AC-GATE) costs {overhead['notebook_fixed_seconds']:.1f} s besides its training as a "
          f"notebook, against {overhead['direct_fixed_seconds']:.1f} s as a direct call in a fresh process: overhead "
          f"{overhead['overhead_seconds']:.1f} s (paired runs {overhead['overhead_range'][0]:.1f}.."
          f"{overhead['overhead_range'][1]:.1f}); the notebook's time outside its cells (Papermill, the kernel) is "
          f"{overhead['papermill_and_kernel_seconds']:.1f} s, its cells besides training "
          f"{overhead['notebook_cells_seconds']:.1f} s", flush=True)
    return overhead


def _calibration(args: argparse.Namespace, device: str) -> dict:
    replicate = _result(_fresh_process("--one-replicate", device, str(args.repeats)))
    took = replicate["seconds"]
    print(f"audit calibration, one {replicate['scenario']} replicate ({replicate['fits']} fits and its audit) on "
          f"{device}: {took['median']:.2f} s ({took['min']:.2f}..{took['max']:.2f}); first in the process "
          f"{replicate['cold_seconds']:.2f} s", flush=True)
    return replicate


def _panel_matched(args: argparse.Namespace) -> dict:
    """Panel-matched replicates timed in a fresh process, and the study an own panel's grid runs by default (every
    scenario, ``panel_matched_replicates`` each, ``panel_matched_neural_replicates`` of them with AC-GATE, from
    config/config.yaml) by that count."""
    import yaml

    from acgate.audit.surrogates import SCENARIOS

    found = _result(_fresh_process("--one-matched", str(args.repeats)))
    config = yaml.safe_load((project_root() / "config" / "config.yaml").read_text())
    replicates, neural = config["panel_matched_replicates"], config["panel_matched_neural_replicates"]
    core_seconds = len(SCENARIOS) * ((replicates - neural) * found["seconds"]["classical"]["median"]
                                     + neural * found["seconds"]["with_acgate"]["median"])
    cores = os.cpu_count() or 1
    found["default_study"] = {"replicates": replicates, "neural_replicates": neural, "scenarios": len(SCENARIOS),
                              "core_seconds": core_seconds, "cores": cores, "minutes": core_seconds / cores / 60}
    took = found["seconds"]
    print(f"panel-matched study of {found['panel']} ({found['entities']} entities x {found['steps']} steps, "
          f"{found['seeds']} seeds a replicate): a replicate with the classical family "
          f"{took['classical']['median']:.2f} s ({took['classical']['min']:.2f}..{took['classical']['max']:.2f}), "
          "with the AC-GATE family too "
          f"{took['with_acgate']['median']:.2f} s; the default study ({len(SCENARIOS)} scenarios x {replicates}, "
          f"{neural} of them with AC-GATE) about {core_seconds / cores / 60:.1f} min on {cores} cores", flush=True)
    return found


def _last_suite() -> dict | None:
    suite = last_suite()
    if suite:
        made = suite["runs_made"] or {}
        print(f"committed tables: {suite['runs']} runs made over {made.get('span_minutes', float('nan')):.1f} min "
              f"({made.get('first_utc')} .. {made.get('last_utc')}; {suite['machine']['cores']} cores, "
              f"{suite['machine']['cpu']}; runs at {', '.join(sha[:10] for sha in suite['runs_git_sha'])})")
        for device, entry in suite["per_device"].items():
            print(f"last whole make paper on {device}: {entry['wall_minutes']:.1f} min for {entry['runs']} runs "
                  f"(training runs {entry['training_seconds_total'] / 60:.1f} min summed; {entry['finished_utc']})")
    return suite


if __name__ == "__main__":
    main()
