"""Error rates on panels like the one being audited: the audit's rules on surrogates of a data domain
(:mod:`acgate.audit.surrogates`: its entities, features and proxies, a target whose lags are known), one scenario
of :data:`acgate.audit.surrogates.SCENARIOS` at a time.

    source = surrogates.fit_source(panel, params)
    study = run_study(source, params, out)       # every scenario, STUDY["replicates"] each (neural: with AC-GATE)
    study.rates                                  # per reference and layer: false supports, power, smallest spread
    study.write_record(out / RECORD, params)     # what the audit reads (read_rates)

The smallest spread a rule detects on the panel (:func:`smallest_detectable`) is the sd of the true k* reached by
the smallest spread of the grid at which it says "supported" in at least :data:`DETECTABLE` of the surrogates (every
spread named is such an sd: :func:`spread_text`); every "not certified" is read with the power counts and their
intervals (:func:`_unseen`), and every false-support rate with the worst null's.

Each replicate is a full audit (``acgate.audit.domain_audit.audit_domain``) of a surrogate's runs: the classical
family (the moderated distributed lag and its shared-lag, shuffled-proxy and proxy-scaled twins) in every replicate, and
the AC-GATE family (AC-GATE, No-AC-Encoder, the shuffled-proxy gate and the Proxy Shared-Gate) in the first ``neural``
replicates of each scenario, all on the domain's own params (model, training, audit) with ``seeds`` seeds. On a GPU
the AC-GATE family's runs of a scenario's replicates are first trained together, as one stacked model per method
(:func:`train_stacked`), and the replicates keep them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from acgate import statistics
from acgate.audit import calibration
from acgate.audit import domain_audit as audit
from acgate.audit.surrogates import SCENARIOS, Source, draw
from acgate.audit.verdicts import CLASSICAL_REFERENCE, FAMILIES, RULES_VERSIONS, rules_versions, versions_text
from acgate.config import GATE_METHODS, Params
from acgate.data.panel import Panel
from acgate.layout import audit_dir, method_dir, panel_dir, shown
from acgate.runs import write_csv, write_json

DETECTABLE = 0.8  # a spread counts as detectable where a rule says "supported" in at least this share of surrogates


def methods(params: Params, neural: bool) -> list[str]:
    """The methods a replicate trains: the classical family, and the AC-GATE family when ``neural``
    (:func:`acgate.audit.calibration.family_methods`)."""
    return calibration.family_methods(params, [reference for reference in FAMILIES if neural or reference != "acgate"])


def surrogate_seed(name: str, replicate: int) -> int:
    """The seed of :func:`draw` for surrogate ``replicate`` of scenario ``name`` in every study."""
    return list(SCENARIOS).index(name) * 100_003 + replicate


def _surrogate(name: str, replicate: int, source: Source, params: Params, root: Path, seeds: int,
               neural: int) -> tuple[Panel, Params, Path, Path]:
    """Surrogate ``replicate`` of scenario ``name``, saved under ``root``; its params (the domain
    ``<scenario>_r<NNN>``, its seeds and methods: the AC-GATE family too when ``replicate < neural``), runs folder and
    data folder."""
    panel = draw(source, name, seed=surrogate_seed(name, replicate))
    chosen = methods(params, replicate < neural)
    params = dataclasses.replace(params, domain=f"{name}_r{replicate:03d}", n_seeds=seeds, methods=tuple(chosen))
    runs_root, data_root = Path(root) / "runs", Path(root) / "data"
    panel.save(panel_dir(data_root, params.domain))
    return panel, params, runs_root, data_root


def run_replicate(name: str, replicate: int, source: Source, params: Params, root: Path, seeds: int,
                  neural: int) -> list[dict]:
    """Draw surrogate ``replicate`` of scenario ``name``, train its methods for ``seeds`` seeds (the AC-GATE family
    too when ``replicate < neural``; runs :func:`train_stacked` trained are kept), audit it under ``root`` and return
    its records (:func:`acgate.audit.calibration.replicate_records`)."""
    from acgate.models.runner import run_seeds  # torch: imported where replicates train

    start = time.perf_counter()
    scenario = SCENARIOS[name]
    panel, params, runs_root, data_root = _surrogate(name, replicate, source, params, root, seeds, neural)
    for method in params.methods:  # a real panel: one panel for every seed
        run_seeds(dict.fromkeys(range(seeds), panel), params, method, runs_root, log=lambda _: None)
    result = audit.audit_domain(params, runs_root, data_root)
    result.write(audit_dir(runs_root, params.domain))
    return calibration.replicate_records(result, params.audit,
                                         {"scenario": name, "control": scenario.control,
                                          "lags_differ_truth": scenario.lags_differ,
                                          "l2_truth": scenario.l2_truth, "replicate": replicate,
                                          "spread": scenario.spread, "moderator": scenario.moderator},
                                         round(time.perf_counter() - start, 2))


def train_stacked(names: list[str], source: Source, params: Params, root: Path, seeds: int, neural: int,
                  log: Callable[[str], None] = print) -> bool:
    """Where ``train.stacked`` stacks them (auto: on a GPU; on: anywhere), the AC-GATE family of the ``neural`` first
    replicates of every scenario, trained before the replicates run: per scenario and method, all its replicates'
    seeds as one stacked model (:func:`acgate.models.runner.run_many`; each run is its lone run up to float rounding
    where no dropout or gate noise is drawn, :mod:`acgate.models.stacked`). The replicates (:func:`run_replicate`)
    then keep these runs and fit the classical family (their ``seconds`` leave the stacked training out). Returns
    whether it trained any; with ``train.stacked`` auto on the CPU (where stacking is slower) it trains none, and the
    replicates train their own. A stack that does not fit trains one run after another, with a warning."""
    from acgate.models import stacked  # torch: imported where replicates train
    from acgate.models.runner import RunSpec, run_many

    if neural < 1 or not stacked.wanted(params, neural * seeds):
        return False
    family = [m for m in methods(params, True) if m not in methods(params, False)]
    label, start = f"[panel-matched stacked {{}}/{len(names)}]", time.perf_counter()
    log(f"{label.format(0)} the AC-GATE family ({', '.join(family)}) of {neural} replicates x {seeds} seeds of "
        f"each scenario, trained as one stacked model per scenario and method before the replicates run")
    for done, name in enumerate(names, start=1):
        surrogates = {r: _surrogate(name, r, source, params, root, seeds, neural) for r in range(neural)}
        for method in family:
            run_many({(r, seed): RunSpec(panel, own, seed, method_dir(runs_root, own.domain, seed, method))
                      for r, (panel, own, runs_root, _) in surrogates.items() for seed in range(seeds)},
                     method, log=lambda line: log(line.strip()) if "WARNING:" in line else None)
        minutes = (time.perf_counter() - start) / 60
        log(f"{label.format(done)} {name}: trained ({minutes:.1f} min so far, about "
            f"{minutes / done * (len(names) - done):.1f} min left)")
    return True


# the size of an own panel's study, by default (the workflow's config/config.yaml says the same, which a test checks):
# 15 surrogates a scenario with the classical family, 36 of each null (0 false supports in 36 bound the worst null
# class's rate below 10 %, its 95 % Clopper-Pearson upper limit 9.7 %; 15 bound it at 22 %), 5 seeds each. An AC-GATE
# replicate costs 7-17 classical ones, and the one or two a scenario that fit in such a time bound nothing (0 of 2
# says power < 84 %), so AC-GATE's rates are asked for, not given by default: about 20 a scenario measure them (the
# committed economics and energy studies)
STUDY = {"replicates": 15, "neural": 0, "seeds": 5, "null_replicates": 36}


@dataclass
class Study:
    """A finished study (:func:`run_study`): its surrogates' source, scenarios and settings, every replicate's
    records (of the references it measured), the table of "supported" shares (:func:`acgate.audit.calibration.
    calibration_table`, with the rows it kept), the error rates (:func:`error_rates`), and how long it took on how many
    processes, with the provenance of its start."""

    source: Source
    names: list[str]
    settings: dict  # replicates, neural_replicates, seeds (and null_replicates where they differ)
    replicates: pd.DataFrame
    table: pd.DataFrame
    rates: dict
    minutes: float
    workers: int
    started: dict
    kept: dict  # per reference whose rates an earlier study measured (kept_rates): where they come from

    def write_record(self, path: Path, params: Params) -> None:
        """The study's record (:func:`write_record`) at ``path``."""
        write_record(path, self.source, params, self.names, self.settings, self.rates, self.minutes, self.workers,
                     self.started, self.kept)


# the largest study a call may ask for: 10,000 replicates of each of about 15 scenarios is days of work on a
# workstation, and 1,000 seeds is the params files' own limit (n_seeds)
STUDY_LIMITS = {"replicates": 10_000, "neural": 10_000, "seeds": 1_000, "jobs": 1_024, "null_replicates": 10_000}


def check_size(replicates: int, neural: int, seeds: int, jobs: int, null_replicates: int = 0,
               names: dict[str, str] | None = None, zero: dict[str, str] | None = None) -> None:
    """Stop with the parameter named unless a study's size is whole numbers: ``replicates`` and ``seeds`` at least
    1, ``neural``, ``jobs`` and ``null_replicates`` at least 0, none above :data:`STUDY_LIMITS` (a study of a million
    replicates planned 12 million audits and took 2 GB before anything ran). ``names``: each argument's name where
    the caller calls it otherwise; ``zero``: what 0 means for an argument where the caller gives it a meaning (the
    message says so)."""
    names, zero = names or {}, {"jobs": "0: one process per CPU core", **(zero or {})}
    least = {"replicates": (replicates, 1), "neural": (neural, 0), "seeds": (seeds, 1), "jobs": (jobs, 0),
             "null_replicates": (null_replicates, 0)}
    for argument, (value, low) in least.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            shown_value = int(value) if isinstance(value, np.integer) else repr(value)
            raise ValueError(f"{names.get(argument, argument)} = {shown_value}: a whole number of {low} or more is "
                             "needed" + (f" ({zero[argument]})" if argument in zero else ""))
        if value > STUDY_LIMITS[argument]:
            limits = ", ".join(f"{names.get(a, a)} {n}" for a, n in STUDY_LIMITS.items())
            raise ValueError(f"{names.get(argument, argument)} = {int(value)}: at most {STUDY_LIMITS[argument]} (the "
                             f"study's limits: {limits}; 40 replicates bound a power within about +-15 %, 200 a "
                             "false-support rate within about +-3 %)")


# what one run of a surrogate leaves on disk, measured on the economics panel's studies (88 entities x 44 steps:
# predictions.csv about 34 bytes an entity-step, lags.csv and coefficients.csv about 900 bytes an entity, the
# manifest, metrics, history and a network's weights about 40 kB), with room to spare
RUN_BYTES = {"entity_step": 40, "entity": 1_000, "run": 50_000}


def study_bytes(order: list[tuple[str, int]], neural: int, methods: dict[bool, int], seeds: int, n_entities: int,
                n_steps: int) -> int:
    """What the replicates of ``order`` leave on disk, about: each its ``seeds`` runs of ``methods[with AC-GATE]``
    methods (:data:`RUN_BYTES` each), AC-GATE's family in those numbered below ``neural``."""
    run = RUN_BYTES["entity_step"] * n_entities * n_steps + RUN_BYTES["entity"] * n_entities + RUN_BYTES["run"]
    return sum(methods[replicate < neural] for _, replicate in order) * seeds * run


def check_room(out: Path, needed: int, what: str) -> None:
    """Stop, before anything is trained, where ``needed`` bytes (:func:`study_bytes`) would not fit on the disk that
    holds ``out``: a study of thousands of replicates filled it hours in. ``what`` names the arguments that size the
    study."""
    folder = Path(out).resolve()
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if needed > 0.9 * free:
        raise ValueError(f"the study would write about {needed / 1e9:.1f} GB of runs under {shown(out)}, and that disk "
                         f"has {free / 1e9:.1f} GB free: ask for fewer replicates ({what}) or give a folder on a disk "
                         "with room (each replicate's runs stay, so that a rerun keeps them)")


def run_study(source: Source, params: Params, out: Path, scenarios: list[str] | tuple = (),
              replicates: int = STUDY["replicates"], neural: int = STUDY["neural"], seeds: int = STUDY["seeds"],
              jobs: int = 0, null_replicates: int = 0, keep: Path | None = None,
              log: Callable[[str], None] = print) -> Study:
    """The study of the panel ``source`` was made from, under ``out``: ``replicates`` surrogates of each of
    ``scenarios`` (empty: every one the panel allows) and ``null_replicates`` (0: as many) of each null one
    (:func:`plan`), the first ``neural`` of each with the AC-GATE family too, ``seeds`` seeds each, in ``jobs``
    processes (0: one per core); its replicates' records go to ``out/replicates.csv``. ``keep``: the record of an
    earlier study of the same size (:func:`kept_rates`), whose rates of a reference whose rules have not changed since
    are kept, not measured again (a change to the classical rules measures the classical family alone; its AC-GATE
    replicates cost 7-17 times as much). The plan is said first, then a line per replicate with the time left."""
    check_size(replicates, neural, seeds, jobs, null_replicates)
    names = source.scenarios(scenarios)
    workers, neural = jobs or os.cpu_count() or 1, min(neural, replicates)  # AC-GATE in the first of "replicates"
    settings = {"replicates": replicates, "neural_replicates": neural, "seeds": seeds,
                **({"null_replicates": null_replicates} if null_replicates not in (0, replicates) else {})}
    kept, kept_rows = kept_rates(keep, source, params, names, settings) if keep else ({}, pd.DataFrame())
    measure = [r for r in FAMILIES if r in params.methods and (neural or r != "acgate") and r not in kept]
    classical, neural = "moderated_dl" in measure, neural if "acgate" in measure else 0
    order = plan(names, replicates if classical else neural, neural,
                 null_replicates if classical else min(null_replicates, neural)) if measure else []
    if not order and not kept:
        raise ValueError(f"no surrogate to audit: scenarios {', '.join(names) or 'none that this panel allows'}, "
                         f"{replicates} replicates; ask for 1 or more of a scenario the panel allows")
    if kept:
        log(calibration.kept_sentence(kept, shown(keep), measure))
    nulls = f" ({null_replicates} of each null)" if null_replicates and classical else ""
    if order:
        log(f"{len(order)} surrogate audits of {params.domain} ({source.panel.n_entities} entities x "
            f"{len(source.panel.times)} steps): {len(names)} scenarios x {replicates if classical else neural} "
            f"replicates{nulls}, {seeds} seeds each, the AC-GATE family in {neural} of each; {workers} at once -> "
            f"{shown(out)}")
    check_room(out, study_bytes(order, neural, {False: len(methods(params, False)), True: len(methods(params, True))},
                                seeds, source.panel.n_entities, len(source.panel.times)),
               "replicates, neural, null_replicates")
    start, started = time.perf_counter(), calibration.provenance(params)
    train_stacked(names, source, params, out, seeds, neural, log)
    work = functools.partial(run_replicate, source=source, params=params, root=out, seeds=seeds, neural=neural)
    found = calibration.run_replicates(order, work, jobs=workers, log=log, label="panel-matched",
                                       kind=lambda name, r: "with AC-GATE" if r < neural else "classical"
                                       ) if order else pd.DataFrame(columns=["reference"])
    found = found[found.reference.isin(measure)]
    minutes = (time.perf_counter() - start) / 60
    write_csv(Path(out) / "replicates.csv", found, index=False)
    log(f"{len(order)} replicates in {minutes:.1f} min ({workers} processes)")
    table = calibration.merged_table(kept_rows, found)
    return Study(source, names, settings, found, table, error_rates(table, source.about), minutes, workers, started,
                 kept)


def plan(names: list[str], replicates: int, neural: int = 0, null_replicates: int = 0) -> list[tuple[str, int]]:
    """(scenario, replicate) of every replicate: ``replicates`` of each scenario, ``null_replicates`` (0: as many) of
    each whose proxies hold no lags (``control`` negative: a false-support rate needs more replicates to bound than a
    power does), the scenarios in turn within each replicate number, and the ``neural`` first replicates of each
    scenario (the AC-GATE family's, 7-17 times as dear) spread evenly among the others, so that the cost of both
    kinds is known early (the time left is estimated per kind) and the progress is even."""
    count = {name: (null_replicates or replicates) if SCENARIOS[name].control == "negative" else replicates
             for name in names}
    dear = [(name, r) for r in range(neural) for name in names if r < count[name]]
    cheap = [(name, r) for r in range(neural, max(count.values(), default=0)) for name in names if r < count[name]]
    order, taken = [], 0
    for i, item in enumerate(dear, start=1):
        order.append(item)
        upto = round(i * len(cheap) / len(dear))
        order += cheap[taken:upto]
        taken = upto
    return order + cheap[taken:]


STATEMENT_LAYERS = ("L1", "L2", "L3", "lags differ")


def error_rates(table: pd.DataFrame, about: dict) -> dict:
    """Per reference and layer (the calibrated rules, and the lags-differ statement): how often the rule said
    "supported" on the null surrogates (false support, pooled over them, with its 95 % Clopper-Pearson interval) and
    on the positives of each spread (power, with the true k* spread reached per scenario, ``about["true_kstar_sd"]``,
    where the window does not allow the one asked for), and the sentence that says so. The power grid is of the
    scenarios that shift the lags along the proxies' or a stratifier's direction (``proxy_lags_unaligned`` counts as
    a null of L2 and is shown in the table, not in the grid). L2's power is left out where no stratifier follows the
    proxies' direction (``about["aligned_stratifier"]`` None): L2 has nothing to find."""
    out: dict = {}
    calibrated = table[(table.rule == "calibrated") & table.layer.isin(STATEMENT_LAYERS)]
    for (reference, layer), rows in calibrated.groupby(["reference", "layer"], sort=False):
        spread = rows.scenario.map(lambda s: SCENARIOS[s].spread)
        nulls, positives = rows[rows.truth == "not supported"], rows[rows.truth == "supported"]
        positives = positives[positives.scenario.map(lambda s: SCENARIOS[s].moderator != "other_proxies")]
        if layer == "L2" and about.get("aligned_stratifier") is None:
            positives = positives.iloc[:0]
        x, n = int(nulls.supported.sum()), int(nulls.replicates.sum())
        power: dict[str, dict[str, Any]] = {}
        for value, g in positives.groupby(spread[positives.index], sort=True):
            hits, trials = int(g.supported.sum()), int(g.replicates.sum())
            power[f"{value:g}"] = {"supported": hits, "replicates": trials, "ci": _interval(hits, trials),
                                   "true_kstar_sd": round(float(np.mean([about["true_kstar_sd"][s]
                                                                         for s in g.scenario])), 3)}
        out.setdefault(reference, {})[layer] = worded({
            "false_support": {"supported": x, "replicates": n, "ci": _interval(x, n)}, "worst_null": _worst_null(nulls),
            "power": power})
    return out


def worded(rate: dict) -> dict:
    """``rate`` (``false_support``, ``worst_null`` and ``power`` counts) with what the page says of them: its
    ``sentence``, the ``smallest_detectable`` spread and the ``unseen`` text. Every spread it names is the sd of the
    entities' true k* that a scenario reached on this panel; where the lag window cut a scenario's shift short of the
    spread asked for, the text says so. :func:`read_rates` words a stored record again, so that the words follow
    the counts whichever version wrote them."""
    power, worst, false = rate["power"], rate.get("worst_null") or {}, rate["false_support"]
    detects = "; ".join(f"{spread_text(value, p)} in {p['supported']} of {p['replicates']}"
                        for value, p in power.items())
    falsely = (f"on panels like this one the rule falsely supports in {worst['supported']} of "
               f"{worst['replicates']} surrogates of its worst null ({worst['scenario']}; 95 % interval "
               f"{_percent(worst['ci'])}), {false['supported']} of {false['replicates']} over all nulls"
               if false["replicates"] else "no nulls were run")
    sentence = "; ".join(part for part in (falsely, f"it detects {detects}" if detects else "") if part)
    return {**rate, "sentence": sentence, "smallest_detectable": smallest_detectable(power),
            "unseen": _unseen(power)}


CUT = 0.95  # a scenario whose true k* reached less than this share of the spread asked was cut by the lag window


def spread_text(value: str, p: dict) -> str:
    """A spread of the power grid (``value`` asked; ``p`` its power record) as the sd of the true k* it reached, to
    two digits ("a spread of 1.7 lags (2 asked: the lag window cuts it)"); the spread asked for where no reached one
    is recorded."""
    reached = float(p.get("true_kstar_sd", float(value)))
    cut = f" ({value} asked: the lag window cuts it)" if reached < CUT * float(value) else ""
    return f"a spread of {lags_text(reached)}{cut}"


def lags_text(lags: float) -> str:
    """A number of lags to two digits, with its noun: "1 lag", "1.7 lags"."""
    return f"{lags:.2g} lag{'s' if f'{lags:.2g}' != '1' else ''}"


def false_alarms(table: pd.DataFrame, references: list[str]) -> dict | None:
    """How often the stability test's warning ("lags changed", :func:`acgate.audit.verdicts.lags_changed`) appeared
    on a study's surrogates (``table``: its rows per scenario, rule and layer), none of whose lags change over time:
    pooled over every scenario, and its worst scenario, with 95 % Clopper-Pearson intervals. A test of the classical
    fit (:data:`acgate.audit.calibration.STATEMENTS`): the classical reference's rows where it is among
    ``references`` (those measured under their current rules); None otherwise."""
    rows = table[(table.rule == "calibrated") & (table.layer == "lags changed")
                 & (table.reference == CLASSICAL_REFERENCE)]
    if rows.empty or CLASSICAL_REFERENCE not in references:
        return None
    x, n = int(rows.supported.sum()), int(rows.replicates.sum())
    return {"false_support": {"supported": x, "replicates": n, "ci": _interval(x, n)}, "worst_null": _worst_null(rows)}


def frequent_false_alarm(alarms: dict | None, alpha: float) -> dict | None:
    """The worst scenario of :func:`false_alarms` where the stability warning appeared in clearly more of its
    surrogates than ``alpha`` (the lower end of its 95 % interval above it): there the warning is no evidence of a
    break. None otherwise."""
    worst = (alarms or {}).get("worst_null")
    return worst if worst and worst["ci"][0] > alpha else None


def _worst_null(nulls: pd.DataFrame) -> dict:
    """The null scenario in which a rule said "supported" most often (the size of a test is its worst case, not
    the pooled count), with its count and 95 % Clopper-Pearson interval; empty without nulls."""
    if nulls.empty:
        return {}
    counts = nulls.groupby("scenario", sort=False)[["supported", "replicates"]].sum()
    share = counts.supported / counts.replicates
    name = max(counts.index, key=lambda s: (share[s], counts.supported[s]))
    hits, trials = int(counts.supported[name]), int(counts.replicates[name])
    return {"scenario": name, "supported": hits, "replicates": trials, "ci": _interval(hits, trials)}


def smallest_detectable(power: dict) -> float | None:
    """The smallest spread of ``power`` (spread asked -> {"supported", "replicates", "true_kstar_sd"}) at which a
    rule said "supported" in at least :data:`DETECTABLE` of the surrogates, as the sd of the true k* that spread
    reached (the spread asked where none is recorded); None where it does at no spread (or no positive was run). A
    larger spread may fall short of it: power need not grow with the spread, where a shift moves much of a curve out
    of the window (:func:`_unseen` says so)."""
    at = _detected_at(power)
    return None if at is None else float(power[at].get("true_kstar_sd", float(at)))


def _detected_at(power: dict) -> str | None:
    reached = [value for value, p in power.items() if p["supported"] >= DETECTABLE * p["replicates"] > 0]
    return min(reached, key=float) if reached else None


def _unseen(power: dict) -> str:
    """What a "not certified" cannot exclude on this panel: the sentence the audit prints beside it, from the power
    counts with their intervals (a count of 32 of 40 is an interval of 64-91 %, not 80 %)."""
    if not power:
        return ""
    kind = "a rigid shift of the pooled lag curve along the proxies' direction"

    def count(value: str) -> str:
        p = power[value]
        return f"{p['supported']} of {p['replicates']} ({_percent(p['ci'])})"

    spreads = sorted(power, key=float)
    at = _detected_at(power)
    if at is None:
        best = max(spreads, key=lambda v: power[v]["supported"] / max(power[v]["replicates"], 1))
        low, high = (float(power[v].get("true_kstar_sd", v)) for v in (spreads[0], spreads[-1]))
        return (f"on this panel the rule detected no spread simulated ({kind}, sd of the true k* {low:.2g} to "
                f"{high:.2g} lags) in {DETECTABLE:.0%} of surrogates; most often {spread_text(best, power[best])}, in "
                f"{count(best)}")
    text = f"on this panel the rule detected {kind}, {spread_text(at, power[at])}, in {count(at)} of surrogates"
    short = [v for v in spreads if float(v) > float(at)
             and power[v]["supported"] < DETECTABLE * power[v]["replicates"]]
    if short:
        text += "; larger spreads less often: " + ", ".join(f"{spread_text(v, power[v])} in {count(v)}" for v in short)
    below = [v for v in spreads if float(v) < float(at)]
    if below:
        text += "; smaller spreads were detected less often: " + ", ".join(
            f"{spread_text(v, power[v])} in {count(v)}" for v in below)
    return text


def _percent(ci: list[float] | None) -> str:
    """A 95 % interval as percentages ("64-91 %")."""
    return f"{ci[0]:.0%}-{ci[1]:.0%}".replace("%-", "-") if ci else "no interval"


def _interval(successes: int, trials: int) -> list[float] | None:
    """The 95 % Clopper-Pearson interval, rounded; None without trials."""
    return [round(v, 4) for v in statistics.clopper_pearson(successes, trials)] if trials else None


RECORD = "panel_matched.json"  # beside the study's table: its settings, what the surrogates were made from, the rates
# the version of how surrogates are made and what a study records, beside the rules' version: a study of another
# version no longer describes these surrogates. Raise it with any change to the surrogates or their methods
SURROGATE_VERSION = 5


def panel_digest(panel: Panel) -> str:
    """``Panel.digest`` (what a run trains on) and the stratifiers, which choose the surrogates' directions."""
    frame = pd.util.hash_pandas_object(panel.stratifiers.sort_index(axis=1), index=True).to_numpy()
    return hashlib.sha256((panel.digest() + frame.tobytes().hex()).encode()).hexdigest()[:12]


def params_digest(params: Params) -> str:
    """Short hash of the whole params, the audit settings, methods and seed count included (all shape the study's
    replicates or the rules they are judged by); ``Params.digest`` leaves those out, as they do not shape a run. Left
    out: ``train.keep_freed_memory``, which changes no number, and the model and audit settings added later where
    they hold their defaults (:meth:`acgate.config.Params.recorded`), so that the studies measured before
    those existed stay current."""
    whole = params.to_dict()
    whole["train"] = {k: v for k, v in whole["train"].items() if k != "keep_freed_memory"}
    whole.update({section: params.recorded(section) for section in ("model", "audit")})
    return hashlib.sha256(json.dumps(whole, sort_keys=True).encode()).hexdigest()[:12]


def write_record(path: Path, source: Source, params: Params, names: list[str], settings: dict, rates: dict,
                 minutes: float, workers: int, started: dict, kept: dict | None = None) -> None:
    """The study's record (``panel_matched.json``): the panel and params it matched (digests), each reference's rules
    version and the surrogates' version, the settings (replicates, neural_replicates, seeds; null_replicates where
    they differ), the surrogates' sources, the error rates and the provenance (``started``:
    :func:`acgate.audit.calibration.provenance` as the study started; ``kept``: per reference whose rates an earlier
    study measured, that study's ``created_utc``, ``git_sha`` and ``minutes``)."""
    write_json(Path(path), {
        "domain": params.domain, "panel_digest": panel_digest(source.panel), "params_digest": params_digest(params),
        "rules_version": RULES_VERSIONS, "surrogate_version": SURROGATE_VERSION,
        "scenarios": {n: SCENARIOS[n].description for n in names}, "settings": settings,
        "source": source.about, "error_rates": rates, "minutes": round(minutes, 1), "processes": workers,
        **({"kept": kept} if kept else {}), **started})


def _read_record(path: Path, panel: Panel, params: Params) -> tuple[dict, str]:
    """The record of the study at ``path`` and ``""``, or ``{}`` and why it says nothing about an audit of ``panel``
    under ``params``: missing, unreadable, or measured on another panel, other params or other surrogates."""
    if not path.is_file():
        return {}, f"no panel-matched study at {shown(path)}"
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as err:
        return {}, f"the panel-matched study {shown(path)} is unreadable ({type(err).__name__})"
    if not isinstance(record, dict):
        return {}, f"the panel-matched study {shown(path)} is not a JSON object"
    checks = (("panel_digest", panel_digest(panel), "another panel (or other stratifiers)"),
              ("params_digest", params_digest(params), "other params"),
              ("surrogate_version", SURROGATE_VERSION, "other surrogates"))
    for key, expected, what in checks:
        if record.get(key) != expected:
            return {}, (f"the panel-matched study {shown(path)} was measured on {what} ({key} {record.get(key)!r}, "
                        f"now {expected!r}); run it again")
    return record, ""


def _current(record: dict) -> tuple[list[str], list[str]]:
    """The references of a study's record whose rates were measured under their current rules, and the others."""
    measured = rules_versions(record.get("rules_version"))
    references = list(record.get("error_rates", {}))
    current = [r for r in references if measured.get(r) == RULES_VERSIONS.get(r)]
    return current, [r for r in references if r not in current]


def read_rates(path: Path, panel: Panel, params: Params) -> dict:
    """The error rates of the study at ``path`` for the audit of ``panel`` under ``params``, with the study's
    settings: those of each reference measured under its current rules (:data:`acgate.audit.verdicts.
    RULES_VERSIONS`), ``stale`` naming the others, ``residual_ar1`` (the persistence of the surrogates' noise: the
    panel's noise model, :func:`acgate.audit.noise.estimate`), ``lagged_share`` (the share of the target's variance
    that the panel's pooled lag curve explains), ``entities`` (the panel's) and ``lags_changed``, how often the
    stability warning appeared on them (:func:`false_alarms`, from the table beside the record; None without it);
    ``{"note": why}`` alone when the study is missing, unreadable, or measured on another panel, other params, other
    surrogates or other rules of every reference (a stale study says nothing about this audit)."""
    path = Path(path)
    record, note = _read_record(path, panel, params)
    if note:
        return {"note": note}
    current, stale = _current(record)
    if stale and not current:
        measured = rules_versions(record.get("rules_version"))
        return {"note": f"the panel-matched study {shown(path)} was measured on other rules (rules versions "
                        f"{versions_text(measured)}, now {versions_text(RULES_VERSIONS)}); run it again"}
    return {"note": "", "settings": record["settings"],
            "error_rates": {r: {layer: worded(rate) for layer, rate in rates.items()}
                            for r, rates in record["error_rates"].items() if r in current},
            "stale": stale, "created_utc": record.get("created_utc"), "file": shown(path),
            "residual_ar1": record.get("source", {}).get("residual_ar1"),
            "lagged_share": record.get("source", {}).get("lagged_share_of_variance"), "entities": panel.n_entities,
            "lags_changed": false_alarms(pd.read_csv(path.with_suffix(".csv")), current)
            if path.with_suffix(".csv").is_file() else None}


def at_seeds(rates: dict, seeds: int) -> dict:
    """:func:`read_rates`' ``rates`` for an audit of ``seeds`` seeds: a gate model's verdicts test over seeds, so its
    rates measured on replicates of another seed count are left out (their references named in ``seeds_differ``);
    the classical reference's fits read no seed, and its rates stand at any count."""
    if rates.get("note") or rates.get("settings", {}).get("seeds") == seeds:
        return rates
    differ = [r for r in rates.get("error_rates", {}) if r in GATE_METHODS]
    return {**rates, "error_rates": {r: v for r, v in rates["error_rates"].items() if r not in differ},
            "seeds_differ": differ, "audit_seeds": seeds}


def kept_rates(path: Path, source: Source, params: Params, names: list[str], settings: dict
               ) -> tuple[dict, pd.DataFrame]:
    """What a study of ``names`` with ``settings`` keeps of the earlier study whose record is at ``path`` (its table
    beside it, the ``.csv`` of the same name): the rows of each reference measured under its current rules, where
    that study surrogated this panel under these params and surrogates, with the same scenarios and settings; and per
    kept reference, where its rows come from (``created_utc``, ``git_sha``, ``minutes`` of the study that measured
    them: :func:`acgate.audit.calibration.kept_rows`). Nothing where there is no such study."""
    path = Path(path)
    table = path.with_suffix(".csv")
    record, note = _read_record(path, source.panel, params)
    if note or not table.is_file() or record.get("settings") != settings or sorted(record.get("scenarios", {})) \
            != sorted(names):
        return {}, pd.DataFrame()
    return calibration.kept_rows(record, pd.read_csv(table))


def current_rates(paths: list[Path], panel: Panel, params: Params) -> dict:
    """:func:`read_rates` of the first study in ``paths`` that is current for this audit (a grid's own study, then
    the copies beside the tables: the committed ones of economics and energy), else of the first that is current for
    some reference; the first one's note when none is."""
    found = [read_rates(path, panel, params) for path in paths]
    return next((rates for rates in found if not rates["note"] and not rates["stale"]),
                next((rates for rates in found if not rates["note"]), found[0]))
