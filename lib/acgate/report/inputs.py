"""What the report reads: the written audits of the domains, each run's metrics.json flattened to a row, and the
numbers the paper reports (``paper_numbers.yaml``), with the paper's method order that every table and figure
follows. The table builders (:mod:`acgate.report.paper_tables`), the figures (:mod:`acgate.report.figures`) and the
reproduction table (:mod:`acgate.report.reproduction`) read through it.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pandas as pd
import yaml

from acgate.audit import domain_audit as audit_lib
from acgate.config import METHODS
from acgate.layout import audit_dir, method_dir
from acgate.runs import reading


def paper_numbers() -> dict:
    """The figures the paper reports (``lib/acgate/report/paper_numbers.yaml``)."""
    return yaml.safe_load(resources.files("acgate.report").joinpath("paper_numbers.yaml").read_text())


def paper_scenarios(paper: dict | None = None) -> list[str]:
    """The paper's synthetic scenarios as domain names, in its order (synthetic_linear, synthetic_nonlinear): the
    evidence figure's recovery panel shows these, and the reproduction table has rows for each one run."""
    paper = paper or paper_numbers()
    return [f"synthetic_{s}" for s in paper["synthetic"]]


def paper_domains(paper: dict | None = None) -> set[str]:
    """The domains the paper reports: its synthetic scenarios, its real panels and their proxy-shuffle twins."""
    paper = paper or paper_numbers()
    return (set(paper_scenarios(paper)) | set(paper["real"])
            | {f"{d}_proxy_shuffle" for d in paper["real"]})


def of_kind(results: dict[str, audit_lib.AuditResult], kind: str) -> list[str]:
    """The audited domains of one kind ("synthetic", "data" or "proxy_shuffle"), from their params."""
    return [d for d, r in results.items() if r.kind == kind]


def metrics_row(metrics_file: Path) -> dict:
    """One run's metrics.json flattened to the columns the tables summarise; a run folder that another process is
    writing, or whose metrics.json is gone, is :class:`acgate.runs.RunFolderBusy`."""
    with reading(Path(metrics_file).parent):
        m = json.loads(Path(metrics_file).read_text())
    row = {"test_mse": m["test"]["mse"], "test_r2_by_time": m["test"]["r2_by_time"],
           "test_r2_pooled": m["test"]["r2_pooled"], "kstar_sd": m["lags"]["kstar_sd"],
           "omega_entropy": m["lags"]["omega_entropy"], "gate_sensitivity": m["lags"]["gate_sensitivity"],
           "kstar_kind": m["lags"]["kstar_kind"], "epochs_run": m["epochs_run"], "seconds": m["seconds"]}
    for truth, l3 in m.get("l3", {}).items():
        row[f"mae_{truth}"], row[f"spearman_{truth}"] = l3["mae"], l3["spearman"]
    return row


def collect(runs_root: Path, result: audit_lib.AuditResult) -> pd.DataFrame:
    """One row per (seed, method) run that the audit ``result`` took (current and complete): the flattened
    metrics.json."""
    return pd.DataFrame([{"domain": result.domain, "seed": seed, "method": method,
                          **metrics_row(method_dir(runs_root, result.domain, seed, method) / "metrics.json")}
                         for seed, method in result.l1[["seed", "method"]].itertuples(index=False)])


def audits(runs_root: Path, domains: list[str]) -> dict[str, audit_lib.AuditResult]:
    """The written audits of ``domains`` (those without one are left out)."""
    found = {d: audit_dir(runs_root, d) for d in domains}
    return {d: audit_lib.read_audit(a) for d, a in found.items() if (a / "verdicts.json").is_file()}


def in_paper_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in the paper's method order (unknown methods last)."""
    order = {m: i for i, m in enumerate((*METHODS, "persistence"))}
    return frame.sort_values("method", key=lambda s: s.map(order).fillna(len(order)), kind="stable")
