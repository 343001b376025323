"""Comparisons across audits, for the report: the verdict matrix of every domain and reference,
and a domain beside its proxy-shuffled twin.
"""

from __future__ import annotations

import pandas as pd

from acgate.audit.domain_audit import AuditResult


def verdict_matrix(results: list[AuditResult]) -> pd.DataFrame:
    """(domain, reference) x (rule, layer): the verdict of each cell under the paper's rules and the calibrated ones,
    for every reference the audit judged (AC-GATE and the moderated distributed lag, side by side; rules and evidence
    are in each result's verdicts.json)."""
    cells = {(r.domain, reference): {(rule, layer): cell["verdict"] for rule in ("paper", "calibrated")
                                     for layer, cell in found[rule].items()}
             for r in results for reference, found in r.verdicts_by_reference.items()}
    return pd.DataFrame(cells).T.rename_axis(["domain", "reference"])


def proxy_shuffle_comparison(original: AuditResult, shuffled: AuditResult, method: str = "acgate") -> pd.DataFrame:
    """A domain and its proxy-shuffled twin side by side, per stratifier: mean |rho| and its drop, share of seeds
    with p < alpha, Fisher p, mean sd(k*) and mean test R2 (per-time)."""
    rows = []
    for label, result in (("original", original), ("proxy shuffle", shuffled)):
        summary = result.l2_summary[result.l2_summary.method == method]
        r2 = result.l0.loc[result.l0.method == method, "r2_by_time"].mean()
        sd = result.l1.loc[result.l1.method == method, "kstar_sd"].mean()
        for r in summary.itertuples():
            rows.append({"domain": result.domain, "run": label, "stratifier": r.stratifier,
                         "mean_abs_rho": r.mean_abs_rho, "share_p_below_alpha": r.share_p_below_alpha,
                         "fisher_p": r.fisher_p, "kstar_sd": sd, "test_r2_by_time": r2})
    table = pd.DataFrame(rows)
    if not table.empty:
        base = table[table.run == "original"].set_index("stratifier").mean_abs_rho
        table["mean_abs_rho_drop"] = table.stratifier.map(base) - table.mean_abs_rho
    return table
