"""Audit calibration: replicate audits of panels whose truth is known, to measure how often each verdict says
"supported" where it must not (negative controls) and where it should (positive controls).

A replicate is a full audit of fresh panel draws with their own seeds: every seed draws its panel, the methods the
rules need are trained on it (AC-GATE, the shared gate No-AC-Encoder and the shuffled-proxy gate; the moderated
distributed lag with its shared-lag and shuffled-proxy twins), and :func:`acgate.audit.audit_domain` reads the
artifacts back exactly as it does for a paper domain. Each replicate gives the verdicts of both references, AC-GATE
and the moderated distributed lag, so the table measures both.

Scenarios (the sizes come from ``params/audit_calibration.yaml``):

- negative controls, with no lag information for k* to find:
  ``homogeneous_lags`` (every entity has the same lag), ``noise_target`` (the target is independent noise),
  ``constant_target``, ``shuffled_proxies`` (the proxies are permuted across entities before anything sees them),
  and ``lag_free`` (no training: k* is a fixed random function of the proxies and every method's forecast is
  persistence, so the rules see a large, seed-stable spread of k* that carries no lag information);
- positive controls, with lags that differ by entity as the moderator says: ``linear``, ``nonlinear`` and
  ``two_regime`` (lag 3 where the moderator z >= 0.5, lag K below).

Every panel gets the stratifier ``noisy_moderator`` (the moderator plus noise, Spearman about 0.9 with it and with
the first proxy: under the 0.95 circularity threshold one proxy at a time) beside the DGP's ``latent_z`` and
``noise``.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from acgate import audit, dgp, statistics
from acgate.baselines import persistence
from acgate.config import Params
from acgate.lags import lag_frame
from acgate.layout import audit_dir, method_dir, panel_dir
from acgate.panel import SPLITS, Panel
from acgate.runner import run_method
from acgate.runs import atomic_write, manifest, write_json
from acgate.verdicts import FAMILIES, LAYERS

MODERATOR_NOISE_SD = 0.12  # sd of the noise on the moderator z ~ U(0, 1) in the stratifier noisy_moderator
SHUFFLE_SALT = 15_485_863  # the shuffled_proxies scenario's permutation, apart from the comparator method's


@dataclass(frozen=True)
class Scenario:
    control: str  # negative or positive
    dgp_scenario: str  # the lag-centre map of acgate.dgp
    target: str = "dgp"  # dgp, noise or constant
    shuffle_proxies: bool = False
    trained: bool = True
    description: str = ""


SCENARIOS = {
    "homogeneous_lags": Scenario("negative", "constant", description="every entity has lag centre 5"),
    "noise_target": Scenario("negative", "linear", target="noise", description="target is N(0, 1) noise"),
    "constant_target": Scenario("negative", "linear", target="constant", description="target is 1 everywhere"),
    "shuffled_proxies": Scenario("negative", "linear", shuffle_proxies=True,
                                 description="linear lags, proxies permuted across entities"),
    "lag_free": Scenario("negative", "linear", trained=False,
                         description="no training: k* = 5 + z-score of a random projection of the proxies"),
    "linear": Scenario("positive", "linear", description="lag centre 3 + 7(1 - z)"),
    "nonlinear": Scenario("positive", "nonlinear", description="lag centre 10(1 - z)^2"),
    "two_regime": Scenario("positive", "two_regime", description="lag centre 3 for z >= 0.5, K below"),
}


def draw_panel(name: str, params: Params, panel_seed: int) -> Panel:
    """One panel of scenario ``name``; all randomness from ``panel_seed``."""
    scenario = SCENARIOS[name]
    cfg = dataclasses.replace(params.synthetic, scenario=scenario.dgp_scenario)
    panel = dgp.simulate(cfg, panel_seed, params.split.val_start, params.split.test_start)
    rng = np.random.default_rng([panel_seed, 1])  # apart from the DGP's own stream
    z = panel.truth["z"]
    panel.stratifiers["noisy_moderator"] = z + rng.normal(0, MODERATOR_NOISE_SD, len(z))
    if scenario.target == "noise":
        panel.Y = rng.normal(0, 1, panel.Y.shape).astype(np.float32)
    elif scenario.target == "constant":
        panel.Y = np.ones_like(panel.Y)
    if scenario.shuffle_proxies:
        panel = panel.with_shuffled_proxies(panel_seed, SHUFFLE_SALT)[0]
    return panel


LAG_FREE_ROLES = {method: role for reference, twins in FAMILIES.items()  # each family's untrained stand-ins
                  for method, role in ((reference, "reference"), (twins.shared, "shared"),
                                       (twins.shuffled, "shuffled"))}


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
        atomic_write(out / "predictions.csv", lambda f: preds.to_csv(f, index=False))
        atomic_write(out / "lags.csv", lambda f, table=table: table.to_csv(f, index=False))
        atomic_write(out / "history.csv", lambda f: f.write("epoch,train_loss,recon_loss,val_loss\n"))  # no training
        write_json(out / "manifest.json", manifest(params.to_dict(), seed, "none", method=method,
                                                   note="lag-free control, not trained"))
        write_json(out / "metrics.json", {"params_hash": params.digest(), "panel_digest": panel.digest(),
                                          "note": "lag-free control, not trained",
                                          **{split: {"n": int((preds.split == split).sum())} for split in SPLITS}})


def run_replicate(name: str, replicate: int, params: Params, root: Path) -> list[dict]:
    """Train (or, for lag_free, write) every seed of one replicate under ``root`` and audit it; returns one record
    per reference (AC-GATE, the moderated distributed lag) with both rule sets' verdicts, the L2 test alone, and the
    seconds the replicate took."""
    start = time.perf_counter()
    scenario = SCENARIOS[name]
    params = dataclasses.replace(params, domain=f"{name}_r{replicate:03d}")
    runs_root, data_root = Path(root) / "runs", Path(root) / "data"
    projection = np.random.default_rng([replicate, 2]).normal(size=len(dgp.PROXY_NAMES))
    for seed in range(params.n_seeds):
        # the lag-free control shares one panel across seeds (like a real panel); the others draw one per seed
        panel_seed = 1_000 * (replicate + 1) + (0 if not scenario.trained else seed)
        panel = draw_panel(name, params, panel_seed)
        panel.save(panel_dir(data_root, params.domain, seed))
        if not scenario.trained:
            _write_lag_free_runs(panel, params, seed, runs_root, projection)
            continue
        for method in params.methods:
            run_method(panel, params, method, seed, runs_root, log=lambda _: None)
    result = audit.audit_domain(params, runs_root, data_root)
    result.write(audit_dir(runs_root, params.domain))
    seconds = round(time.perf_counter() - start, 2)
    records = []
    for reference, found in result.verdicts_by_reference.items():
        record = {"scenario": name, "control": scenario.control, "replicate": replicate, "reference": reference,
                  "seconds": seconds}
        for rule in ("paper", "calibrated"):
            record.update({f"{rule}_{layer}": found[rule][layer]["verdict"] for layer in LAYERS})
        summary = result.l2_summary[result.l2_summary.method == reference]
        alone = (~summary.circular_joint & (summary.p_holm < params.audit.alpha)).any()
        record["L2_test_alone"] = "supported" if alone else "not certified"
        record["kstar_sd"] = float(result.l1[result.l1.method == reference].kstar_sd.mean())
        records.append(record)
    return records


HEARTBEAT = 5.0  # seconds: with replicates in worker processes, a line at least this often while they run


def run_replicates(plan: list[tuple[str, int]], params: Params, root: Path, jobs: int = 1,
                   log: Callable[[str], None] = print) -> pd.DataFrame:
    """Every (scenario, replicate) of ``plan`` (in ``jobs`` fresh processes when more than one), one progress line
    per finished replicate (and, with worker processes, one every :data:`HEARTBEAT` seconds without one); one
    record per replicate (see :func:`run_replicate`)."""
    records, start = [], time.perf_counter()
    log(f"[calibration 0/{len(plan)}] {len(plan)} replicates, {max(jobs, 1)} at a time")

    done = 0

    def progress(found: list[dict]) -> None:
        nonlocal done
        records.extend(found)
        done += 1
        elapsed, left = time.perf_counter() - start, len(plan) - done
        verdicts = ", ".join(f"{r['reference']} L1 {r['calibrated_L1']}, L2 {r['calibrated_L2']}" for r in found)
        log(f"[calibration {done}/{len(plan)}] {found[0]['scenario']} replicate {found[0]['replicate']}: "
            f"calibrated {verdicts} ({found[0]['seconds']:.0f} s; {elapsed / 60:.1f} min so far, about "
            f"{elapsed / done * left / 60:.1f} min left)")

    if jobs <= 1:
        for name, replicate in plan:
            progress(run_replicate(name, replicate, params, root))
    else:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            running = {pool.submit(run_replicate, n, r, params, root) for n, r in plan}
            while running:
                finished, running = wait(running, timeout=HEARTBEAT, return_when=FIRST_COMPLETED)
                for future in finished:
                    progress(future.result())
                if not finished:
                    log(f"[calibration {done}/{len(plan)}] {min(jobs, len(running))} replicates running "
                        f"({(time.perf_counter() - start) / 60:.1f} min so far)")
    return pd.DataFrame(records).sort_values(["control", "scenario", "replicate", "reference"], kind="stable",
                                             ignore_index=True)


def calibration_table(replicates: pd.DataFrame) -> pd.DataFrame:
    """Per scenario, reference, rule and layer: how many replicates were audited, the share "supported" and its 95 %
    Clopper-Pearson interval. ``L2 test alone`` is the calibrated L2 test without the L1 and seed-agreement gates."""
    rows = []
    columns = [(rule, layer, f"{rule}_{layer}") for rule in ("paper", "calibrated") for layer in LAYERS]
    columns.append(("calibrated", "L2 test alone", "L2_test_alone"))
    for (scenario, reference), g in replicates.groupby(["scenario", "reference"], sort=False):
        for rule, layer, column in columns:
            supported = int((g[column] == "supported").sum())
            low, high = statistics.clopper_pearson(supported, len(g))
            rows.append({"scenario": scenario, "control": g.control.iloc[0], "reference": reference, "rule": rule,
                         "layer": layer,
                         "replicates": len(g), "supported": supported, "share_supported": supported / len(g),
                         "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows)


def calibration_figure(table: pd.DataFrame) -> plt.Figure:
    """Share of replicates "supported" with its 95 % interval, per scenario, for L1 and L2: AC-GATE under the paper's
    rules and the calibrated ones, and the moderated distributed lag under the calibrated ones; negative controls
    above, positive controls below."""
    layers = ("L1", "L2")
    shown = table[table.layer.isin(layers)]
    order = list(dict.fromkeys(shown.sort_values("control", kind="stable").scenario))
    series = [(reference, rule) for reference, rule in (("acgate", "paper"), ("acgate", "calibrated"),
                                                        ("moderated_dl", "calibrated"))
              if ((shown.reference == reference) & (shown.rule == rule)).any()]
    colours = dict(zip(series, sns.color_palette("colorblind", len(series)), strict=True))
    fig, axes = plt.subplots(1, len(layers), figsize=(7.6, 0.5 * len(order) + 1.2), sharey=True)
    for ax, layer in zip(axes, layers, strict=True):
        for n, (reference, rule) in enumerate(series):
            rows = shown[(shown.layer == layer) & (shown.rule == rule) & (shown.reference == reference)]
            rows = rows.set_index("scenario").reindex(order)
            y = np.arange(len(order)) + 0.22 * (n - (len(series) - 1) / 2)
            ax.errorbar(rows.share_supported, y, xerr=[rows.share_supported - rows.ci_low,
                                                       rows.ci_high - rows.share_supported],
                        fmt="o", ms=4, capsize=2, color=colours[(reference, rule)], label=f"{reference}, {rule} rule")
        negatives = int((shown.drop_duplicates("scenario").control == "negative").sum())
        ax.axhline(negatives - 0.5, color="grey", lw=0.8)
        ax.set(xlim=(-0.03, 1.03), title=layer)
        ax.grid(axis="x", lw=0.4, alpha=0.5)
    labels = [f"{s} ({SCENARIOS[s].control})" if s in SCENARIOS else s for s in order]
    axes[0].set_yticks(np.arange(len(order)), [label.replace("_", " ") for label in labels])
    axes[0].invert_yaxis()
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8, frameon=False)
    fig.supxlabel('share of replicates "supported" (95 % Clopper-Pearson interval)', fontsize=10)
    fig.suptitle("Audit calibration: negative controls must stay at 0, positive controls near 1", fontsize=10)
    fig.tight_layout()
    return fig
