"""Run the multi-seed suite through Papermill and summarise it.

    python -m acgate.suite paper                  # all of the below for every domain whose inputs are present
    python -m acgate.suite prep  --domains economics energy
    python -m acgate.suite run   --domains synthetic_linear synthetic_nonlinear --jobs 2
    python -m acgate.suite audit --domains synthetic_linear synthetic_nonlinear
    python -m acgate.suite table --domains synthetic_linear synthetic_nonlinear

``prep`` executes ``notebooks/01_data_prep.py`` for each real domain into
``data/processed/<domain>/01_data_prep.ipynb``.

``run`` executes ``notebooks/03_train.py`` once per domain and seed, keeping the executed notebook
and its log at ``runs/<domain>/seed<NN>/03_train.ipynb``/``.log``. A (domain, seed) whose methods all
have a ``metrics.json`` written with the current parameters is skipped, so an interrupted suite
resumes where it stopped and a changed params file reruns what it touches. Each job runs with one
thread per process, so ``--jobs`` processes do not oversubscribe the cores.

``audit`` executes ``notebooks/04_audit.py`` once per domain into ``runs/<domain>/audit/04_audit.ipynb``.

``table`` writes the L3 recovery summary (mean (sd) over seeds) to ``tables/synthetic_recovery.{csv,md}``
next to the paper's reported figures (``lib/acgate/paper_numbers.yaml``), the real domains' compact summary
(``real_summary``), their L2 tables (``l2_summary``), the proxy-shuffle comparison (``proxy_shuffle``) and the
verdict matrix of the audited domains (``verdict_matrix``), each as CSV and Markdown in ``tables/``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from importlib import resources
from pathlib import Path

import jupytext
import numpy as np
import pandas as pd
import yaml

from acgate import audit as audit_lib
from acgate import sources
from acgate.config import Params, load_params
from acgate.notebook import project_root
from acgate.runs import atomic_write, method_dir

SYNTHETIC_DOMAINS = ("synthetic_linear", "synthetic_nonlinear", "synthetic_null")
REAL_DOMAINS = ("economics", "energy", "economics_proxy_shuffle", "energy_proxy_shuffle")
PAPER_DOMAINS = SYNTHETIC_DOMAINS + REAL_DOMAINS
SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def missing_inputs(params: Params, root: Path) -> str:
    """Why a domain cannot be prepared here ('' when its inputs are present)."""
    if params.data is None:
        return ""
    absent = sources.locate_inputs(params, root)[1]
    if not absent:
        return ""
    hint = "" if params.data.loader == "csv" else " (run `make data`, or set ACGATE_RAW_DIR)"
    return f"{', '.join(map(str, absent))} not found{hint}"


def prep(domains: list[str], profile: str, data_dir: str) -> list[str]:
    """Execute 01_data_prep for each real domain whose inputs are present; returns the domains prepared."""
    root = project_root()
    done = []
    for domain in domains:
        params = load_params(root / "params" / f"{domain}.yaml", root / profile if profile else None)
        if params.data is None:
            continue
        why = missing_inputs(params, root)
        if why:
            print(f"prep {domain}: skipped, {why}", flush=True)
            continue
        start = time.perf_counter()
        output = root / data_dir / "processed" / domain / "01_data_prep.ipynb"
        execute_notebook(root / "notebooks" / "01_data_prep.py", output,
                         {"domain": domain, "profile_file": profile, "data_dir": data_dir}, root / "notebooks")
        report = pd.read_csv(output.parent / "entities.csv")
        print(f"prep {domain}: {int(report.kept.sum())} of {len(report)} entities kept "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
        done.append(domain)
    return done


def pending(params: Params, seed: int, runs_root: Path) -> list[str]:
    """Methods of ``params`` whose run for ``seed`` is missing or was made with other parameters."""
    todo = []
    for method in params.methods:
        metrics = method_dir(runs_root, params.domain, seed, method) / "metrics.json"
        if not metrics.is_file() or json.loads(metrics.read_text()).get("params_hash") != params.digest():
            todo.append(method)
    return todo


def execute_notebook(notebook: Path, output: Path, parameters: dict, cwd: Path) -> None:
    """Convert a percent-format notebook with Jupytext and execute it with Papermill into ``output``;
    the executed copy appears only when the run succeeded (the log is kept either way)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    source = output.with_name(f".{output.stem}.input.ipynb")
    partial = output.with_name(f".{output.stem}.partial.ipynb")
    jupytext.write(jupytext.read(notebook), source)
    cmd = [sys.executable, "-m", "papermill", "--log-level", "WARNING", "--cwd", str(cwd), str(source), str(partial)]
    for key, value in parameters.items():
        cmd += ["-y", yaml.safe_dump({key: value}, default_flow_style=True).strip()]
    with open(output.with_suffix(".log"), "w") as log:
        done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **SINGLE_THREAD})
    source.unlink(missing_ok=True)
    if done.returncode != 0:
        raise RuntimeError(f"{notebook.name} failed with {parameters}; see {output.with_suffix('.log')} "
                           f"and the partly executed {partial}")
    os.replace(partial, output)


def run(domains: list[str], n_seeds: int | None, jobs: int, profile: str, runs_dir: str, data_dir: str) -> None:
    root = project_root()
    runs_root = root / runs_dir
    grid = []
    for domain in domains:
        params = load_params(root / "params" / f"{domain}.yaml", root / profile if profile else None)
        for seed in range(n_seeds if n_seeds is not None else params.n_seeds):
            todo = pending(params, seed, runs_root)
            if todo:
                grid.append((domain, seed, todo))
    print(f"suite: {len(grid)} (domain, seed) jobs to run with {jobs} parallel job(s); finished ones are kept",
          flush=True)
    start, failures = time.perf_counter(), []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {}
        for domain, seed, todo in grid:  # only the missing or stale methods are trained again
            output = runs_root / domain / f"seed{seed:02d}" / "03_train.ipynb"
            parameters = {"domain": domain, "seed": seed, "methods": todo, "profile_file": profile,
                          "runs_dir": runs_dir, "data_dir": data_dir}
            futures[pool.submit(execute_notebook, root / "notebooks" / "03_train.py", output, parameters,
                                root / "notebooks")] = (domain, seed)
        for done, future in enumerate(as_completed(futures), 1):
            domain, seed = futures[future]
            try:
                future.result()
                status = "done"
            except RuntimeError as err:
                failures.append(str(err))
                status = "FAILED"
            print(f"[{done}/{len(grid)}] {domain} seed {seed:02d} {status}  ({time.perf_counter() - start:.0f} s)",
                  flush=True)
    print(f"suite: finished in {time.perf_counter() - start:.0f} s", flush=True)
    if failures:
        raise SystemExit("suite: some jobs failed:\n" + "\n".join(failures))


def audit(domains: list[str], profile: str, runs_dir: str, data_dir: str) -> None:
    root = project_root()
    for domain in domains:
        start = time.perf_counter()
        output = root / runs_dir / domain / "audit" / "04_audit.ipynb"
        execute_notebook(root / "notebooks" / "04_audit.py", output,
                         {"domain": domain, "profile_file": profile, "runs_dir": runs_dir, "data_dir": data_dir},
                         root / "notebooks")
        verdicts = json.loads((output.parent / "verdicts.json").read_text())
        cells = ", ".join(f"{layer} {cell['verdict']}" for layer, cell in verdicts["verdicts"].items())
        print(f"audit {domain}: {cells}  ({time.perf_counter() - start:.0f} s)", flush=True)
        for problem in verdicts["problems"]:
            print(f"  problem: {problem}", flush=True)


def verdict_table(runs_root: Path, domains: list[str]) -> pd.DataFrame:
    """Domains x layers, each cell the verdict for the reference method, from the written audits."""
    audited = [runs_root / d / "audit" for d in domains if (runs_root / d / "audit" / "verdicts.json").is_file()]
    return audit_lib.verdict_matrix([audit_lib.read_audit(a) for a in audited]).reset_index()


def collect(runs_root: Path, domain: str) -> pd.DataFrame:
    """One row per (seed, method) with a finished run of ``domain``: the flattened metrics.json."""
    rows = []
    for metrics in sorted((runs_root / domain).glob("seed*/*/metrics.json")):
        m = json.loads(metrics.read_text())
        row = {"domain": domain, "seed": int(metrics.parent.parent.name[4:]), "method": metrics.parent.name,
               "test_mse": m["test"]["mse"], "test_r2_by_time": m["test"]["r2_by_time"],
               "test_r2_pooled": m["test"]["r2_pooled"], "kstar_sd": m["lags"]["kstar_sd"],
               "omega_entropy": m["lags"]["omega_entropy"], "gate_sensitivity": m["lags"]["gate_sensitivity"],
               "kstar_kind": m["lags"].get("kstar_kind", "structural"),  # runs written before the baselines
               "epochs_run": m["epochs_run"], "best_epoch": m["best_epoch"], "seconds": m["seconds"]}
        for truth, l3 in m.get("l3", {}).items():
            row[f"mae_{truth}"], row[f"spearman_{truth}"] = l3["mae"], l3["spearman"]
        rows.append(row)
    return pd.DataFrame(rows)


UNDEFINED = "undefined (k* or truth constant)"


def paper_numbers() -> dict:
    return yaml.safe_load(resources.files("acgate").joinpath("paper_numbers.yaml").read_text())


def _mean_sd(values: pd.Series, empty: str = "") -> str:
    values = pd.to_numeric(values, errors="coerce").dropna()
    if values.empty:
        return empty
    return f"{values.mean():.3f} ({values.std(ddof=1) if len(values) > 1 else 0.0:.3f})"


def recovery_table(runs_root: Path, domains: list[str]) -> pd.DataFrame:
    """L0/L3 summary per synthetic domain and method, mean (sd) over seeds, with the paper's figures beside ours."""
    paper = paper_numbers()["synthetic"]
    rows = []
    for domain in (d for d in domains if d.startswith("synthetic")):
        runs = collect(runs_root, domain)
        if runs.empty:
            print(f"table: no finished runs for {domain} under {runs_root}", file=sys.stderr)
            continue
        scenario = domain.removeprefix("synthetic_")
        for method, g in runs.groupby("method", sort=False):
            ref = paper.get(scenario, {}).get(method, {})
            if "spearman_lag_centre" not in g:
                continue
            rows.append({
                "domain": domain, "method": method, "seeds": len(g),
                "test MSE": _mean_sd(g.test_mse), "paper task loss": ref.get("task_loss", ""),
                "k* MAE vs lag centre": _mean_sd(g.mae_lag_centre), "paper k* MAE": ref.get("kstar_mae", ""),
                "Spearman vs lag centre": _mean_sd(g.spearman_lag_centre, UNDEFINED),
                "paper Spearman": ref.get("spearman", ""), "k* kind": g.kstar_kind.iloc[0],
                "k* MAE vs DGP mean lag": _mean_sd(g.mae_dgp_mean_lag),
                "Spearman vs DGP mean lag": _mean_sd(g.spearman_dgp_mean_lag, UNDEFINED),
                "k* sd": _mean_sd(g.kstar_sd), "median epochs": pd.to_numeric(g.epochs_run).median(),
                "median seconds": float(np.median(g.seconds)),
            })
    return pd.DataFrame(rows)


def real_table(runs_root: Path, domains: list[str]) -> pd.DataFrame:
    """The paper's compact summary of the real domains: test R2 (per time and pooled), sd of k* (L1), omega
    entropy and gate sensitivity, mean (sd) over seeds, with the paper's R2 and k* sd beside ours."""
    paper = paper_numbers().get("real", {})
    rows = []
    for domain in (d for d in domains if not d.startswith("synthetic")):
        runs = collect(runs_root, domain)
        for method, g in (runs.groupby("method", sort=False) if not runs.empty else []):
            ref = paper.get(domain, {}).get(method, {})
            rows.append({"domain": domain, "method": method, "seeds": len(g),
                         "test R2 (by time)": _mean_sd(g.test_r2_by_time), "paper test R2": ref.get("test_r2", ""),
                         "test R2 (pooled)": _mean_sd(g.test_r2_pooled), "k* kind": g.kstar_kind.iloc[0],
                         "k* sd": _mean_sd(g.kstar_sd),
                         "paper k* sd": ref.get("kstar_sd", ""), "omega entropy": _mean_sd(g.omega_entropy),
                         "gate sensitivity": _mean_sd(g.gate_sensitivity)})
        l0 = runs_root / domain / "audit" / "l0.csv"
        floor = pd.read_csv(l0).query("method == 'persistence'") if l0.is_file() else pd.DataFrame()
        if not floor.empty:  # the same panel in every seed: one value
            rows.append({"domain": domain, "method": "persistence", "seeds": len(floor),
                         "test R2 (by time)": f"{floor.r2_by_time.iloc[0]:.3f}",
                         "test R2 (pooled)": f"{floor.r2_pooled.iloc[0]:.3f}"})
    return pd.DataFrame(rows)


def l2_table(runs_root: Path, domains: list[str]) -> pd.DataFrame:
    """The L2 summaries of the audited real domains, every method and stratifier."""
    frames = []
    for domain in (d for d in domains if not d.startswith("synthetic")):
        path = runs_root / domain / "audit" / "l2_summary.csv"
        if path.is_file():
            frames.append(pd.read_csv(path).assign(domain=domain))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def shuffle_table(runs_root: Path, domains: list[str]) -> pd.DataFrame:
    """Each audited real domain next to its audited proxy-shuffle twin."""
    frames = []
    for domain in domains:
        twin = f"{domain}_proxy_shuffle"
        if twin in domains and all((runs_root / d / "audit" / "verdicts.json").is_file() for d in (domain, twin)):
            frames.append(audit_lib.proxy_shuffle_comparison(audit_lib.read_audit(runs_root / domain / "audit"),
                                                             audit_lib.read_audit(runs_root / twin / "audit")))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def table(domains: list[str], runs_dir: str, tables_dir: str) -> None:
    root = project_root()
    out = root / tables_dir
    runs_root = root / runs_dir
    for name, frame in (("synthetic_recovery", recovery_table(runs_root, domains)),
                        ("real_summary", real_table(runs_root, domains)), ("l2_summary", l2_table(runs_root, domains)),
                        ("proxy_shuffle", shuffle_table(runs_root, domains)),
                        ("verdict_matrix", verdict_table(runs_root, domains))):
        if frame.empty:
            continue
        atomic_write(out / f"{name}.csv", lambda f, frame=frame: frame.to_csv(f, index=False))
        atomic_write(out / f"{name}.md", lambda f, frame=frame: f.write(frame.to_markdown(index=False) + "\n"))
        print(f"\n{out / name}.md\n{frame.to_markdown(index=False)}")


def paper(args: argparse.Namespace) -> None:
    """The main job: prepare the real domains whose inputs are present, train every available domain, audit each,
    and write the tables; domains without inputs are skipped with the reason."""
    root = project_root()
    real = [d for d in args.domains if load_params(root / "params" / f"{d}.yaml").data is not None]
    prepared = prep(real, args.profile, args.data_dir)
    domains = [d for d in args.domains if d not in real or d in prepared]
    run(domains, args.seeds, args.jobs, args.profile, args.runs_dir, args.data_dir)
    audit(domains, args.profile, args.runs_dir, args.data_dir)
    table(domains, args.runs_dir, args.tables_dir)
    skipped = [d for d in args.domains if d not in domains]
    if skipped:
        print(f"\nskipped (inputs absent): {', '.join(skipped)}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m acgate.suite", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("paper", "prep", "run", "audit", "table"):
        p = sub.add_parser(name)
        p.add_argument("--domains", nargs="+", default=list(PAPER_DOMAINS), help="params/<domain>.yaml to use")
        p.add_argument("--runs-dir", default="runs", help="run artifacts root, relative to the project root")
        p.add_argument("--profile", default="", help="overlay profile, e.g. params/smoke.yaml")
        p.add_argument("--data-dir", default="data", help="data root, relative to the project root")
    for name in ("paper", "run"):
        sub.choices[name].add_argument("--seeds", type=int, default=None,
                                       help="seeds 0..N-1 (default: the params file's n_seeds)")
        sub.choices[name].add_argument("--jobs", type=int, default=max(1, os.cpu_count() or 1),
                                       help="parallel notebook runs")
    for name in ("paper", "table"):
        sub.choices[name].add_argument("--tables-dir", default="tables", help="where the summary tables are written")
    args = parser.parse_args(argv)
    if args.command == "paper":
        paper(args)
    elif args.command == "prep":
        prep(args.domains, args.profile, args.data_dir)
    elif args.command == "run":
        run(args.domains, args.seeds, args.jobs, args.profile, args.runs_dir, args.data_dir)
    elif args.command == "audit":
        audit(args.domains, args.profile, args.runs_dir, args.data_dir)
    else:
        table(args.domains, args.runs_dir, args.tables_dir)


if __name__ == "__main__":
    main()
