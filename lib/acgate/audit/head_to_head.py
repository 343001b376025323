"""AC-GATE against the classical models, head to head, from a domain audit's tables: held-out test loss on the same
rows, and, where the truth is known, lag recovery per seed.

    comparison = neural_vs_classical(heldout, l3, cfg)   # one row per classical model and metric
    lines = comparison_verdict(comparison, cfg)          # what verdicts.json says of each

``heldout`` is :func:`acgate.audit.domain_audit.heldout_comparisons`' table, ``l3`` the audit's L3 table.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from acgate import statistics
from acgate.audit import verdicts
from acgate.config import AuditConfig

NEURAL = "acgate"
CLASSICAL = (verdicts.CLASSICAL_REFERENCE, "two_stage_dl")  # the classical models AC-GATE is compared with head to head
RECOVERY_METRICS = {  # L3 column: (what it measures, higher is better)
    "spearman_lag_centre": ("ranking: Spearman(k*, lag centre)", True),
    "mae_lag_centre": ("size: k* MAE against the lag centre", False),
    "mae_dgp_mean_lag": ("size: k* MAE against the DGP's mean lag", False),
    "spearman_dgp_mean_lag": ("ranking: Spearman(k*, DGP mean lag)", True),
}
FORECAST_METRIC = "held-out test MSE (classical - AC-GATE)"
COMPARISON_COLUMNS = ["classical_method", "comparison", "metric", "neural", "classical", "seeds", "entities",
                      "advantage", "p_neural_better", "p_neural_worse", "outcome"]


def neural_vs_classical(heldout: pd.DataFrame, l3: pd.DataFrame, cfg: AuditConfig) -> pd.DataFrame:
    """AC-GATE against each classical model of :data:`CLASSICAL` that ran (the moderated distributed lag, the
    two-stage model), head to head: held-out test loss on the same rows (as the calibrated L0 compares, over seeds
    and over entities: the larger one-sided p of the two), and, where the truth is known, lag recovery per seed
    (one-sided paired Wilcoxon over seeds, each way). ``advantage`` is AC-GATE's, in the metric's units (positive:
    AC-GATE better); ``outcome`` is "AC-GATE better", "AC-GATE worse" (p < alpha) or "no better"."""
    rows = []
    per_seed = l3.set_index(["method", "seed"]) if not l3.empty else l3
    for classical in CLASSICAL:
        pair = heldout[(heldout.reference == NEURAL) & (heldout.comparator == classical)] if len(heldout) else heldout
        if pair.empty:
            continue
        r = pair.iloc[0]
        rows.append({"classical_method": classical, "comparison": "forecast", "metric": FORECAST_METRIC,
                     "neural": np.nan, "classical": np.nan, "seeds": r.seeds, "entities": r.entities,
                     "advantage": r.mean_loss_diff, "p_neural_better": r.p_better, "p_neural_worse": r.p_worse})
        if per_seed.empty or not {NEURAL, classical} <= set(per_seed.index.get_level_values("method")):
            continue
        for column, (label, higher_better) in ((c, m) for c, m in RECOVERY_METRICS.items() if c in l3):
            both = pd.concat({"neural": per_seed.loc[NEURAL, column], "classical": per_seed.loc[classical, column]},
                             axis=1).dropna()
            gain = (both.neural - both.classical) * (1 if higher_better else -1)
            rows.append({"classical_method": classical, "comparison": "recovery", "metric": label,
                         "neural": both.neural.mean(), "classical": both.classical.mean(), "seeds": len(both),
                         "entities": np.nan, "advantage": gain.mean(),
                         "p_neural_better": statistics.wilcoxon_greater(gain.to_numpy()),
                         "p_neural_worse": statistics.wilcoxon_greater(-gain.to_numpy())})
    table = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    table["outcome"] = np.where(table.p_neural_better < cfg.alpha, "AC-GATE better",
                                np.where(table.p_neural_worse < cfg.alpha, "AC-GATE worse", "no better"))
    return table


def comparison_verdict(comparison: pd.DataFrame, cfg: AuditConfig) -> dict:
    """The lines verdicts.json gives on AC-GATE against each classical model: the held-out forecast, and where the
    truth is known the ranking (Spearman against the lag centre, else the DGP's mean lag) and the size (MAE against
    the DGP's mean lag, else the lag centre) of the recovered lags, each "AC-GATE better", "no better" or "AC-GATE
    worse" (one-sided p < alpha); then every other metric of the comparison on which one of them is significantly
    better, under its own name, so that no significant difference goes unsaid."""
    if comparison.empty:
        return {}
    aspects = {"forecast": [FORECAST_METRIC],
               "ranking": [RECOVERY_METRICS[m][0] for m in ("spearman_lag_centre", "spearman_dgp_mean_lag")],
               "lag_size": [RECOVERY_METRICS[m][0] for m in ("mae_dgp_mean_lag", "mae_lag_centre")]}
    lines: dict[str, Any] = {}
    for classical, rows in comparison.groupby("classical_method", sort=False):
        found = rows.set_index("metric")
        shown = {key: next(m for m in metrics if m in found.index) for key, metrics in aspects.items()
                 if any(m in found.index for m in metrics)}
        line = {key: found.loc[metric, "outcome"] for key, metric in shown.items()}
        line |= {metric: outcome for metric, outcome in found.outcome.items()
                 if metric not in shown.values() and outcome != "no better"}
        line["evidence"] = "; ".join(f"{r.metric}: AC-GATE's advantage {r.advantage:+.4g}, p better "
                                     f"{statistics.format_p(r.p_neural_better)}, worse "
                                     f"{statistics.format_p(r.p_neural_worse)}" for r in rows.itertuples())
        lines[classical] = line
    lines["rule"] = (f"AC-GATE better (worse) when its one-sided p of being better (worse) than the classical model "
                     f"is below {cfg.alpha}: held-out loss over seeds and over entities (the larger p), lag recovery "
                     "over seeds (paired Wilcoxon); else no better")
    return lines
