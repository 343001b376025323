"""Which lag structure can each reference recover on surrogates of a panel? k* of the paper's AC-GATE, the moderated
distributed lag and the neural moderated distributed lag against the surrogates' true lags.

    python -m acgate.tools.lag_recovery economics --jobs 2          # 20 surrogates of each default scenario
    python -m acgate.tools.lag_recovery energy --shifted 0 --scenarios proxy_lags_two   # one driver's lags move
    python -m acgate.tools.lag_recovery synthetic_interaction        # the domain's DGP, seeds 0-19
    python -m acgate.tools.lag_recovery synthetic_null --overlay centre3.yaml --out runs/lag_recovery/centre3
                                                  # centre3.yaml: "synthetic: {constant_centre: 3}", another DGP

For each surrogate of the panel-matched study (:mod:`acgate.audit.panel_matched`: the same seeds a study draws) it
fits each method once (seed 0; AC-GATE with the domain's model and training settings) and compares its k* with the
truth, each entity's k* of its true curves: the Spearman correlation (where the true lags differ), the mean absolute
error, the bias (mean k* less mean truth) and sd(k*) beside the truth's. The distributed lags give each feature its
own curve, so their k* per feature (``classical.feature_lags``) are compared with each feature's truth too; AC-GATE's
one gate gives every feature the same k*. The surrogates' lags move along one direction of the proxies (the study's
proxy score), so a k* that merely follows that direction ranks them without reading any lag: the Spearman of k* with
the direction itself (``direction_spearman``), on the surrogates whose lags are the same for all (``one_curve``), is
what a method reads without lags, and its recovery counts only beyond it.

With ``--shifted`` the scenarios' lag shifts move only those features' curves (a panel with two drivers, one whose
lags follow the proxies and one whose lags are the same for all). A synthetic domain's panels are its DGP's (seeds 0,
1, ...), scored against the DGP's mean lags.

Writes ``<out>/<domain>_lag_recovery.csv`` (one row per surrogate and method), ``<out>/<domain>_lag_recovery_summary
.csv`` (per scenario and method: medians and means over the surrogates) and ``<out>/<domain>_lag_recovery.json``
(the settings, params, git SHA, packages, machine, load average and minutes), and prints the summary.
"""

from __future__ import annotations

import argparse
import functools
import time
from pathlib import Path

import numpy as np
import pandas as pd

from acgate import processes
from acgate.audit import panel_matched, surrogates
from acgate.config import CURVE_METHODS, NEURAL_METHODS, load_params
from acgate.data import dgp
from acgate.data.panel import Panel
from acgate.data.prep import prepared_panel
from acgate.layout import project_root
from acgate.models import runner
from acgate.models.classical import feature_lags, lag_profile
from acgate.models.lags import effective_lag
from acgate.models.train import fit
from acgate.runs import machine, manifest, write_csv, write_json
from acgate.statistics import spearman

METHODS = ("moderated_dl", "neural_dl", "acgate")
SCENARIOS = ("one_curve", "proxy_lags_one", "proxy_lags_two")
# the methods it fits: every method with a k* but Grouped ARDL (no lag table of one curve per entity) and the shuffled
# twins (the runner permutes their proxies, this tool does not)
FITTED = tuple(m for m in (*NEURAL_METHODS, *CURVE_METHODS) if m not in runner.SHUFFLED_METHODS)


def method_lags(panel: Panel, params, method: str) -> tuple[np.ndarray, np.ndarray | None]:
    """k* (N,) of ``method`` (one of :data:`FITTED`) fitted on ``panel`` (seed 0), and its k* per feature (N, F)
    where it has curves."""
    if method in CURVE_METHODS:
        found = runner.fit_lag_curves(panel, params, method, 0)
        return found.lag_table().kstar.to_numpy(), feature_lags(found.curves)
    return runner.lag_table(fit(panel, params, method, 0, log=lambda _: None), panel).kstar.to_numpy(), None


def recovery(kstar: np.ndarray, truth: np.ndarray) -> dict:
    """How k* (N,) meets the truth (N,): Spearman (NaN where the truth is the same for all), MAE, bias, sds."""
    varies = np.ptp(truth) > 1e-9 and np.ptp(kstar) > 1e-12
    return {"spearman": spearman(kstar, truth) if varies else np.nan, "mae": float(np.mean(np.abs(kstar - truth))),
            "bias": float(kstar.mean() - truth.mean()), "kstar_sd": float(kstar.std()), "truth_sd": float(truth.std())}


def surrogate_rows(source: surrogates.Source | None, params, methods: tuple[str, ...],
                   shifted: tuple[int, ...] | None, item: tuple[str, int]) -> list[dict]:
    """One row per method of the panel ``item`` (scenario, replicate): a surrogate of ``source``'s panel, or with no
    source a panel of the domain's synthetic DGP (seed: the replicate); its recovery of the pooled k* and, for the
    distributed lags, of each feature's."""
    name, replicate = item
    if source is None:
        panel = dgp.simulate(params.synthetic, replicate, params.split.val_start, params.split.test_start)
        truth = panel.truth["dgp_mean_lag"]
        feature_truth = np.repeat(truth[:, None], panel.X.shape[2], axis=1)  # the DGP moves every feature's lags
        direction = None
    else:  # the surrogates' lags move along the proxies' direction: a k* may rank that direction without lags
        panel = surrogates.draw(source, name, panel_matched.surrogate_seed(name, replicate), shifted)
        curves = surrogates.surrogate_curves(source, name, shifted)
        truth, feature_truth = effective_lag(lag_profile(curves)), feature_lags(curves)
        direction = source.proxy_score
    rows = []
    for method in methods:
        start = time.perf_counter()
        kstar, per_feature = method_lags(panel, params, method)
        row = {"scenario": name, "replicate": replicate, "method": method, **recovery(kstar, truth),
               "direction_spearman": (spearman(kstar, direction) if direction is not None and np.ptp(kstar) > 1e-12
                                      else np.nan),
               "seconds": round(time.perf_counter() - start, 3)}
        for f, feature in enumerate(panel.feature_names):
            found = recovery(kstar if per_feature is None else per_feature[:, f], feature_truth[:, f])
            row.update({f"{feature}:spearman": found["spearman"], f"{feature}:mae": found["mae"]})
        rows.append(row)
    return rows


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per scenario and method: the means over the surrogates, the median Spearman, the sd of both Spearman
    correlations (with the truth, with the proxies' direction) and the mean absolute Spearman with the direction."""
    measures = [c for c in table.columns if c not in ("scenario", "replicate", "method")]
    grouped = table.groupby(["scenario", "method"], sort=False)
    found = grouped[measures].mean().add_prefix("mean_")
    found.insert(0, "sd_direction_spearman", grouped["direction_spearman"].std())
    found.insert(0, "mean_abs_direction_spearman", grouped["direction_spearman"].apply(lambda v: v.abs().mean()))
    found.insert(0, "sd_spearman", grouped["spearman"].std())
    found.insert(0, "median_spearman", grouped["spearman"].median())
    found.insert(0, "panels", grouped.size())
    return found.round(3).reset_index()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m acgate.tools.lag_recovery", description=__doc__.split("\n\n")[0])
    parser.add_argument("domain", help="a domain with a params file: a data domain (economics, energy, yours), whose "
                        "surrogates are drawn, or a synthetic one (synthetic_interaction), whose DGP is")
    parser.add_argument("--replicates", type=int, default=20, help="surrogates of each scenario")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS),
                        help="scenarios of acgate.audit.surrogates.SCENARIOS (a synthetic domain: its own DGP's)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=FITTED, metavar="METHOD",
                        help=f"methods fitted on each panel, of: {', '.join(FITTED)}")
    parser.add_argument("--shifted", type=int, nargs="*", default=None,
                        help="indices of the features whose lags the scenarios move (none given: all)")
    parser.add_argument("--overlay", default=None,
                        help="a params file laid over the domain's (as params/smoke.yaml is): other model, training "
                        "or DGP settings; the record's params are the result")
    parser.add_argument("--data-dir", default="data", help="the prepared panel is read from <data-dir>/processed/")
    parser.add_argument("--out", default="runs/lag_recovery", help="folder of the output files")
    parser.add_argument("--jobs", type=int, default=1, help="surrogates fitted at once, one process each")
    args = parser.parse_args(argv)
    root = project_root()
    params = load_params(root / "params" / f"{args.domain}.yaml", args.overlay)
    shifted = None if args.shifted is None else tuple(args.shifted)
    if shifted == ():
        parser.error("--shifted: name the features whose lags move (indices from 0), or leave the option out")
    if params.kind == "synthetic":
        if shifted is not None:
            parser.error("--shifted: a synthetic domain's DGP moves every feature's lags; name a data domain")
        args.scenarios = [params.synthetic.scenario]  # its DGP's, whatever was asked; so the record says
        source, plan = None, [(params.synthetic.scenario, r) for r in range(args.replicates)]
    else:
        source = surrogates.fit_source(prepared_panel(params, root / args.data_dir), params)
        n_feat = source.curve.shape[0]
        if shifted is not None and not all(0 <= f < n_feat for f in shifted):
            parser.error(f"--shifted: feature indices run from 0 to {n_feat - 1} "
                         f"({', '.join(source.panel.feature_names)})")
        plan = [(name, r) for name in source.scenarios(args.scenarios) for r in range(args.replicates)]
    record = {**manifest(params.to_dict(), seed=0, device="cpu"), "settings": vars(args), "machine": machine()}
    start = time.perf_counter()
    work = functools.partial(surrogate_rows, source, params, tuple(args.methods), shifted)
    rows = processes.in_order(work, plan, args.jobs, f"{args.domain} panels", every=10)
    table = pd.DataFrame([row for group in rows for row in group])
    out, stem = Path(args.out), f"{args.domain}_lag_recovery" + ("" if shifted is None else "_shifted")
    write_csv(out / f"{stem}.csv", table, index=False)
    found = summary(table)
    write_csv(out / f"{stem}_summary.csv", found, index=False)
    write_json(out / f"{stem}.json", {**record, "minutes": round((time.perf_counter() - start) / 60, 1)})
    print(found.to_string(index=False))


if __name__ == "__main__":  # run as acgate.tools.lag_recovery, not __main__: the worker processes find the work by name
    from acgate.tools.lag_recovery import main as imported_main

    imported_main()
