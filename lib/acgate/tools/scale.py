"""Speed and memory at scale (``make bench BENCH=--scale``): one epoch and the peak memory of a method on synthetic
panels of many entities, each in a fresh single-thread process, with the machine's matrix-multiply peak measured
just before and just after every timing (on a shared machine the peak moves within the hour).

    python -m acgate.tools.scale          # N 1,000 / 4,000 / 16,000, T 40: acgate, moderated_dl, tft
    python -m acgate.tools.scale --entities 20000 --steps 60 --methods acgate tft --blocks 256 1024

Per (N, method, block): seconds per epoch (median and min over ``--epochs`` epochs after a first, untimed one; a
closed-form fit's whole fit, basis and ridge search included), the process's peak resident memory over what it held
before training, the memory the run planned for (:class:`acgate.models.memory.MemoryPlan`) and, for the neural
methods, the achieved share of the single-thread matmul peak (an epoch's floating-point operations, counted on a
small panel of the same T and scaled by N, over the epoch's seconds). The panels are drawn from the synthetic DGP
(``params/synthetic_linear.yaml`` with K 8) into ``runs/bench/data``; the record goes to ``runs/bench/scale-*.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np

from acgate.config import CLOSED_FORM_METHODS, Params, load_params
from acgate.data.prep import panel_for_training
from acgate.layout import project_root
from acgate.notebook.execution import SINGLE_THREAD
from acgate.runs import git_sha, machine, package_versions, write_json
from acgate.tools.bench import data_root, epoch_flops, matmul_peak

FLOP_ENTITIES = 64  # the panel an epoch's operations are counted on (they grow exactly with N)


def scale_params(entities: int, steps: int, epochs: int = 1, block: int | str = "auto", max_lag: int = 8) -> Params:
    """synthetic_linear with N entities, T steps and K lags (validation from 3/4 of T, test from 7/8), trained for
    ``epochs`` epochs with a progress line after each."""
    base = load_params(project_root() / "params" / "synthetic_linear.yaml")
    return replace(base, domain=f"scale_{entities}x{steps}",
                   synthetic=replace(base.synthetic, n_entities=entities, n_steps=steps, lag_horizon=max_lag),
                   split=replace(base.split, val_start=round(0.75 * steps), test_start=round(0.875 * steps)),
                   model=replace(base.model, max_lag=max_lag),
                   train=replace(base.train, device="cpu", max_epochs=epochs, patience=epochs, log_every=1,
                                 block_entities=block))


def measure(entities: int, steps: int, method: str, epochs: int, block: int | str) -> dict:
    """In this process: draw the panel, then time ``method`` on it (see the module's text)."""
    from acgate.models.baselines import GroupedARDL
    from acgate.models.runner import fit_lag_curves
    from acgate.models.train import fit

    params = scale_params(entities, steps, epochs + 1, block)
    panel = panel_for_training(params, 0, data_root(params))
    peaks = [matmul_peak()["gflops"]]
    held = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out: dict = {"entities": entities, "steps": steps, "method": method, "block_setting": block}
    if method in CLOSED_FORM_METHODS:
        start = time.perf_counter()
        if method == "grouped_ardl":
            GroupedARDL.fit(panel, params)
        else:
            fit_lag_curves(panel, params, method, 0)
        out["fit_seconds"] = time.perf_counter() - start
    else:
        stamps: list[float] = []
        result = fit(panel, params, method, 0, log=lambda line: stamps.append(time.perf_counter()))
        seconds = np.diff(stamps)[-epochs:]  # the epochs after the first: each one's progress line to the next
        flops = epoch_flops(scale_params(FLOP_ENTITIES, steps), method=method) * entities / FLOP_ENTITIES
        out |= {"seconds_per_epoch": float(np.median(seconds)), "min_seconds_per_epoch": float(seconds.min()),
                "epochs_timed": len(seconds), "gflop_per_epoch": flops / 1e9, "block": result.memory.block,
                "blocks": result.memory.blocks, "planned_gb": result.memory.needed() / 1e9}
    peaks.append(matmul_peak()["gflops"])
    out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    out["training_rss_gb"] = out["peak_rss_gb"] - held / 1e9
    out["matmul_peak_gflops"] = [round(p, 1) for p in peaks]
    if "gflop_per_epoch" in out:
        out["share_of_peak"] = out["gflop_per_epoch"] / out["min_seconds_per_epoch"] / statistics.mean(peaks)
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m acgate.tools.scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", nargs="+", type=int, default=[1_000, 4_000, 16_000], help="panel sizes N")
    parser.add_argument("--steps", type=int, default=40, help="time steps T of every panel")
    parser.add_argument("--methods", nargs="+", default=["acgate", "moderated_dl", "tft"], help="methods to time")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs after the first (neural methods)")
    parser.add_argument("--blocks", nargs="+", default=["auto"],
                        help="train.block_entities settings to time (auto, or entities per block)")
    parser.add_argument("--out", default="runs/bench", help="folder for the JSON record, relative to the project root")
    parser.add_argument("--one", nargs=5, metavar=("N", "T", "METHOD", "EPOCHS", "BLOCK"), help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.one:  # one measurement in this (fresh) process, as JSON on stdout
        n, steps, method, epochs, block = args.one
        print(json.dumps(measure(int(n), int(steps), method, int(epochs), block if block == "auto" else int(block))))
        return
    created = datetime.now(UTC).isoformat(timespec="seconds")
    runs: list[dict] = []
    record = {"created_utc": created, "git_sha": git_sha(), "machine": machine(), "packages": package_versions(),
              "runs": runs}
    print(f"{'N':>7} {'T':>3} {'method':13} {'block':>12} {'s/epoch':>16} {'fit s':>7} {'peak GB':>8} "
          f"{'training GB':>11} {'planned GB':>10} {'share':>6}  matmul peak GFLOP/s (before, after)", flush=True)
    for n in args.entities:
        for method in args.methods:
            for block in args.blocks if method not in CLOSED_FORM_METHODS else ["auto"]:
                row = _in_fresh_process(n, args.steps, method, args.epochs, block)
                runs.append(row)
                print(_line(row), flush=True)
    out = project_root() / args.out
    stamp = created.replace(":", "").replace("-", "")
    write_json(out / f"scale-{stamp}.json", record)
    print(f"written: {out / f'scale-{stamp}.json'}")


def _in_fresh_process(n: int, steps: int, method: str, epochs: int, block: str) -> dict:
    command = [sys.executable, "-m", "acgate.tools.scale", "--one", str(n), str(steps), method, str(epochs), block]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **SINGLE_THREAD})
    if done.returncode != 0:
        return {"entities": n, "steps": steps, "method": method, "block_setting": block,
                "failed": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _line(row: dict) -> str:
    head = f"{row['entities']:>7,} {row['steps']:>3} {row['method']:13}"
    if "failed" in row:
        return f"{head} {row['block_setting']:>12}  failed: {row['failed']}"
    blocks = f"{row['blocks']}×{row['block']}" if "block" in row else "-"
    per_epoch = (f"{row['seconds_per_epoch']:.3f} (min {row['min_seconds_per_epoch']:.3f})"
                 if "seconds_per_epoch" in row else "-")
    fit_seconds = f"{row['fit_seconds']:.1f}" if "fit_seconds" in row else "-"
    planned = f"{row['planned_gb']:.2f}" if "planned_gb" in row else "-"
    share = f"{row['share_of_peak']:.0%}" if "share_of_peak" in row else "-"
    return (f"{head} {blocks:>12} {per_epoch:>16} {fit_seconds:>7} {row['peak_rss_gb']:>8.2f} "
            f"{row['training_rss_gb']:>11.2f} {planned:>10} {share:>6}  {row['matmul_peak_gflops']}")


if __name__ == "__main__":
    main()
