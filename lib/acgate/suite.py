"""Run the multi-seed suite through Papermill and summarise it.

    python -m acgate.suite run   --domains synthetic_linear synthetic_nonlinear --jobs 2
    python -m acgate.suite audit --domains synthetic_linear synthetic_nonlinear
    python -m acgate.suite table --domains synthetic_linear synthetic_nonlinear

``run`` executes ``notebooks/03_train.py`` once per domain and seed, keeping the executed notebook
and its log at ``runs/<domain>/seed<NN>/03_train.ipynb``/``.log``. A (domain, seed) whose methods all
have a ``metrics.json`` written with the current parameters is skipped, so an interrupted suite
resumes where it stopped and a changed params file reruns what it touches. Each job runs with one
thread per process, so ``--jobs`` processes do not oversubscribe the cores.

``audit`` executes ``notebooks/04_audit.py`` once per domain into ``runs/<domain>/audit/04_audit.ipynb``.

``table`` writes the L3 recovery summary (mean (sd) over seeds) to ``tables/synthetic_recovery.{csv,md}``
next to the paper's reported figures (``lib/acgate/paper_numbers.yaml``), and the verdict matrix of the
audited domains to ``tables/verdict_matrix.{csv,md}``.
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

from acgate.config import Params, load_params
from acgate.notebook import project_root
from acgate.runs import atomic_write, method_dir

SYNTHETIC_DOMAINS = ("synthetic_linear", "synthetic_nonlinear", "synthetic_null")
SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


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
            if pending(params, seed, runs_root):
                grid.append((domain, seed))
    print(f"suite: {len(grid)} (domain, seed) jobs to run with {jobs} parallel job(s); finished ones are kept",
          flush=True)
    start, failures = time.perf_counter(), []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {}
        for domain, seed in grid:
            output = runs_root / domain / f"seed{seed:02d}" / "03_train.ipynb"
            parameters = {"domain": domain, "seed": seed, "profile_file": profile, "runs_dir": runs_dir,
                          "data_dir": data_dir}
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
    """Domains x layers, each cell the verdict for the reference method, from runs/<domain>/audit/verdicts.json."""
    rows = {}
    for domain in domains:
        path = runs_root / domain / "audit" / "verdicts.json"
        if path.is_file():
            rows[domain] = {layer: cell["verdict"] for layer, cell in json.loads(path.read_text())["verdicts"].items()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("domain").reset_index()


def collect(runs_root: Path, domain: str) -> pd.DataFrame:
    """One row per (seed, method) with a finished run of ``domain``: the flattened metrics.json."""
    rows = []
    for metrics in sorted((runs_root / domain).glob("seed*/*/metrics.json")):
        m = json.loads(metrics.read_text())
        row = {"domain": domain, "seed": int(metrics.parent.parent.name[4:]), "method": metrics.parent.name,
               "test_mse": m["test"]["mse"], "test_r2_by_time": m["test"]["r2_by_time"],
               "kstar_sd": m["lags"]["kstar_sd"], "epochs_run": m["epochs_run"], "best_epoch": m["best_epoch"],
               "seconds": m["seconds"]}
        for truth, l3 in m.get("l3", {}).items():
            row[f"mae_{truth}"], row[f"spearman_{truth}"] = l3["mae"], l3["spearman"]
        rows.append(row)
    return pd.DataFrame(rows)


def paper_numbers() -> dict:
    return yaml.safe_load(resources.files("acgate").joinpath("paper_numbers.yaml").read_text())


def _mean_sd(values: pd.Series) -> str:
    values = values.dropna()
    if values.empty:
        return "undefined (k* constant)"
    return f"{values.mean():.3f} ({values.std(ddof=1) if len(values) > 1 else 0.0:.3f})"


def recovery_table(runs_root: Path, domains: list[str]) -> pd.DataFrame:
    """L0/L3 summary per domain and method, mean (sd) over seeds, with the paper's figures beside ours."""
    paper = paper_numbers()["synthetic"]
    rows = []
    for domain in domains:
        runs = collect(runs_root, domain)
        if runs.empty:
            print(f"table: no finished runs for {domain} under {runs_root}", file=sys.stderr)
            continue
        scenario = domain.removeprefix("synthetic_")
        for method, g in runs.groupby("method", sort=False):
            ref = paper.get(scenario, {}).get(method, {})
            rows.append({
                "domain": domain, "method": method, "seeds": len(g),
                "test MSE": _mean_sd(g.test_mse), "paper task loss": ref.get("task_loss", ""),
                "k* MAE vs lag centre": _mean_sd(g.mae_lag_centre), "paper k* MAE": ref.get("kstar_mae", ""),
                "Spearman vs lag centre": _mean_sd(g.spearman_lag_centre), "paper Spearman": ref.get("spearman", ""),
                "k* MAE vs DGP mean lag": _mean_sd(g.mae_dgp_mean_lag),
                "Spearman vs DGP mean lag": _mean_sd(g.spearman_dgp_mean_lag),
                "k* sd": _mean_sd(g.kstar_sd), "median epochs": float(np.median(g.epochs_run)),
                "median seconds": float(np.median(g.seconds)),
            })
    return pd.DataFrame(rows)


def table(domains: list[str], runs_dir: str, tables_dir: str) -> None:
    root = project_root()
    out = root / tables_dir
    for name, frame in (("synthetic_recovery", recovery_table(root / runs_dir, domains)),
                        ("verdict_matrix", verdict_table(root / runs_dir, domains))):
        atomic_write(out / f"{name}.csv", lambda f, frame=frame: frame.to_csv(f, index=False))
        atomic_write(out / f"{name}.md", lambda f, frame=frame: f.write(frame.to_markdown(index=False) + "\n"))
        print(f"\n{out / name}.md\n{frame.to_markdown(index=False)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m acgate.suite", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "audit", "table"):
        p = sub.add_parser(name)
        p.add_argument("--domains", nargs="+", default=list(SYNTHETIC_DOMAINS), help="params/<domain>.yaml to use")
        p.add_argument("--runs-dir", default="runs", help="run artifacts root, relative to the project root")
    for name in ("run", "audit"):
        sub.choices[name].add_argument("--profile", default="", help="overlay profile, e.g. params/smoke.yaml")
        sub.choices[name].add_argument("--data-dir", default="data", help="data root, relative to the project root")
    run_p = sub.choices["run"]
    run_p.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default: the params file's n_seeds)")
    run_p.add_argument("--jobs", type=int, default=max(1, os.cpu_count() or 1), help="parallel notebook runs")
    sub.choices["table"].add_argument("--tables-dir", default="tables", help="where the summary tables are written")
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args.domains, args.seeds, args.jobs, args.profile, args.runs_dir, args.data_dir)
    elif args.command == "audit":
        audit(args.domains, args.profile, args.runs_dir, args.data_dir)
    else:
        table(args.domains, args.runs_dir, args.tables_dir)


if __name__ == "__main__":
    main()
