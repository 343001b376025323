"""Fixtures and helpers shared by the test modules of acgate.report: a user's own panel trained and audited
(``own_panel``, ``own_report``), the tiny grid whose audit report is written (``tiny_grid``), and an L2 table."""

import dataclasses
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from acgate.audit import domain_audit as audit  # noqa: E402
from acgate.config import load_params  # noqa: E402
from acgate.data import prep  # noqa: E402
from acgate.data.example import write_example  # noqa: E402
from acgate.models import runner  # noqa: E402
from acgate.report import paper_tables  # noqa: E402
from acgate.report.audit_page import write_audit_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
METHODS = ["acgate", "no_ac_encoder", "shuffled_proxies"]  # own_panel's
TINY_GRID_METHODS = ["acgate", "no_ac_encoder", "shuffled_proxies", "proxy_shared_gate", "moderated_dl", "shared_dl",
                     "two_stage_dl"]
PARTIAL = "uniform_lag"  # trained for seeds 0 and 1 of 3: a run asked for and left out
L2_COLUMNS = ["method", "stratifier", "circular", "closest_proxy", "max_abs_spearman_with_proxy", "seeds_tested",
              "mean_abs_rho", "median_rho", "share_p_below_alpha", "fisher_p", "sign_consistency", "pooled_rho",
              "pooled_p", "proxy_r_joint", "circular_joint", "pooled_lag_free_p", "p_holm", "permutations"]


@pytest.fixture(scope="module")
def own_panel(tmp_path_factory):
    """The example panel (a user's own) with a third stratifier that duplicates a proxy, trained for 3 seeds under
    the smoke profile and audited: (runs root, data root, domain)."""
    tmp = tmp_path_factory.mktemp("own_report")
    params = load_params(ROOT / "params" / "example_panel.yaml", ROOT / "params" / "smoke_panel.yaml")
    data = dataclasses.replace(params.data, csv_file=str(write_example(tmp / "example_panel.csv")),
                               stratifiers=[*params.data.stratifiers, "mean:capacity"])
    params = dataclasses.replace(params, data=data, audit=dataclasses.replace(params.audit, permutations=200))
    long, source = prep.load_long(params, ROOT)
    prep.save(prep.prepare(long, params, source), tmp / "data" / "processed" / params.domain, {"note": "test"})
    for seed in range(3):
        panel = prep.panel_for_training(params, seed, tmp / "data")
        for method in METHODS:
            runner.run_method(panel, params, method, seed, tmp / "runs", lambda s: None)
    result = audit.audit_domain(params, tmp / "runs", tmp / "data", 3, METHODS)
    result.write(tmp / "runs" / params.domain / "audit")
    return tmp / "runs", tmp / "data", params.domain


@pytest.fixture(scope="module")
def own_report(own_panel):
    runs, _, domain = own_panel
    return paper_tables.build_tables(runs, [domain])


def l2_frame():
    rows = []
    for i, method in enumerate(["acgate", "no_recon_reg", "shuffled_proxies"]):
        for j, stratifier in enumerate(["mean_hc", "mean_log_gdp_per_worker", "mean_log_capital_per_worker"]):
            rows.append([method, stratifier, j == 0, "mean_hc", 0.66 + 0.1 * j, 20, 0.248 + i / 10, 0.185, 0.55,
                         2.8e-14, 0.75, 0.287, 0.0085 if i else 1 / 2001, 0.718, j == 0, 0.66, np.nan, 2000])
    return pd.DataFrame(rows, columns=L2_COLUMNS)


@pytest.fixture(scope="session")  # shared by the modules that read it; none changes it
def tiny_grid(tmp_path_factory):
    """The example panel (a user's own, whose true lags are known) trained for 3 seeds under the smoke profile,
    audited, and its report written: (audit result, params, runs root, data root, html path, markdown path)."""
    tmp = tmp_path_factory.mktemp("audit_report")
    params = load_params(ROOT / "params" / "example_panel.yaml", ROOT / "params" / "smoke_panel.yaml")
    data = dataclasses.replace(params.data, csv_file=str(write_example(tmp / "example_panel.csv")))
    params = dataclasses.replace(params, data=data, audit=dataclasses.replace(params.audit, permutations=200,
                                                                              bootstrap=200))
    long, source = prep.load_long(params, ROOT)
    prep.save(prep.prepare(long, params, source), tmp / "data" / "processed" / params.domain, {"note": "test"})
    for seed in range(3):
        panel = prep.panel_for_training(params, seed, tmp / "data")
        for method in TINY_GRID_METHODS + [PARTIAL] * (seed < 2):
            runner.run_method(panel, params, method, seed, tmp / "runs", lambda s: None)
    result = audit.audit_domain(params, tmp / "runs", tmp / "data", 3, [*TINY_GRID_METHODS, PARTIAL])
    out = tmp / "runs" / params.domain / "audit"
    result.write(out)
    html_path, md_path = write_audit_report(result, params, tmp / "runs", tmp / "data", out, [ROOT / "tables"])
    return result, params, tmp / "runs", tmp / "data", html_path, md_path
