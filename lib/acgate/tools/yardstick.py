"""The classical L1 beside the GLS F that knows rho, on surrogates of a panel: how much of what the data could
show the calibrated rule shows.

    python -m acgate.tools.yardstick economics      # 100 of one_curve, 200 of each other null, 40 of six spreads
    python -m acgate.tools.yardstick energy --replicates 20 --scenarios proxy_lags_one
    python -m acgate.tools.yardstick economics --critical 0 --scenarios effect_size --nulls 400 --first 200
                                                     # 400 more effect_size surrogates, after an earlier run's 200
                                                     # (its size-adjusted columns are its own nulls' alone: read
                                                     # them from the rows of both runs, summary(rows, alpha))
    python -m acgate.tools.yardstick energy --critical 0 --nulls 0 --replicates 160 --first 40 \
        --scenarios proxy_lags_one --out tables/yardstick --append
                                                     # 160 more 1-lag surrogates added to the committed run's rows:
                                                     # the summary of all of them, this run's record under
                                                     # "added_batches" of the earlier one
    python -m acgate.tools.yardstick economics --noise own --out tables/yardstick/own_shocks
                                                     # the surrogates carry the panel's own shocks, re-timed
                                                     # (acgate.audit.surrogates.own_shocks), not Gaussian noise

For each surrogate of the panel-matched study (:mod:`acgate.audit.panel_matched`, the same seeds a study draws) it
runs the in-sample lag tests the audit runs (:func:`acgate.audit.lag_tests.tested_design`, the same random
stream) and reads the classical reference's calibrated L1 from them: both p below alpha and the GLS fit's sd(k*)
above ``audit.practical_sd`` (the lag tests alone: no training, so no run can rule it out as degenerate), and each
of its two tests alone. Beside them, the yardstick: the GLS F statistics of the same two tests with the surrogates'
true AR(1) coefficient (the entity scales as the tests estimate them, the panel's common shocks left in the noise):

- against the shared curve, its p from the F distribution, and at a size-adjusted critical value: the lowest alpha
  quantile of that p over the null classes of the L1 measured (``one_curve``, ``common_shock`` and ``noise_scale``:
  one lag curve for every entity; ``stratifier_lags_*``: lags that differ along a stratifier's part the proxies do
  not carry, where the curves differ but the proxies hold none of it), so that it rejects in at most alpha of each;
- against the entity-scaled shape, at the lowest alpha quantile of its F-distribution p over the null classes of that
  test (those and ``effect_size``, where the proxies set the size of one curve);
- both size-adjusted tests together, each at its own critical value: at most alpha in every null class, and less
  where the two tests' rejections do not coincide (0-1 % on the real panels' surrogates);
- both tests at one critical value, the lowest alpha quantile over every null class of the larger of the two p
  (``known_rho_joint_size_adjusted``): both reject together in at most alpha of each class, so it spends the whole
  level on the L1's question. Neither is the most powerful test of the two; where they differ, the calibrated L1 is
  to be read against the stronger.

No user can run it (it knows rho and its own null distributions): it is a reference of the same form that holds its
size on every null class measured, not a ceiling (the calibrated L1 may detect more), and it says which of the
calibrated L1's two tests loses what.

Each row also records Pesaran's CD of what the L1's GLS fit leaves of the surrogate (``cd_gls``,
:func:`acgate.audit.noise.tested_dependence`), to set the real panel's among its surrogates'.

Writes ``<out>/<domain>_yardstick.csv`` (one row per surrogate), ``<out>/<domain>_yardstick_summary.csv``
(supported / surrogates per scenario with 95 % Clopper-Pearson intervals; the surrogates' CD and how many reach the
panel's) and ``<out>/<domain>_yardstick.json`` (the settings, params, git SHA, packages, machine, load average,
minutes and the panel's CD, ``panel_cd_gls``), and prints the summary.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from acgate import processes
from acgate.audit import gls, lag_tests, panel_matched, surrogates
from acgate.config import load_params
from acgate.data.prep import prepared_panel
from acgate.layout import project_root
from acgate.runs import machine, manifest, write_csv, write_json

NULL = "one_curve"  # the null class whose surrogates --critical counts
STRATIFIER_NULLS = tuple(f"stratifier_lags_{word}" for word in surrogates.STRATIFIER_SPREADS)
# The null classes of each of the calibrated L1's two tests, whose surrogates set its size-adjusted critical value:
# one lag curve for every entity, or lags that differ along what the proxies do not carry (the L1's truth there is
# "not supported", though the curves differ: an F against the shared curve rejects there unless adjusted for it)
SHARED_NULLS = (NULL, "common_shock", "noise_scale", *STRATIFIER_NULLS)
SCALED_NULLS = (*SHARED_NULLS, "effect_size")  # ... or one curve whose size the proxies set
POWER = tuple(f"proxy_lags_{word}" for word in surrogates.SPREADS)  # every spread of the studies' power grid


def surrogate_row(source: surrogates.Source, name: str, replicate: int, cfg) -> dict:
    """The lag tests of one surrogate, the calibrated L1 they give, and the yardstick's F and p."""
    panel = surrogates.draw(source, name, panel_matched.surrogate_seed(name, replicate))
    tested = lag_tests.tested_design(panel, source.max_lag, cfg.alpha)
    if tested is None:
        raise ValueError(f"surrogate {replicate} of {name}: no target step with a full lag window")
    design, q, errors, shocks = tested
    row, _ = gls.interaction_test(design, q, errors, cfg.permutations, lag_tests.stream(cfg, 0))
    known = replace(errors, rho=source.rho)
    oracle, _ = gls.interaction_test(design, q, known, 0, lag_tests.stream(cfg, 0), draws=0)
    scaled_df = oracle["rows"] - oracle["entities"] * (1 + design.U.shape[2]) - oracle["df_vs_entity_scaled"]
    return {"scenario": name, "replicate": replicate, "rho": row["rho"], "true_rho": source.rho,
            "p_vs_entity_scaled": row["p_vs_entity_scaled"], "p_vs_shared": row["p_vs_shared"],
            "kstar_sd": row["kstar_sd"], "cd_gls": shocks["cd_gls"],
            "supported": bool(row["p_vs_entity_scaled"] < cfg.alpha and row["p_vs_shared"] < cfg.alpha
                              and float(row["kstar_sd"] > cfg.practical_sd) >= cfg.l1_min_share),
            "known_rho_f": oracle["f_vs_shared"],
            "known_rho_p": float(stats.f.sf(oracle["f_vs_shared"], oracle["df_vs_shared"], oracle["df_residual"])),
            "known_rho_scaled_f": oracle["f_vs_entity_scaled"],
            "known_rho_scaled_p": float(stats.f.sf(oracle["f_vs_entity_scaled"], oracle["df_vs_entity_scaled"],
                                                   scaled_df))}


def surrogate_plan(source: surrogates.Source, scenarios: list[str], critical: int, nulls: int, replicates: int,
                   first: int = 0) -> list[tuple[str, int]]:
    """(scenario, replicate) of every surrogate to test: ``critical`` of one_curve from 0, and of each other scenario
    of ``scenarios`` that the source has, ``nulls`` (a null) or ``replicates`` (a positive) from ``first``."""
    count = {"negative": nulls, "positive": replicates}
    return [(NULL, r) for r in range(critical)] + [
        (name, r) for name in source.scenarios(scenarios) if name != NULL
        for r in range(first, first + count[surrogates.SCENARIOS[name].control])]


def appended(earlier: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of an earlier run and a later batch's, each scenario's together in the earlier order (new scenarios
    last) and by replicate; a surrogate in both stops with their names (a batch repeats an earlier run's seeds
    unless ``--first`` starts it after them)."""
    both = pd.concat([earlier, rows], ignore_index=True)
    repeated = both[both.duplicated(["scenario", "replicate"])]
    if not repeated.empty:
        named = ", ".join(f"{r.scenario} {r.replicate}" for r in repeated.head(5).itertuples())
        raise ValueError(f"--append: {len(repeated)} surrogates are already in the earlier run ({named}); start the "
                         "batch after them with --first")
    order = {name: i for i, name in enumerate(dict.fromkeys(both.scenario))}
    return both.sort_values(["scenario", "replicate"], key=lambda c: c.map(order) if c.name == "scenario" else c,
                            kind="stable").reset_index(drop=True)


def _row(source: surrogates.Source, cfg, item: tuple[str, int]) -> dict:
    return surrogate_row(source, *item, cfg)


def _critical(rows: pd.DataFrame, column: str, nulls: tuple[str, ...], alpha: float) -> float:
    """The lowest alpha quantile of ``column`` over the ``nulls`` scenarios present with a value (NaN: none is)."""
    found = [rows[column][rows.scenario == name].quantile(alpha) for name in nulls]
    found = [value for value in found if np.isfinite(value)]
    return min(found) if found else float("nan")


def summary(rows: pd.DataFrame, alpha: float, panel_cd: float = float("nan")) -> pd.DataFrame:
    """Supported / surrogates per scenario: the calibrated L1 and each of its two tests alone; the yardstick against
    the shared curve by the F distribution and at its size-adjusted critical value (over the classes of
    :data:`SHARED_NULLS` present, at most alpha in each by construction; left out where none is), against the
    entity-scaled shape size-adjusted over :data:`SCALED_NULLS` (the same), both size-adjusted tests together, and
    both at one critical value over :data:`SCALED_NULLS` of the larger p; each with its Clopper-Pearson interval.
    Beside them, Pesaran's CD of what the tests' GLS fit leaves (``cd_gls``): its mean and sd over the scenario's
    surrogates, and in how many it is at least ``panel_cd``, the real panel's (absent without ``panel_cd``; a
    surrogate without a CD counts as not reaching it)."""
    critical = _critical(rows, "known_rho_p", SHARED_NULLS, alpha)
    scaled = _critical(rows, "known_rho_scaled_p", SCALED_NULLS, alpha)
    rows = rows.assign(known_rho_larger_p=np.maximum(rows.known_rho_p, rows.known_rho_scaled_p))
    joint = _critical(rows, "known_rho_larger_p", SCALED_NULLS, alpha)
    out = []
    for name, group in rows.groupby("scenario", sort=False):
        n = len(group)
        shared_adjusted, scaled_adjusted = group.known_rho_p < critical, group.known_rho_scaled_p < scaled
        counts = {"calibrated_l1": int(group.supported.sum()), "vs_shared": int((group.p_vs_shared < alpha).sum()),
                  "vs_entity_scaled": int((group.p_vs_entity_scaled < alpha).sum()),
                  "known_rho_f": int((group.known_rho_p < alpha).sum())}
        if np.isfinite(critical):
            counts["known_rho_f_size_adjusted"] = int(shared_adjusted.sum())
        if np.isfinite(scaled):
            counts["known_rho_scaled_f_size_adjusted"] = int(scaled_adjusted.sum())
        if np.isfinite(critical) and np.isfinite(scaled):
            counts["known_rho_both_size_adjusted"] = int((shared_adjusted & scaled_adjusted).sum())
        if np.isfinite(joint):
            counts["known_rho_joint_size_adjusted"] = int((group.known_rho_larger_p < joint).sum())
        line = {"scenario": name, "replicates": n, "size_adjusted_critical_p": critical,
                "scaled_size_adjusted_critical_p": scaled, "joint_size_adjusted_critical_p": joint}
        if "cd_gls" in group:
            line.update({"cd_gls_mean": round(group.cd_gls.mean(), 3), "cd_gls_sd": round(group.cd_gls.std(), 3)})
            if np.isfinite(panel_cd):
                line["cd_gls_at_least_panel"] = int((group.cd_gls >= panel_cd).sum())
        for key, k in counts.items():
            interval = stats.binomtest(k, n).proportion_ci(method="exact")
            line.update({key: k, f"{key}_low": round(interval.low, 4), f"{key}_high": round(interval.high, 4)})
        out.append(line)
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m acgate.tools.yardstick", description=__doc__.split("\n\n")[0])
    parser.add_argument("domain", help="a data domain with a params file (economics, energy, yours)")
    parser.add_argument("--replicates", type=int, default=40, help="surrogates of each positive scenario")
    parser.add_argument("--nulls", type=int, default=200, help="surrogates of each null scenario but one_curve")
    parser.add_argument("--critical", type=int, default=100,
                        help="surrogates of one_curve (one of the null classes that set the critical values)")
    parser.add_argument("--scenarios", nargs="*", default=[*SCALED_NULLS[1:], *POWER],
                        help="scenarios besides one_curve (acgate.audit.surrogates.SCENARIOS; none named: all)")
    parser.add_argument("--first", type=int, default=0,
                        help="the first surrogate of each scenario but one_curve (a later batch, apart from an earlier "
                        "run's 0..first-1; the study's seeds of the same surrogates)")
    parser.add_argument("--noise", choices=("gaussian", "own"), default="gaussian",
                        help="the surrogates' noise: Gaussian AR(1) with the panel's common factor (the study's), or "
                        "the panel's own shocks re-timed (acgate.audit.surrogates.own_shocks)")
    parser.add_argument("--data-dir", default="data", help="the prepared panel is read from <data-dir>/processed/")
    parser.add_argument("--out", default="runs/yardstick", help="folder of the two CSV files (from the current folder)")
    parser.add_argument("--jobs", type=int, default=1, help="surrogates tested at once, one process each")
    parser.add_argument("--append", action="store_true",
                        help="add this run's rows to those of an earlier run in --out (the summary read from all of "
                        "them, this run's record under the earlier one's added_batches)")
    args = parser.parse_args(argv)
    if args.first < 0:
        parser.error(f"--first {args.first}: surrogates are numbered from 0")
    out = Path(args.out)
    paths = {kind: out / f"{args.domain}_yardstick{kind}" for kind in (".csv", "_summary.csv", ".json")}
    if args.append and not (paths[".csv"].is_file() and paths[".json"].is_file()):
        parser.error(f"--append: no earlier run in {out} ({paths['.csv'].name} and {paths['.json'].name})")
    if args.append:
        earlier_noise = json.loads(paths[".json"].read_text()).get("settings", {}).get("noise", "gaussian")
        if earlier_noise != args.noise:
            parser.error(f"--append --noise {args.noise}: the earlier run in {out} has --noise {earlier_noise}")
    root = project_root()
    params = load_params(root / "params" / f"{args.domain}.yaml")
    panel = prepared_panel(params, root / args.data_dir)
    source = surrogates.fit_source(panel, params)
    source = surrogates.own_shocks(source) if args.noise == "own" else source
    tested = lag_tests.tested_design(panel, source.max_lag, params.audit.alpha)
    panel_cd = float("nan") if tested is None else tested[3]["cd_gls"]
    plan = surrogate_plan(source, args.scenarios, args.critical, args.nulls, args.replicates, args.first)
    record = {**manifest(params.to_dict(), seed=-1, device="cpu"), "settings": vars(args), "machine": machine(),
              "panel_cd_gls": panel_cd}
    start = time.perf_counter()
    rows = processes.in_order(functools.partial(_row, source, params.audit), plan, args.jobs,
                              f"{args.domain} surrogates")
    table = pd.DataFrame(rows)
    record["minutes"] = round((time.perf_counter() - start) / 60, 1)
    if args.append:
        table = appended(pd.read_csv(paths[".csv"]), table)
        earlier = json.loads(paths[".json"].read_text())
        batch = {key: record[key] for key in ("created_utc", "git_sha", "machine", "minutes", "settings")}
        record = {**earlier, "added_batches": [*earlier.get("added_batches", []), batch]}
    write_csv(paths[".csv"], table, index=False)
    found = summary(table, params.audit.alpha, record["panel_cd_gls"])
    write_csv(paths["_summary.csv"], found, index=False)
    write_json(paths[".json"], record)
    print(found.to_string(index=False))


if __name__ == "__main__":  # run as acgate.tools.yardstick, not __main__: the worker processes find _row by name
    from acgate.tools.yardstick import main as imported_main

    imported_main()
