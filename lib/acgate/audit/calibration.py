"""Audit calibration: replicate audits of panels whose truth is known, to measure how often each verdict says
"supported" where it must not (negative controls) and where it should (positive controls).

A replicate is a full audit of fresh panel draws with their own seeds: every seed draws its panel, the methods the
rules need are trained on it (AC-GATE, the shared gate No-AC-Encoder, the shuffled-proxy gate and the Proxy
Shared-Gate; the moderated distributed lag with its shared-lag, shuffled-proxy and proxy-scaled twins), and
:func:`acgate.audit.domain_audit.audit_domain` reads the artifacts back exactly as it does for a paper domain.
Each replicate gives the verdicts of both references, AC-GATE and the moderated distributed lag, under the paper's
rules, the calibrated rules and the calibrated rules with the practical spread threshold at zero, and the lags-differ
statement.

Scenarios (the sizes come from ``params/audit_calibration.yaml``):

- negative controls, where the proxies hold no lag information: ``homogeneous_lags`` (every entity has the same
  lag), ``noise_target`` (the target is independent noise), ``constant_target``, ``shuffled_proxies`` (the proxies
  are permuted across entities before anything sees them), ``lag_free`` (no training: k* is a fixed random function
  of the proxies and every method's forecast is persistence), ``effect_size`` and ``noise_scale`` (the same lags for
  all; the proxies' z sets the size of the lagged effect, or the noise), ``ar_noise`` and ``persistent_noise`` (the
  same lags, AR(1) noise of coefficient 0.5, and 0.95 as in the economics panel),
  ``threshold_driver`` (the same lags, a hinge driver), ``common_shock`` (the same lags, and a persistent shock
  common to all entities whose loadings follow the proxies' z, as country panels share recessions that hit rich
  countries harder) and ``random_lags`` (lags that differ apart from the proxies);
- positive controls, with lags that differ by entity as the moderator says: ``linear``, ``nonlinear``,
  ``two_regime`` (lag 3 where the moderator z >= 0.5, lag K below) and ``weak_proxies`` (the linear map seen
  through noisier proxies).

The lags-differ statement has its own truth (:attr:`Scenario.lags_differ`): the lags differ in ``shuffled_proxies`` and
``random_lags`` too. ``lag_free``'s panel has the same lags for every entity, so that no rule, whether it reads the
runs' k* or the data (the classical reference's in-sample L1), has lag differences to find there.

Every panel gets the stratifier ``noisy_moderator`` (the moderator plus noise, Spearman about 0.9 with it and with
the first proxy: under the 0.95 circularity threshold one proxy at a time) beside the DGP's ``latent_z`` and
``noise``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from acgate import processes, statistics
from acgate.audit import domain_audit as audit
from acgate.audit.verdicts import (
    CLASSICAL_REFERENCE,
    FAMILIES,
    LAYERS,
    RULES_VERSIONS,
    aligned_stratifiers,
    lags_changed,
    rules_versions,
    versions_text,
)
from acgate.config import AuditConfig, Params
from acgate.data import dgp
from acgate.data.panel import SPLITS, Panel
from acgate.layout import audit_dir, method_dir, panel_dir
from acgate.models.baselines import persistence
from acgate.models.lags import lag_frame
from acgate.runs import atomic_write, manifest, write_csv, write_json

MODERATOR_NOISE_SD = 0.12  # sd of the noise on the moderator z ~ U(0, 1) in the stratifier noisy_moderator


SHUFFLE_SALT = 15_485_863  # the shuffled_proxies scenario's permutation, apart from the comparator method's


# effect_size: the whole effect of x (the lagged term and the contemporaneous one, whose lag-1 footprint through x's
# persistence would otherwise make the entities' curve shapes, and their mean lags by up to 0.9, differ with z) times
# a + b z, from a quarter to 1.75 times the DGP's
EFFECT_SIZE = (0.25, 1.5)


NOISE_SCALE = 0.45  # noise_scale: N(0, 1) times this times z added to the target (sd 0.15 to about 0.47 in all)


RANDOM_CENTRES = (3, 7)  # random_lags: lag centres drawn uniformly from these integers (sd 1.41 lags)


WEAK_PROXY_NOISE_SD = 0.2  # weak_proxies: the proxies' noise sd (0.0525 in the DGP): Spearman about 0.8 with z


# AR(1) noise added to the target (coefficient, innovation sd), stationary from the first step: ar_noise (sd 0.35 in
# all) and persistent_noise (sd 3.2, as persistent as the economics panel's errors, whose rho is about 0.95; the
# noise dominates the target, so a fit's estimated rho is near the truth)
AR_NOISE = {"ar_noise": (0.5, 0.3), "persistent_noise": (0.95, 1.0)}


# common_shock: f_t, AR(1) of this coefficient, stationary from the first step with the DGP's noise sd, times each
# entity's loading a + b z (a quarter to 1.75, as EFFECT_SIZE): with the DGP's noise the shock holds about half of the
# noise's variance, as the common factor of the real panels' residuals holds 35-45 %
COMMON_SHOCK = (0.8, EFFECT_SIZE)


@dataclass(frozen=True)
class Scenario:
    control: str  # negative or positive: whether the proxies hold lag information (the truth of L1, L2 and L3)
    dgp_scenario: str  # the lag-centre map of acgate.data.dgp
    target: str = "dgp"  # dgp, or what replaces or joins it: noise, constant, effect_size, noise_scale, ar_noise,
    #                      common_shock or random_lags
    shuffle_proxies: bool = False
    trained: bool = True
    lags_differ: bool = True  # whether the entities' lags differ at all (the truth of the lags-differ statement)
    synthetic: tuple = ()  # (name, value) overrides of params.synthetic
    description: str = ""


SCENARIOS = {
    "homogeneous_lags": Scenario("negative", "constant", lags_differ=False,
                                 description="every entity has lag centre 5"),
    "noise_target": Scenario("negative", "linear", target="noise", lags_differ=False,
                             description="target is N(0, 1) noise"),
    "constant_target": Scenario("negative", "linear", target="constant", lags_differ=False,
                                description="target is 1 everywhere"),
    "shuffled_proxies": Scenario("negative", "linear", shuffle_proxies=True,
                                 description="linear lags, proxies permuted across entities"),
    "lag_free": Scenario("negative", "constant", trained=False, lags_differ=False,
                         description="lag centre 5 for all; no training: k* = 5 + z-score of a random projection of "
                                     "the proxies"),
    "effect_size": Scenario("negative", "constant", target="effect_size", lags_differ=False,
                            description="lag centre 5 for all; the proxies' z sets the size of x's effect, lagged "
                                        f"and contemporaneous (times {EFFECT_SIZE[0]} + {EFFECT_SIZE[1]} z)"),
    "noise_scale": Scenario("negative", "constant", target="noise_scale", lags_differ=False,
                            description=f"lag centre 5 for all; noise of sd {NOISE_SCALE} z added to the target"),
    **{name: Scenario("negative", "constant", target="ar_noise", lags_differ=False,
                      description=f"lag centre 5 for all; AR(1) noise (coefficient {coef}, innovation sd {sd}) added "
                                  "to the target")
       for name, (coef, sd) in AR_NOISE.items()},
    "threshold_driver": Scenario("negative", "constant", lags_differ=False, synthetic=(("driver", "threshold"),),
                                 description="lag centre 5 for all; the lagged inputs pass through a hinge, which a "
                                             "linear distributed lag misrepresents"),
    "common_shock": Scenario("negative", "constant", target="common_shock", lags_differ=False,
                             description=f"lag centre 5 for all; a common AR(1) shock (coefficient {COMMON_SHOCK[0]}, "
                                         "the noise's sd) whose loadings follow the proxies' z "
                                         f"({COMMON_SHOCK[1][0]} + {COMMON_SHOCK[1][1]} z)"),
    "random_lags": Scenario("negative", "constant", target="random_lags",
                            description=f"lag centres drawn at random from {RANDOM_CENTRES[0]}..{RANDOM_CENTRES[1]}, "
                                        "apart from the proxies"),
    "linear": Scenario("positive", "linear", description="lag centre 3 + 7(1 - z)"),
    "nonlinear": Scenario("positive", "nonlinear", description="lag centre 10(1 - z)^2"),
    "two_regime": Scenario("positive", "two_regime", description="lag centre 3 for z >= 0.5, K below"),
    "weak_proxies": Scenario("positive", "linear", synthetic=(("proxy_noise_sd", WEAK_PROXY_NOISE_SD),),
                             description=f"lag centre 3 + 7(1 - z), proxy noise sd {WEAK_PROXY_NOISE_SD}"),
}


def lagged_part(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(N, T) the DGP's lagged term sum_k w_ik x_i,t-k of inputs x (N, T) and lag weights (N, K) (zero before t = 0,
    as in :func:`acgate.data.dgp.simulate`)."""
    out = np.zeros_like(x)
    for k in range(1, weights.shape[1] + 1):
        out[:, k:] += weights[:, k - 1:k] * x[:, :-k]
    return out


def draw_panel(name: str, params: Params, panel_seed: int) -> Panel:
    """One panel of scenario ``name``; all randomness from ``panel_seed``. The targets that replace the DGP's keep
    its panel otherwise: effect_size and random_lags swap its lagged term (linear driver) for another."""
    scenario = SCENARIOS[name]
    cfg = dataclasses.replace(params.synthetic, scenario=scenario.dgp_scenario, **dict(scenario.synthetic))
    panel = dgp.simulate(cfg, panel_seed, params.split.val_start, params.split.test_start)
    rng = np.random.default_rng([panel_seed, 1])  # apart from the DGP's own stream
    z = panel.truth["z"]
    panel.stratifiers["noisy_moderator"] = z + rng.normal(0, MODERATOR_NOISE_SD, len(z))
    y, x = panel.Y.astype(float), panel.X[:, :, 0].astype(float)
    if scenario.target in ("effect_size", "random_lags") and cfg.driver != "linear":
        raise ValueError(f"scenario {name} swaps the DGP's lagged term, which it computes for the linear driver only")
    lagged = lagged_part(x, panel.truth["lag_weights"])
    if scenario.target == "noise":
        y = rng.normal(0, 1, y.shape)
    elif scenario.target == "constant":
        y = np.ones_like(y)
    elif scenario.target == "effect_size":
        y = y + (EFFECT_SIZE[0] + EFFECT_SIZE[1] * z - 1)[:, None] * (lagged + cfg.contemporaneous_coef * x)
    elif scenario.target == "noise_scale":
        y = y + rng.normal(0, 1, y.shape) * (NOISE_SCALE * z)[:, None]
    elif scenario.target == "ar_noise":
        coef, sd = AR_NOISE[name]
        innovations = rng.normal(0, sd, y.shape)
        noise = np.empty_like(y)
        noise[:, 0] = innovations[:, 0] / np.sqrt(1 - coef ** 2)  # the stationary distribution
        for t in range(1, y.shape[1]):
            noise[:, t] = coef * noise[:, t - 1] + innovations[:, t]
        y = y + noise
    elif scenario.target == "common_shock":
        coef, (a, b) = COMMON_SHOCK
        shock = np.empty(y.shape[1])
        shock[0] = rng.normal(0, cfg.noise_sd)  # the stationary distribution
        for t in range(1, y.shape[1]):
            shock[t] = coef * shock[t - 1] + rng.normal(0, cfg.noise_sd * np.sqrt(1 - coef ** 2))
        y = y + (a + b * z)[:, None] * shock[None, :]
    elif scenario.target == "random_lags":
        centre = rng.integers(RANDOM_CENTRES[0], RANDOM_CENTRES[1] + 1, len(z))
        weights = dgp.lag_weights(centre, cfg.lag_horizon, cfg.lag_width)
        y = y - lagged + lagged_part(x, weights)
        panel.truth.update(kstar_true=centre.astype(float), lag_weights=weights,
                           dgp_mean_lag=weights @ np.arange(1, cfg.lag_horizon + 1))
    panel.Y = y.astype(np.float32)
    if scenario.shuffle_proxies:
        panel = panel.with_shuffled_proxies(panel_seed, SHUFFLE_SALT)[0]
    return panel


LAG_FREE_ROLES = {method: role for reference, twins in FAMILIES.items()  # each family's untrained stand-ins
                  for method, role in ((reference, "reference"), (twins.shared, "shared"),
                                       (twins.proxy, "shared"), (twins.shuffled, "shuffled"))}


def _write_lag_free_runs(panel: Panel, params: Params, seed: int, runs_root: Path, projection: np.ndarray) -> None:
    """Artifacts of the untrained lag-free control, the same for both references' families: k* a fixed function of
    the proxies (the reference), a constant (the shared-lag twin) or the same function of permuted proxies (the
    shuffled-proxy twin); persistence forecasts for all."""
    preds = persistence(panel, params.model.max_lag)
    standard = (panel.P - panel.P.mean(axis=0)) / panel.P.std(axis=0)
    score = standard @ projection
    shuffled = panel.with_shuffled_proxies(seed, SHUFFLE_SALT)[0]
    shuffled_score = ((shuffled.P - panel.P.mean(axis=0)) / panel.P.std(axis=0)) @ projection
    roles = {"reference": score, "shared": np.zeros_like(score), "shuffled": shuffled_score}
    for method, role in LAG_FREE_ROLES.items():
        values = roles[role]
        kstar = 5 + (values - values.mean()) / values.std() if values.std() > 0 else np.full_like(values, 5.0)
        table = lag_frame(panel, np.zeros((panel.n_entities, 1)), "structural (lag-free control)")
        table["kstar"] = kstar
        out = method_dir(runs_root, params.domain, seed, method)
        write_csv(out / "predictions.csv", preds, index=False)
        write_csv(out / "lags.csv", table, index=False)
        atomic_write(out / "history.csv", lambda f: f.write("epoch,train_loss,recon_loss,val_loss\n"))  # no training
        write_json(out / "manifest.json", manifest(params.to_dict(), seed, "none", method=method,
                                                   note="lag-free control, not trained"))
        write_json(out / "metrics.json", {"params_hash": params.digest(), "panel_digest": panel.digest(),
                                          "note": "lag-free control, not trained",
                                          **{split: {"n": int((preds.split == split).sum())} for split in SPLITS}})


def run_replicate(name: str, replicate: int, params: Params, root: Path,
                  measure: dict[str, list[str]] | None = None) -> list[dict]:
    """Train (or, for lag_free, write) every seed of one replicate under ``root`` and audit it; returns one record
    per reference (AC-GATE, the moderated distributed lag) with both rule sets' verdicts, the L2 test alone, and the
    seconds the replicate took. ``measure`` (:func:`to_measure`): per scenario, the references whose families the
    replicate trains and records (:func:`family_methods`); None: every method of ``params``, every reference."""
    from acgate.models.runner import (
        run_seeds,  # torch: imported where replicates train, not where a grid checks its plan
    )

    start = time.perf_counter()
    scenario = SCENARIOS[name]
    references = list(FAMILIES) if measure is None else measure[name]
    methods = params.methods if measure is None else tuple(family_methods(params, references))
    params = dataclasses.replace(params, methods=methods, domain=f"{name}_r{replicate:03d}")
    runs_root, data_root = Path(root) / "runs", Path(root) / "data"
    projection = np.random.default_rng([replicate, 2]).normal(size=len(dgp.PROXY_NAMES))
    panels = {}
    for seed in range(params.n_seeds):
        # the lag-free control shares one panel across seeds (like a real panel); the others draw one per seed
        panel_seed = 1_000 * (replicate + 1) + (0 if not scenario.trained else seed)
        panels[seed] = draw_panel(name, params, panel_seed)
        panels[seed].save(panel_dir(data_root, params.domain, seed))
        if not scenario.trained:
            _write_lag_free_runs(panels[seed], params, seed, runs_root, projection)
    for method in params.methods if scenario.trained else ():
        run_seeds(panels, params, method, runs_root, log=lambda _: None)
    result = audit.audit_domain(params, runs_root, data_root)
    result.write(audit_dir(runs_root, params.domain))
    records = replicate_records(result, params.audit, {"scenario": name, "control": scenario.control,
                                                       "lags_differ_truth": scenario.lags_differ,
                                                       "replicate": replicate}, round(time.perf_counter() - start, 2))
    return [record for record in records if record["reference"] in references]  # lag_free writes both families


def replicate_records(result: audit.AuditResult, cfg: AuditConfig, about: dict, seconds: float) -> list[dict]:
    """One record per reference of a replicate's audit: ``about`` (scenario, control, lags_differ_truth, replicate),
    the verdicts of both rule sets and of the calibrated ones with the practical spread threshold at zero, the L2
    test alone (and the entity-permutation test alone, the L2 test of the rules before), the lags-differ statement,
    whether the stability test found the lags changed over time (:func:`lags_changed`), the mean spread of k*, and
    the seconds the replicate took."""
    at_zero = audit.judge(result, dataclasses.replace(cfg, practical_sd=0.0))
    records = []
    for reference, found in result.verdicts_by_reference.items():
        if result.l1.empty or not (result.l1.method == reference).any():  # not run in this replicate
            continue
        record = {**about, "reference": reference, "seconds": seconds}
        for rule, cells in (("paper", found["paper"]), ("calibrated", found["calibrated"]),
                            ("calibrated_sd0", at_zero[reference]["calibrated"])):
            record.update({f"{rule}_{layer}": cells[layer]["verdict"] for layer in LAYERS})
        summary = result.l2_summary[(result.l2_summary.method == reference) & ~result.l2_summary.circular_joint]
        alone = len(aligned_stratifiers(cfg, summary)) > 0
        record["L2_test_alone"] = "supported" if alone else "not certified"
        # the L2 test of rules before moderated_dl 8 / acgate 6: the entity permutation alone, not the lag-free p
        plain = statistics.holm(dict(zip(summary.index, summary.alignment_p, strict=True)))
        agree = summary.sign_consistency >= cfg.min_sign_consistency
        record["L2_permutation_alone"] = ("supported" if any(p < cfg.alpha and agree[i] for i, p in plain.items())
                                          else "not certified")  # NaN: an untested stratifier passes nothing
        record["lags_differ"] = result.lags_differ["verdict"]
        record["lags_changed"] = "supported" if lags_changed(cfg.alpha, result.lag_tests) else "not certified"
        record["kstar_sd"] = float(result.l1[result.l1.method == reference].kstar_sd.mean())
        records.append(record)
    return records


def replicate_plan(names: list[str], negative: int, positive: int) -> list[tuple[str, int]]:
    """(scenario, replicate) of every replicate audit: ``negative`` per negative control, ``positive`` per positive."""
    return [(name, r) for name in names
            for r in range(negative if SCENARIOS[name].control == "negative" else positive)]


def family_methods(params: Params, references: list[str]) -> list[str]:
    """The methods that judge ``references``: each with the comparators of its calibrated L1 and, where the audit
    judges L3 (``audit.true_lag``), the collapsed models its L3 compares with, as far as ``params`` lists them."""
    wanted = [m for r in references for m in (r, FAMILIES[r].shared, FAMILIES[r].shuffled, FAMILIES[r].proxy,
                                              *(FAMILIES[r].collapsed if params.audit.true_lag else ()))]
    return [m for m in dict.fromkeys(wanted) if m in params.methods]


def merged_table(kept: pd.DataFrame, replicates: pd.DataFrame) -> pd.DataFrame:
    """The table of "supported" shares (:func:`calibration_table`) of ``replicates``' records with the ``kept`` rows
    of other references, in the order one table of all of them has. Kept rows of another reference than the
    classical one lose their :data:`STATEMENTS` rows (a table from before they were the classical reference's alone:
    measured under classical rules that may have changed since)."""
    parts = [part for part in (kept, calibration_table(replicates) if len(replicates) else pd.DataFrame()) if len(part)]
    if not parts:
        return pd.DataFrame()
    table = pd.concat(parts, ignore_index=True)
    table = table[~table.layer.isin(STATEMENTS) | (table.reference == CLASSICAL_REFERENCE)]
    return table.sort_values(["control", "scenario", "reference"], kind="stable", ignore_index=True)


RECORD = "audit_calibration.json"  # beside the table: what the calibration measured, under which rules


def settings(params: Params, names: list[str], negative: int, positive: int) -> dict:
    """What a calibration's numbers depend on besides the code of the rules: the replicate panels and training (the
    params digest), the audit settings (:meth:`acgate.config.Params.recorded`), the methods, the seeds, the scenarios
    and the replicate counts."""
    return {"params_digest": params.digest(), "audit": params.recorded("audit"),
            "methods": list(params.methods), "n_seeds": params.n_seeds, "scenarios": list(names),
            "negative_replicates": negative, "positive_replicates": positive}


def provenance(params: Params) -> dict:
    """What a study's record says of how it was made (params, git SHA, package versions, machine, and the device
    its networks train on), taken as the study starts: its git SHA is that of the code the replicates ran, not of
    the code when they ended."""
    from acgate.models.train import choose_device  # torch: imported where a study starts

    return manifest(params.to_dict(), seed=-1, device=str(choose_device(params.train.device)))


def write_record(tables_dir: Path, params: Params, names: list[str], negative: int, positive: int,
                 minutes: float, workers: int, started: dict, kept: dict | None = None) -> None:
    """``audit_calibration.json`` beside the table: each reference's rules version, the settings, the time and the
    provenance (``started``: :func:`provenance` as the calibration started; ``kept``: per reference whose rows an
    earlier calibration measured, its ``created_utc``, ``git_sha`` and ``minutes``)."""
    write_json(Path(tables_dir) / RECORD, {"rules_version": RULES_VERSIONS,
                                           "settings": settings(params, names, negative, positive),
                                           "minutes": round(minutes, 1), "processes": workers,
                                           **({"kept": kept} if kept else {}), **started})


def kept_rates(tables_dir: Path, params: Params, names: list[str], negative: int, positive: int
               ) -> tuple[dict, pd.DataFrame]:
    """What a calibration of ``names`` with these settings keeps of the one in ``tables_dir``: the rows of each
    reference measured under its current rules (:func:`kept_rows`) in the scenarios of ``names`` that calibration
    measured, where its other settings are these (so a scenario added to the calibration is measured alone); and per
    kept reference where its rows come from. Nothing where there is no such calibration."""
    path, table = Path(tables_dir) / RECORD, Path(tables_dir) / "audit_calibration.csv"
    try:
        record = json.loads(path.read_text())
        rows = pd.read_csv(table)
    except (OSError, ValueError):  # missing or unreadable (JSONDecodeError and pandas' errors are ValueErrors)
        return {}, pd.DataFrame()
    if not isinstance(record, dict) or not isinstance(record.get("settings"), dict):
        return {}, pd.DataFrame()
    ours = json.loads(json.dumps(settings(params, names, negative, positive)))
    theirs = record["settings"]
    if {k: v for k, v in theirs.items() if k != "scenarios"} != {k: v for k, v in ours.items() if k != "scenarios"}:
        return {}, pd.DataFrame()
    origin, rows = kept_rows(record, rows)
    if rows.empty:
        return origin, rows
    rows = rows[rows.scenario.isin(set(names) & set(theirs.get("scenarios") or ()))]
    return {r: o for r, o in origin.items() if r in set(rows.reference)}, rows


def to_measure(kept: pd.DataFrame, names: list[str], references: list[str]) -> dict[str, list[str]]:
    """Per scenario of ``names``: the references of ``references`` whose rows the ``kept`` rows
    (:func:`kept_rates`) lack, whose replicates a calibration must therefore train and audit."""
    have = set(zip(kept.scenario, kept.reference, strict=True)) if len(kept) else set()
    return {name: [r for r in references if (name, r) not in have] for name in names}


def measured_text(measure: dict[str, list[str]]) -> list[str]:
    """What :func:`to_measure` asks to measure, per reference: its name where it is measured in every scenario, else
    its name with the scenarios ("acgate in common_shock")."""
    references = list(dict.fromkeys(r for found in measure.values() for r in found))
    return [reference if all(reference in found for found in measure.values())
            else f"{reference} in {', '.join(n for n, found in measure.items() if reference in found)}"
            for reference in references]


def kept_rows(record: dict, rows: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """Of an earlier calibration's or panel-matched study's table ``rows`` and ``record``: the rows of each reference
    measured under its current rules (:data:`acgate.audit.verdicts.RULES_VERSIONS`), and per such reference where
    they come from (``created_utc``, ``git_sha``, ``minutes`` of the run that measured them)."""
    measured = rules_versions(record.get("rules_version"))
    current = [r for r in dict.fromkeys(rows.reference) if measured.get(r) == RULES_VERSIONS.get(r)] \
        if "reference" in rows else []
    origin = {r: record.get("kept", {}).get(r) or {k: record.get(k) for k in ("created_utc", "git_sha", "minutes")}
              for r in current}
    return origin, rows[rows.reference.isin(current)] if current else pd.DataFrame()


def kept_sentence(kept: dict, where: str, measured: list[str]) -> str:
    """What a calibration or study keeps from ``where`` and measures again, in a line."""
    return (f"kept from {where}: the rows of {', '.join(kept)}, measured under their current rules "
            f"({', '.join(sorted({str(k.get('created_utc')) for k in kept.values()}))}); measured again: "
            f"{', '.join(measured) or 'nothing'}")


def reusable(tables_dir: Path, params: Params, names: list[str], negative: int, positive: int) -> tuple[bool, str]:
    """Whether the calibration in ``tables_dir`` was measured under the current rules of both references
    (:data:`acgate.audit.verdicts.RULES_VERSIONS`) and these settings, so a run of the workflow may keep it; and a
    sentence saying why or why not."""
    path = Path(tables_dir) / RECORD
    if not path.is_file() or not (Path(tables_dir) / "audit_calibration.csv").is_file():
        return False, f"no calibration in {tables_dir}"
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as err:
        return False, f"the calibration record {path} is unreadable ({type(err).__name__})"
    if not isinstance(record, dict):
        return False, f"the calibration record {path} is not a JSON object"
    measured = rules_versions(record.get("rules_version"))
    if measured != RULES_VERSIONS:
        return False, (f"the calibration in {tables_dir} measured rules versions {versions_text(measured)}, the "
                       f"rules are now versions {versions_text(RULES_VERSIONS)}")
    if record.get("settings") != json.loads(json.dumps(settings(params, names, negative, positive))):
        return False, f"the calibration in {tables_dir} was measured under other settings"
    return True, (f"the calibration in {tables_dir} measured the current rules (versions "
                  f"{versions_text(RULES_VERSIONS)}, {record.get('created_utc')}, {record.get('git_sha')}, "
                  f"{negative} replicates per negative and {positive} per positive control): kept (make calibrate "
                  "measures it again)")


HEARTBEAT = 15.0  # seconds: with replicates in worker processes, a line at least this often while they run


def remaining_minutes(seconds: dict[str, list[float]], left: list[str], jobs: int) -> float | None:
    """What is left of a run of replicates, in minutes: each replicate ``left`` (its kind) costs the mean seconds of
    the finished ones of its kind (``seconds``: kind -> their times), over ``jobs`` processes; None while a kind that
    is left has no finished replicate (no guess: an AC-GATE replicate of a study costs 7-17 classical ones, so
    costing it as a classical one said 1.5 minutes left of a 4-minute study)."""
    means = {kind: sum(times) / len(times) for kind, times in seconds.items() if times}
    if any(kind not in means for kind in left):
        return None
    return sum(means[kind] for kind in left) / max(jobs, 1) / 60


def _unpacked(work: Callable[[str, int], list[dict]], item: tuple[str, int]) -> list[dict]:
    return work(*item)


def run_replicates(plan: list[tuple[str, int]], work: Callable[[str, int], list[dict]], jobs: int = 1,
                   log: Callable[[str], None] = print, label: str = "calibration",
                   kind: Callable[[str, int], str] = lambda name, replicate: "replicate") -> pd.DataFrame:
    """Every (scenario, replicate) of ``plan`` through ``work`` (:func:`run_replicate` with its params and folder
    bound, or :func:`acgate.audit.panel_matched.run_replicate`; in ``jobs`` worker processes when more than one
    (:mod:`acgate.processes`: they work from a plain script too, and end with the caller), so it must pickle), one
    progress line per finished replicate (and, with worker processes, one every
    :data:`HEARTBEAT` seconds without one), its estimate of the time left from the cost of each ``kind`` of
    replicate (:func:`remaining_minutes`); the records of every replicate in one table. Ctrl-C stops it within
    seconds, with a line saying what is kept."""
    records, start = [], time.perf_counter()
    workers = max(jobs, 1)
    kinds = {item: kind(*item) for item in plan}
    counts = {k: list(kinds.values()).count(k) for k in dict.fromkeys(kinds.values())}
    log(f"[{label} 0/{len(plan)}] {len(plan)} replicates"
        + (f" ({', '.join(f'{n} {k}' for k, n in counts.items())})" if len(counts) > 1 else "")
        + f", {workers} at a time; the time left is estimated once replicates of each kind have finished")
    seconds: dict[str, list[float]] = {k: [] for k in counts}
    pending = list(plan)

    def progress(item: tuple[str, int], found: list[dict]) -> None:
        records.extend(found)
        pending.remove(item)
        seconds[kinds[item]].append(found[0]["seconds"] if found else 0.0)
        done, elapsed = len(plan) - len(pending), time.perf_counter() - start
        left = remaining_minutes(seconds, [kinds[i] for i in pending], workers)
        verdicts = ", ".join(f"{r['reference']} L1 {r['calibrated_L1']}, L2 {r['calibrated_L2']}" for r in found)
        log(f"[{label} {done}/{len(plan)}] {item[0]} replicate {item[1]}: calibrated {verdicts} "
            f"({found[0]['seconds'] if found else 0:.0f} s; {elapsed / 60:.1f} min so far"
            + (f", about {left:.1f} min left)" if left is not None else ")"))

    try:
        if jobs <= 1:
            for name, replicate in plan:
                progress((name, replicate), work(name, replicate))
        else:
            for event in processes.results(functools.partial(_unpacked, work), plan, jobs, HEARTBEAT):
                if event is None:
                    log(f"[{label} {len(plan) - len(pending)}/{len(plan)}] {min(jobs, len(pending))} replicates "
                        f"running ({(time.perf_counter() - start) / 60:.1f} min so far)")
                else:
                    progress(plan[event[0]], event[1])
    except KeyboardInterrupt:
        done = len(plan) - len(pending)
        log(f"[{label} {done}/{len(plan)}] interrupted: the runs of the {done} finished replicates are kept on disk "
            "(a rerun keeps them and trains the others); the worker processes have ended")
        raise
    return pd.DataFrame(records).sort_values(["control", "scenario", "replicate", "reference"], kind="stable",
                                             ignore_index=True)


RULES = {"paper": "paper", "calibrated": "calibrated", "calibrated_sd0": "calibrated, practical_sd 0"}


ALONE = {"L2_test_alone": "L2 test alone", "L2_permutation_alone": "L2 permutation test alone"}
# the statements apart from the layers: GLS tests of the classical fit, whatever the reference, so their rows are the
# classical reference's alone (under its rules version; :data:`acgate.audit.verdicts.RULES_VERSIONS`)
STATEMENTS = ("lags differ", "lags changed")


def calibration_table(replicates: pd.DataFrame) -> pd.DataFrame:
    """Per scenario, reference, rule and layer: how many replicates were audited, the share "supported" and its 95 %
    Clopper-Pearson interval, and whether "supported" is the right answer there (``truth``: the scenario's control
    for the layers, its lags_differ for the lags-differ statement). The rules: the paper's, the calibrated, and the
    calibrated with the practical spread threshold at zero. ``L2 test alone`` is the calibrated L2 test without the
    L1 and seed-agreement gates; ``L2 permutation test alone`` the test the calibrated L2 used before (the entity
    permutation without the lag-free p); ``lags differ`` the statement apart from the layers and ``lags changed``
    the stability test (no scenario's lags change over time): one per replicate, GLS tests of the classical fit
    under the classical reference's rules version, so the classical reference's rows alone have them
    (:data:`STATEMENTS`).
    L2's truth is the replicates' ``l2_truth`` where they record one (a panel-matched scenario whose lags follow the
    proxies but not the stratifier), else the control's."""
    rows = []
    columns = [(label, layer, f"{rule}_{layer}") for rule, label in RULES.items() for layer in LAYERS]
    columns += [("calibrated", label, column) for column, label in ALONE.items()]
    statements = [("calibrated", layer, layer.replace(" ", "_")) for layer in STATEMENTS]
    for (scenario, reference), g in replicates.groupby(["scenario", "reference"], sort=False):
        for rule, layer, column in columns + (statements if reference == CLASSICAL_REFERENCE else []):
            if column not in g:  # replicates from before the column
                continue
            supported = int((g[column] == "supported").sum())
            low, high = statistics.clopper_pearson(supported, len(g))
            truth = g.control.iloc[0] == "positive"
            if layer == "lags changed":  # no scenario's lags change over time: every warning is a false one
                truth = False
            elif layer == "lags differ":
                truth = bool(g.lags_differ_truth.iloc[0])
            elif layer.startswith("L2") and "l2_truth" in g and pd.notna(g.l2_truth.iloc[0]):
                truth = bool(g.l2_truth.iloc[0])
            rows.append({"scenario": scenario, "control": g.control.iloc[0], "reference": reference, "rule": rule,
                         "layer": layer, "truth": "supported" if truth else "not supported",
                         "replicates": len(g), "supported": supported, "share_supported": supported / len(g),
                         "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows)


def compact_table(table: pd.DataFrame) -> pd.DataFrame:
    """A :func:`calibration_table` as a printed page shows it: one row per scenario, reference and rule, a column per
    layer with "supported/replicates", a star where "supported" is the right answer (a few pages, not dozens)."""
    cells = table.assign(cell=table.supported.astype(int).astype(str) + "/" + table.replicates.astype(int).astype(str)
                         + np.where(table.truth == "supported", "*", ""))
    wide = cells.pivot_table(index=["scenario", "control", "reference", "rule"], columns="layer", values="cell",
                             aggfunc="first", sort=False)
    return wide.reindex(columns=list(dict.fromkeys(table.layer))).fillna("").reset_index().rename_axis(columns=None)
