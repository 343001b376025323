"""The figures of one domain's audit, each drawn from its :class:`acgate.audit.domain_audit.AuditResult` and returned as
a matplotlib Figure (None when the audit has nothing to show), for ``notebooks/04_audit.py`` and the audit report page
(:mod:`acgate.report.audit_page`) alike:

- :func:`kstar_figure`: k* across entities per method, its spread per seed (L1) and the seed-to-seed agreement of
  its ordering where the seeds share their entities;
- :func:`stratifier_rho_figure`: per-seed Spearman(k*, stratifier) per method (L2);
- :func:`kstar_stratifier_figure`: a reference's k* against each stratifier, per entity (L2);
- :func:`heldout_figure`: each reference's held-out test loss against every comparator's (L0, L1);
- :func:`neural_vs_classical_figure`: AC-GATE against the classical models, per seed;
- :func:`recovery_figure`: learned against true k* on panels whose lags are known (L3).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from acgate.audit.domain_audit import AuditResult, kstar_with_stratifiers
from acgate.audit.head_to_head import CLASSICAL, FORECAST_METRIC, NEURAL, RECOVERY_METRICS
from acgate.audit.verdicts import family
from acgate.report.figures import COLOURS, PAGE_WIDTH, STYLE
from acgate.report.inputs import in_paper_order
from acgate.report.render import readable

OUTCOME_COLOURS = {"better": COLOURS[2], "worse": COLOURS[3], "neither": "0.55"}  # green, red, grey


def references(result: AuditResult) -> list[str]:
    """The references whose verdicts the audit gives and whose runs it took, ``audit.reference`` first."""
    ran = set(result.kstar_by_entity.method) if len(result.kstar_by_entity) else set()
    return [r for r in dict.fromkeys((result.config.reference, *result.verdicts_by_reference)) if r in ran]


def shown_reference(result: AuditResult) -> str:
    """The reference a one-method figure shows: ``audit.reference``, else the first reference that ran (say, the
    moderated distributed lag when only the classical models were audited)."""
    return next(iter(references(result)), result.config.reference)


def _methods(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(in_paper_order(frame).method))


def kstar_figure(result: AuditResult) -> plt.Figure | None:
    """Per method: k* across entities (every entity of every seed, or the seed-mean k* per entity where the seeds
    share their entities), sd(k*) per seed against the practical threshold of L1, and, where the seeds share their
    entities, the Spearman of k* between pairs of seeds (median, and the range) against ``audit.min_seed_agreement``."""
    kstar = result.kstar_by_entity
    if kstar.empty or kstar.kstar.isna().all():
        return None
    if result.shared_entities:
        kstar = kstar.groupby(["method", "entity"], sort=False, as_index=False).kstar.mean()
    methods = _methods(kstar)
    labels = [readable(m) for m in methods]
    agreement = result.seed_agreement
    agree = (not agreement.empty and "applicable" in agreement and agreement.applicable.astype(bool).any()
             and agreement.median_rho.notna().any())
    cfg = result.config
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 3 if agree else 2, figsize=(PAGE_WIDTH, 0.8 + 0.22 * len(methods)), sharey=True,
                                 layout="constrained", width_ratios=[1.4, 1, 1] if agree else [1.4, 1])
        by_method = [kstar.loc[kstar.method == m, "kstar"].dropna().to_numpy() for m in methods]
        axes[0].boxplot(by_method, orientation="horizontal", widths=0.6, showfliers=True,
                        flierprops={"markersize": 2, "alpha": 0.4}, medianprops={"color": "black"})
        axes[0].set(xlabel="k* per entity" + (" (seed mean)" if result.shared_entities else " (all seeds)"),
                    title="k* across entities")
        l1 = result.l1.set_index("method")
        for i, method in enumerate(methods, start=1):
            sd = l1.loc[[method], "kstar_sd"].to_numpy() if method in l1.index else np.array([])
            axes[1].scatter(sd, np.full(len(sd), i), s=9, alpha=0.6, color=COLOURS[0], linewidths=0)
        axes[1].axvline(cfg.practical_sd, color="0.3", ls="--", lw=0.9)  # L1's practical threshold
        axes[1].set(xlabel="sd(k*), one dot per seed", title="spread across entities (L1)")
        if agree:
            rows = agreement.set_index("method").reindex(methods)
            y = np.arange(1, len(methods) + 1)
            low = (rows.median_rho - rows.min_rho).clip(lower=0).fillna(0)
            axes[2].errorbar(rows.median_rho, y, xerr=[low, np.zeros(len(y))], fmt="o", ms=3.5, color=COLOURS[0],
                             ecolor="0.5", elinewidth=0.8, capsize=0)
            axes[2].axvline(cfg.min_seed_agreement, color="0.3", ls="--", lw=0.9)  # what L2 needs
            axes[2].axvline(0, color="black", lw=0.5)
            axes[2].set(xlim=(-1.05, 1.05), xlabel="Spearman between seeds\n(median; line to the lowest)",
                        title="seed agreement of k*")
        axes[0].set_yticks(np.arange(1, len(methods) + 1), labels)
        axes[0].invert_yaxis()
    return fig


def stratifier_rho_figure(result: AuditResult) -> plt.Figure | None:
    """Per method (a panel each) and stratifier: the Spearman of k* and the stratifier in every tested seed."""
    if result.l2.empty or result.l2.rho.isna().all():
        return None
    tested = in_paper_order(result.l2[result.l2.rho.notna()]).assign(
        label=lambda f: f.stratifier.map(readable))
    methods = list(dict.fromkeys(tested.method))
    columns = min(len(methods), 4)
    rows = -(-len(methods) // columns)
    strata = list(dict.fromkeys(tested.label))
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, columns, figsize=(PAGE_WIDTH, 0.5 + rows * (0.5 + 0.25 * len(strata))),
                                 sharex=True, sharey=True, squeeze=False, layout="constrained")
        state = np.random.get_state()  # seaborn jitters with numpy's global generator: fix it, then restore it
        np.random.seed(0)
        for ax, method in zip(axes.flat, methods, strict=False):
            sns.stripplot(data=tested[tested.method == method], x="rho", y="label", order=strata, hue="label",
                          hue_order=strata, palette=COLOURS[:len(strata)], legend=False, size=3, jitter=0.15, ax=ax)
            ax.axvline(0, color="grey", lw=0.8)
            ax.set(title=readable(method), xlabel="Spearman(k*, stratifier)", ylabel="", xlim=(-1.05, 1.05))
        np.random.set_state(state)
        for ax in axes.flat[len(methods):]:
            ax.remove()
    return fig


def kstar_stratifier_figure(result: AuditResult, data_root: Path, reference: str | None = None) -> plt.Figure | None:
    """``reference``'s k* (default :func:`shown_reference`) against each stratifier of the panels in
    ``data_root``: every entity of every seed, or the seed-mean per entity where the seeds share their entities."""
    reference = reference or shown_reference(result)
    kstar = result.kstar_by_entity[result.kstar_by_entity.method == reference] if len(result.kstar_by_entity) else None
    names = list(result.l2.stratifier.unique()) if not result.l2.empty else []
    if kstar is None or kstar.empty or not names:
        return None
    points = kstar_with_stratifiers(kstar, data_root, result.domain, result.shared_entities)
    names = [n for n in names if n in points]
    if points.empty or not names:
        return None
    columns = min(len(names), 3)
    rows = -(-len(names) // columns)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, columns, figsize=(PAGE_WIDTH, 2.3 * rows), sharey=True, squeeze=False,
                                 layout="constrained")
        for ax, name in zip(axes.flat, names, strict=False):
            ax.scatter(points[name], points.kstar, s=8, alpha=0.5, color=COLOURS[0], linewidths=0)
            ax.set(xlabel=readable(name), ylabel=f"k* ({readable(reference)})" if ax.get_subplotspec().is_first_col()
                   else "")
        for ax in axes.flat[len(names):]:
            ax.remove()
    return fig


def heldout_figure(result: AuditResult) -> plt.Figure | None:
    """Per reference (a panel each): every comparator's held-out test MSE relative to the reference's on the same
    rows (mean over seeds, in per cent; positive: the reference is better), coloured by the Holm-adjusted one-sided
    test; the comparators of the calibrated L1 in bold."""
    heldout = result.heldout
    if heldout.empty:
        return None
    mse = result.l0.groupby("method").mse.mean()
    shown = [r for r in dict.fromkeys(heldout.reference) if r in mse.index]
    if not shown:
        return None
    height = max(len(heldout[heldout.reference == r]) for r in shown)
    alpha = result.config.alpha
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(shown), figsize=(PAGE_WIDTH, 1.0 + 0.22 * height), squeeze=False,
                                 layout="constrained")
        for ax, reference in zip(axes[0], shown, strict=True):
            rows = in_paper_order(heldout[heldout.reference == reference].rename(columns={"comparator": "method"}))
            relative = 100 * rows.mean_loss_diff.to_numpy() / mse[reference]
            outcome = np.where(rows.holm_better < alpha, "better", np.where(rows.holm_worse < alpha, "worse",
                                                                             "neither"))
            y = np.arange(len(rows))
            ax.barh(y, relative, color=[OUTCOME_COLOURS[o] for o in outcome], height=0.65)
            ax.axvline(0, color="black", lw=0.6)
            twins = family(reference)
            ax.set_yticks(y, [readable(m) for m in rows.method])
            for label, method in zip(ax.get_yticklabels(), rows.method, strict=True):
                if method in (twins.shared, twins.shuffled, twins.proxy):
                    label.set_fontweight("bold")
            ax.invert_yaxis()
            ax.set(xlabel="comparator's test MSE, % above the reference's", title=f"reference: {readable(reference)}")
        handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in OUTCOME_COLOURS.values()]
        fig.legend(handles, [f"reference better (Holm p < {alpha:g})", f"reference worse (Holm p < {alpha:g})",
                             "neither"], loc="outside lower center", ncol=3, frameon=False)
    return fig


def neural_vs_classical_figure(result: AuditResult) -> plt.Figure | None:
    """AC-GATE against each classical model that ran, one dot per seed and a bar at the mean: test MSE on the same
    rows and, where the truth is known, the recovery metrics of L3; each panel gives the audit's outcome against the
    moderated distributed lag (the first classical model that ran)."""
    comparison = result.neural_vs_classical
    if comparison.empty:
        return None
    classical = [c for c in CLASSICAL if c in set(comparison.classical_method)]
    methods = [NEURAL, *classical]
    per_seed = result.l0[result.l0.method.isin(methods)][["seed", "method", "mse"]]
    if not result.l3.empty:
        per_seed = per_seed.merge(result.l3, on=["seed", "method"], how="left")
    metrics = {"mse": (FORECAST_METRIC, "test MSE", False)} | {
        column: (label, label.split(": ", 1)[1], higher) for column, (label, higher) in RECOVERY_METRICS.items()
        if column in per_seed and per_seed[column].notna().any()}
    outcomes = comparison[comparison.classical_method == classical[0]].set_index("metric").outcome
    columns = min(len(metrics), 2)
    rows = -(-len(metrics) // columns)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, columns, figsize=(PAGE_WIDTH, rows * (1.0 + 0.3 * len(methods))),
                                 squeeze=False, sharey=True, layout="constrained")
        for ax, (column, (key, label, higher)) in zip(axes.flat, metrics.items(), strict=False):
            for i, method in enumerate(methods):
                values = per_seed.loc[per_seed.method == method, column].dropna()
                ax.scatter(values, np.full(len(values), i), s=10, alpha=0.6, color=COLOURS[i % 10], linewidths=0)
                if len(values):
                    ax.scatter([values.mean()], [i], marker="|", s=200, color="black")
            ax.set_yticks(range(len(methods)), [readable(m) for m in methods])
            ax.set_ylim(len(methods) - 0.5, -0.5)
            ax.set(xlabel=f"{'higher' if higher else 'lower'} is better")
            outcome = outcomes.get(key, "")
            ax.set_title(f"{label}\nvs {readable(classical[0])}: {outcome}" if outcome else label, loc="left")
        for ax in axes.flat[len(metrics):]:
            ax.remove()
    return fig


SCATTER_UP_TO = 2000  # points: up to this many the recovery figure shows each, beyond it hexagonal counts


def recovery_figure(result: AuditResult, shown: list[str] | None = None) -> plt.Figure | None:
    """Learned k* against the true lag centre (rounded), every entity of every seed, per reference in ``shown``
    (default :func:`references`), with the diagonal: each point (jittered sideways, as the truth is a whole lag),
    or hexagonal counts where there are many; None where the truth is not known."""
    kstar = result.kstar_by_entity
    if kstar.empty or "kstar_true" not in kstar or kstar.kstar_true.isna().all():
        return None
    shown = [r for r in (shown or references(result)) if kstar.loc[kstar.method == r, "kstar_true"].notna().any()]
    if not shown:
        return None
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(shown), figsize=(min(PAGE_WIDTH, 3.2 * len(shown)), 3.0), squeeze=False,
                                 layout="constrained")
        for ax, reference in zip(axes[0], shown, strict=True):
            mine = kstar[(kstar.method == reference) & kstar.kstar_true.notna()]
            if len(mine) > SCATTER_UP_TO:
                ax.hexbin(mine.kstar_true, mine.kstar, gridsize=25, mincnt=1, cmap="viridis")
            else:
                jitter = np.random.default_rng(0).uniform(-0.15, 0.15, len(mine))
                ax.scatter(mine.kstar_true + jitter, mine.kstar, s=8, alpha=0.5, color=COLOURS[0], linewidths=0)
            top = max(mine.kstar_true.max(), mine.kstar.max())
            ax.plot([1, top], [1, top], color="black", lw=0.8)
            rho = (result.l3.loc[result.l3.method == reference, "spearman_lag_centre"].mean() if not result.l3.empty
                   else np.nan)
            ax.set(xlabel="true lag centre", ylabel=f"learned k* ({readable(reference)})",
                   title=f"{readable(reference)}: mean Spearman {rho:.2f}" if np.isfinite(rho) else readable(reference))
    return fig
