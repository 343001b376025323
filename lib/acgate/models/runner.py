"""One method trained on one panel and seed, with its run folder written: ``runs/<domain>/seed<NN>/<method>/``
holds ``metrics.json`` (written last: the finished marker), ``lags.csv``, ``predictions.csv``, ``history.csv``,
``manifest.json``, and ``model.pt`` (neural methods) or ``coefficients.csv`` (Grouped ARDL, the classical
lag models).

    run_method(panel, params, "acgate", seed=0, runs_root="runs")

The lag table of a trained model is its structural omega and k* for the AC-GATE family and the classical lag models
(``acgate.models.classical``), and the diagnostic occlusion profile (``acgate.models.occlusion``) for the neural
baselines.
"""

from __future__ import annotations

import contextlib
import functools
import json
import uuid
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NamedTuple, TypeVar

import numpy as np
import pandas as pd
import torch
from threadpoolctl import threadpool_limits

from acgate.config import (
    CURVE_METHODS,
    CURVE_NETWORK_METHODS,
    GATE_METHODS,
    NEURAL_METHODS,
    SEEDLESS_METHODS,
    Params,
)
from acgate.data.panel import SPLITS, Panel
from acgate.layout import method_dir, shown
from acgate.models import baselines, lags, stacked
from acgate.models.classical import ClassicalFit, fit_classical
from acgate.models.metrics import TRUTHS, forecast_metrics, l3_recovery
from acgate.models.networks import ACGate
from acgate.models.neural_dl import fit_neural_dl
from acgate.models.occlusion import occlusion_increase, profile_from_increase
from acgate.models.train import FitResult, fit, memory_error, predictions
from acgate.runs import (
    atomic_write,
    current_metrics,
    manifest,
    reading,
    remove_interrupted_writes,
    write_csv,
    write_json,
    writer,
    writing,
)


def lag_table(result: FitResult, panel: Panel) -> pd.DataFrame:
    """Structural omega and k* for AC-GATE models; for neural baselines the diagnostic occlusion profile, with
    their internal lag weights (averaged over time) beside it."""
    model, batch = result.model, result.batch
    if isinstance(model, ACGate):
        with torch.no_grad():
            z = model.score(batch.proxies)
            omega = model.lag_weights(z).cpu().numpy()
        return lags.lag_frame(panel, omega, "structural", z=z.squeeze(1).cpu().numpy())
    out = result.output
    internal = None if out.internal is None else out.internal.mean(dim=1).cpu().numpy()
    increase = occlusion_increase(model, batch, result.memory.block)
    return lags.lag_frame(panel, profile_from_increase(increase), "diagnostic: occlusion", internal=internal)


def omega_of_z(model: ACGate) -> Callable[[np.ndarray], np.ndarray]:
    """The trained gate as a numpy function z (G,) -> omega (G, K)."""
    device = next(model.parameters()).device

    def evaluate(z: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            zt = torch.as_tensor(z, dtype=torch.float32, device=device)[:, None]
            return model.lag_weights(zt).cpu().numpy()

    return evaluate


def summarise(preds: pd.DataFrame, table: pd.DataFrame, facts: dict,
              gate: Callable[[np.ndarray], np.ndarray] | None = None) -> dict:
    """metrics.json content: split-wise L0 metrics, lag summaries, L3 where truth exists, and run ``facts``."""
    omega = table.filter(regex=r"^omega_\d+$").to_numpy()
    metrics: dict = {split: forecast_metrics(*(preds.loc[preds.split == split, c].to_numpy()
                                               for c in ("y", "y_hat", "time"))) for split in SPLITS}
    metrics["lags"] = {"kstar_kind": table.kstar_kind.iloc[0], "kstar_mean": float(table.kstar.mean()),
                       "kstar_sd": float(table.kstar.std(ddof=0)),
                       "omega_entropy": float(np.nanmean(lags.omega_entropy(omega))),
                       "gate_sensitivity": lags.gate_sensitivity(table.z.to_numpy(), gate) if gate else None}
    truths = {name: column for name, column in TRUTHS.items() if column in table}
    if truths:
        metrics["l3"] = {name: l3_recovery(table.kstar.to_numpy(), table[column].to_numpy())
                         for name, column in truths.items()}
    metrics.update(facts)
    return metrics


SHUFFLED_PROXIES_SALT = 104_729  # the shuffled_proxies method's permutation differs from a proxy-shuffle domain's
SHUFFLED_METHODS = ("shuffled_proxies", "shuffled_dl")  # trained on the proxies permuted (the same permutation)


@dataclass
class _Trained:
    """What a run folder is written from: predictions, lag table, training history, time and device, the facts
    metrics.json records, and the gate as a function of z (the AC-GATE family)."""
    preds: pd.DataFrame
    table: pd.DataFrame
    history: pd.DataFrame
    seconds: float
    device: str
    facts: dict
    gate: Callable[[np.ndarray], np.ndarray] | None = None


def run_method(panel: Panel, params: Params, method: str, seed: int, runs_root: Path,
               log: Callable[[str], None] = print, retrain: bool = False, bar: bool = False) -> dict:
    """Train ``method`` and write its artifacts to runs/<domain>/seed<NN>/<method>/; returns metrics.json.

    A finished run trained under the same parameters (params hash) on the same panel (panel digest) is kept, unless
    ``retrain``. Progress goes to ``log``, and with ``bar`` to a progress bar (see :func:`acgate.models.train.fit`).
    ``metrics.json`` is written last, so an interrupted run leaves nothing that counts as finished.
    ``shuffled_proxies`` is AC-GATE trained on the proxies permuted across entities (one non-identity permutation per
    seed, recorded in the manifest): the comparator that tells a proxy-conditioned gate from a gate that merely has
    more inputs; ``shuffled_dl`` is the moderated distributed lag on the same permutation. Another process writing
    the same run folder stops it, before it changes anything, with :class:`acgate.runs.RunFolderBusy`.
    """
    return run_seeds({seed: panel}, params, method, runs_root, log, retrain, bar)[seed]


def run_seeds(panels: dict[int, Panel], params: Params, method: str, runs_root: Path,
              log: Callable[[str], None] = print, retrain: bool = False, bar: bool = False) -> dict[int, dict]:
    """:func:`run_method` for several seeds of one method (``panels``: each seed's panel); returns each seed's
    metrics.json (:func:`run_many`)."""
    return run_many({seed: RunSpec(panel, params, seed, method_dir(runs_root, params.domain, seed, method))
                     for seed, panel in panels.items()}, method, log, retrain, bar)


K = TypeVar("K", bound=Hashable)  # what a caller of run_many names its runs by: a seed, (replicate, seed), ...


class RunSpec(NamedTuple):
    """One run of a method: its panel, its params, its seed and its run folder (<runs>/<domain>/seed<NN>/<method>/,
    :func:`acgate.layout.method_dir`, where a seedless fit looks for the domain's other seeds)."""
    panel: Panel
    params: Params
    seed: int
    out: Path


def run_many(runs: dict[K, RunSpec], method: str, log: Callable[[str], None] = print, retrain: bool = False,
             bar: bool = False) -> dict[K, dict]:
    """Runs of one method, of one domain's seeds or of several domains (a study's replicates, whose params differ
    in the domain only); returns each run's metrics.json under its key. A finished run is kept as in
    :func:`run_method`; the neural runs left to train are trained as one stacked model where ``train.stacked`` says
    so (:mod:`acgate.models.stacked`), else one after another; a closed-form fit that reads no seed is fitted once
    per panel, in this call or by an earlier one, and copied to the domain's other seeds."""
    if not runs:
        return {}
    if len({repr((run.params.model, run.params.train)) for run in runs.values()}) > 1:
        raise ValueError(f"{method}: runs trained together must share their model and train settings (their params "
                         "may differ in the domain only)")
    done, pending = {}, {}
    fitted_here: dict[tuple[str, str], Path] = {}  # a seedless fit of this call, by params and panel digest
    threads = next(iter(runs.values())).params.train.threads
    # one writer per run folder (a second one stops, naming the first); numpy's BLAS on the run's threads, as PyTorch
    with contextlib.ExitStack() as held, threadpool_limits(threads, user_api="blas"):
        for run in runs.values():
            held.enter_context(writing(run.out))
        for key, (panel, params, seed, out) in runs.items():
            kept = None if retrain else current_metrics(out, params.digest(), panel.digest())
            same = (params.digest(), panel.digest())
            if kept is not None:
                log(f"  [{method} seed {seed}] kept: finished run with the same parameters in {shown(out)} (retrain "
                    "redoes it)")
                done[key] = kept
                if method in SEEDLESS_METHODS:
                    fitted_here.setdefault(same, out)
                continue
            if method in SEEDLESS_METHODS and same in fitted_here:
                done[key] = _copy_run(fitted_here[same], out, seed, log, held=True)
                continue
            fitted = (None if retrain or method not in SEEDLESS_METHODS
                      else _fitted_for_another_seed(panel, params, method, out))
            if fitted is not None:
                done[key] = _copy_run(fitted, out, seed, log)
            elif method in NEURAL_METHODS and stacked.wanted(params, len(runs)):
                pending[key] = runs[key]
            else:
                done[key] = _retrain(panel, params, method, seed, out, log, bar)
                if method in SEEDLESS_METHODS:
                    fitted_here[same] = out
        if pending:
            done |= _retrain_stacked(pending, method, log, bar)
    return {key: done[key] for key in runs}


def _fitted_for_another_seed(panel: Panel, params: Params, method: str, out: Path) -> Path | None:
    """The run folder of another seed of ``method`` (one of :data:`acgate.config.SEEDLESS_METHODS`) finished under
    the same parameters on the same panel (a proxy-shuffle domain's other seed has its own proxy order, so another
    panel digest), or None: a real panel is one panel for every seed."""
    for other in sorted(out.parent.parent.glob(f"seed*/{method}")):
        if other == out or writer(other) is not None:
            continue
        if current_metrics(other, params.digest(), panel.digest()):
            return other
    return None


def _write_bytes(file: IO[bytes], content: bytes) -> None:
    file.write(content)


def _copy_run(source: Path, out: Path, seed: int, log: Callable[[str], None], held: bool = False) -> dict:
    """Run folder ``out`` of seed ``seed`` as a copy of ``source``, the same closed-form fit on the same panel: its
    files as they are, the manifest's seed this one's and ``copied_from`` naming the source (the fit's ``seconds``
    stay in metrics.json, what the method costs; the report's training total counts the fit once). ``held``: the
    caller holds ``source``'s lock and has finished writing it (read without the lock's check)."""
    (out / "metrics.json").unlink(missing_ok=True)
    remove_interrupted_writes(out)
    with contextlib.nullcontext() if held else reading(source):
        files = {path.name: path.read_bytes() for path in source.iterdir()
                 if path.is_file() and not path.name.startswith(".") and path.name not in ("metrics.json",
                                                                                            "manifest.json")}
        metrics = json.loads((source / "metrics.json").read_text())
        record = json.loads((source / "manifest.json").read_text())
    for name, content in files.items():
        atomic_write(out / name, functools.partial(_write_bytes, content=content), binary=True)
    copied_from = f"{source.parent.name}/{source.name}"
    write_json(out / "manifest.json", {**record, "seed": seed, "copied_from": copied_from})
    metrics["copied_from"] = copied_from
    write_json(out / "metrics.json", metrics)
    log(f"  [{source.name} seed {seed}] the fit of {copied_from}: a closed-form fit reads no seed")
    return metrics


def _prepared(panel: Panel, method: str, seed: int, out: Path, log: Callable[[str], None]) -> Panel:
    """Run folder ``out``, whose lock the caller holds, cleared for a fresh run (no finished marker, no half-written
    file of a killed run); the panel ``method`` trains on (the proxies permuted for the shuffled methods)."""
    (out / "metrics.json").unlink(missing_ok=True)
    remove_interrupted_writes(out)  # of an earlier run of this method that was killed mid-write
    log(f"  [{method} seed {seed}] training on {panel.n_entities} entities")
    if method in SHUFFLED_METHODS:
        panel, permutation = panel.with_shuffled_proxies(seed, SHUFFLED_PROXIES_SALT)
        panel.meta["shuffled_proxies_permutation"] = [str(e) for e in panel.entities[permutation]]
    return panel


def _retrain(panel: Panel, params: Params, method: str, seed: int, out: Path, log: Callable[[str], None],
             bar: bool) -> dict:
    """Train ``method`` afresh into run folder ``out``, whose lock the caller holds; returns metrics.json."""
    given = panel.digest()
    panel = _prepared(panel, method, seed, out, log)
    return _write_run(_fit(panel, params, method, seed, out, log, bar), panel, given, params, method, seed, out, log)


def _retrain_stacked(runs: dict[K, RunSpec], method: str, log: Callable[[str], None],
                     bar: bool) -> dict[K, dict]:
    """The runs of neural ``method`` trained afresh as one stacked model into their run folders, whose locks the
    caller holds (one after another where they cannot be stacked); returns each run's metrics.json."""
    panels = {key: _prepared(run.panel, method, run.seed, run.out, log) for key, run in runs.items()}
    keys, first = list(runs), next(iter(runs.values()))
    with _memory_explained(first.params, method, first.seed, panels[keys[0]]):
        results = stacked.fit_stacked([panels[key] for key in keys], first.params, method,
                                      [runs[key].seed for key in keys], log)
    if results is None:
        log(f"  WARNING: [{method}] {len(keys)} runs cannot be trained stacked (panels of different shapes, or too "
            "large for one block): trained one after another")
        results = [None] * len(keys)
    written = {}
    for key, result in zip(keys, results, strict=True):
        run = runs[key]
        trained = (_fit(panels[key], run.params, method, run.seed, run.out, log, bar) if result is None
                   else _neural_trained(result, panels[key], method, run.out, stacked_seeds=len(keys)))
        written[key] = _write_run(trained, panels[key], run.panel.digest(), run.params, method, run.seed, run.out,
                                  log)
    return written


def _write_run(trained: _Trained, panel: Panel, panel_digest: str, params: Params, method: str, seed: int, out: Path,
               log: Callable[[str], None]) -> dict:
    """Run folder ``out`` written from ``trained`` on ``panel`` (``metrics.json`` last), which records
    ``panel_digest``, that of the panel the run was given (before a shuffled method's shuffle); returns
    metrics.json."""
    run_id = uuid.uuid4().hex  # in the manifest and metrics.json: both from this training (runs.mixed_training)
    metrics = summarise(trained.preds, trained.table, {
        **trained.facts, "seconds": round(trained.seconds, 3), "device": trained.device,
        "params_hash": params.digest(), "panel_digest": panel_digest,
        "run_id": run_id}, trained.gate)
    write_csv(out / "predictions.csv", trained.preds, index=False)
    write_csv(out / "lags.csv", trained.table, index=False)
    write_csv(out / "history.csv", trained.history, index=False)
    gpu = torch.cuda.get_device_name(trained.device) if trained.device.startswith("cuda") else None
    write_json(out / "manifest.json", manifest(params.to_dict(), seed, trained.device, method=method, gpu=gpu,
                                               wall_seconds=round(trained.seconds, 3), panel=panel.meta,
                                               run_id=run_id))
    write_json(out / "metrics.json", metrics)
    log(f"  [{method} seed {seed}] done in {trained.seconds:.1f} s: test MSE {metrics['test']['mse']:.4g}")
    return metrics


def _fit(panel: Panel, params: Params, method: str, seed: int, out: Path, log: Callable[[str], None],
         bar: bool) -> _Trained:
    """``method`` fitted in closed form or trained (memory that runs out explained: :func:`_memory_explained`)."""
    with _memory_explained(params, method, seed, panel):
        if method == "grouped_ardl":
            return _fit_ardl(panel, params, out)
        if method in CURVE_METHODS:
            return _fit_curves(fit_lag_curves(panel, params, method, seed), out)
        return _fit_neural(panel, params, method, seed, out, log, bar)


@contextlib.contextmanager
def _memory_explained(params: Params, method: str, seed: int, panel: Panel) -> Iterator[None]:
    """Memory that runs out inside as a :class:`acgate.models.train.TrainingError` naming the run, the panel's size
    and the fix (the allocator's own message names none of them); any other error as it is."""
    try:
        yield
    except (MemoryError, RuntimeError) as err:
        explained = memory_error(err, params, method, seed, panel)
        if explained is None:
            raise
        raise explained from err


HISTORY_COLUMNS = ["epoch", "train_loss", "recon_loss", "val_loss"]  # history.csv; empty for a closed-form fit


def _fit_ardl(panel: Panel, params: Params, out: Path) -> _Trained:
    """Grouped ARDL in closed form; its coefficients go to ``coefficients.csv``."""
    ardl = baselines.GroupedARDL.fit(panel, params)
    write_csv(out / "coefficients.csv", ardl.coefficients, index=False)
    return _Trained(ardl.predictions(), ardl.lag_table(), pd.DataFrame(columns=HISTORY_COLUMNS),  # no iterations
                    ardl.seconds, "cpu", {"best_epoch": None, "epochs_run": None, "fit": "closed-form OLS per group",
                                          "groups": ardl.groups})


def fit_lag_curves(panel: Panel, params: Params, method: str, seed: int) -> ClassicalFit:
    """A method of :data:`acgate.config.CURVE_METHODS` fitted on ``panel`` (the seed read by ``neural_dl`` only;
    ``shuffled_dl`` takes a panel whose proxies are already permuted)."""
    if method in CURVE_NETWORK_METHODS:
        return fit_neural_dl(panel, params, seed)
    return fit_classical(panel, params, method)


def _fit_curves(found: ClassicalFit, out: Path) -> _Trained:
    """A moderated distributed lag fitted in closed form (:mod:`acgate.models.classical`,
    :mod:`acgate.models.neural_dl`); its lag curves go to ``coefficients.csv``."""
    write_csv(out / "coefficients.csv", found.curve_table(), index=False)
    return _Trained(found.predictions(), found.lag_table(), pd.DataFrame(columns=HISTORY_COLUMNS), found.seconds,
                    "cpu", found.facts)


def _fit_neural(panel: Panel, params: Params, method: str, seed: int, out: Path, log: Callable[[str], None],
                bar: bool) -> _Trained:
    """A neural method trained alone (:func:`acgate.models.train.fit`)."""
    return _neural_trained(fit(panel, params, method, seed, log, bar), panel, method, out)


def _neural_trained(result: FitResult, panel: Panel, method: str, out: Path, stacked_seeds: int = 1) -> _Trained:
    """What a neural run folder is written from; its weights go to ``model.pt``. ``stacked_seeds``: the runs (seeds,
    and a study's replicates) trained with it as one model (its ``seconds`` are its share of their time)."""
    facts = {"best_epoch": result.best_epoch, "epochs_run": result.epochs_run,
             "seconds_per_epoch": round(result.seconds / result.epochs_run, 5),
             "block_entities": result.memory.block, "blocks": result.memory.blocks,
             "memory_gb_planned": round(result.memory.needed() / 1e9, 3), "stacked_seeds": stacked_seeds}
    if method == "ganet":
        facts["gate_density"] = float(result.output.gates.mean())  # the share of open gates at evaluation
    atomic_write(out / "model.pt", lambda f: torch.save(result.model.state_dict(), f), binary=True)
    return _Trained(predictions(result, panel), lag_table(result, panel), result.history, result.seconds,
                    result.device, facts, omega_of_z(result.model) if method in GATE_METHODS else None)
