"""The paper's figures, drawn from the audits and runs at a page's printed width: the case study (a stratifier
against AC-GATE's seed-mean k*), the evidence figure (synthetic recovery, stratifier alignment, forecast against
lag alignment) and the forecast R2 of the real panels; :func:`save_figure` writes each as PNG and PDF. Labels come
from :func:`acgate.report.render.readable`; a figure drawn from fewer seeds than the paper's grid says how many
(:func:`seed_note`).
"""

from __future__ import annotations

import functools
import json
import math
import string
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.legend_handler import HandlerTuple

from acgate.audit import domain_audit as audit_lib
from acgate.audit.calibration import RULES
from acgate.audit.verdicts import CLASSICAL_REFERENCE
from acgate.config import Params
from acgate.data.sources import PANEL_UNITS, read_csv_ids
from acgate.layout import panel_dir
from acgate.report.inputs import collect, in_paper_order, of_kind, paper_numbers, paper_scenarios
from acgate.report.render import readable, with_unit
from acgate.runs import atomic_write
from acgate.statistics import p_text


def save_figure(fig: plt.Figure, directory: Path, name: str) -> list[Path]:
    """``<name>.png`` and ``<name>.pdf`` in ``directory``, each written atomically."""
    paths = [Path(directory) / f"{name}.{ext}" for ext in ("png", "pdf")]
    for path in paths:  # no creation date in the PDF, so an unchanged figure gives an unchanged file
        ext = path.suffix[1:]
        atomic_write(path, functools.partial(fig.savefig, format=ext, dpi=200, bbox_inches="tight",
                                             metadata={"CreationDate": None} if ext == "pdf" else None), binary=True)
    return paths


PAGE_WIDTH = 7.0  # inches: figures are drawn at the printed width of a page, so their fonts print at these sizes
STYLE = {"font.size": 8, "axes.titlesize": 8.5, "axes.labelsize": 8, "xtick.labelsize": 7.5, "ytick.labelsize": 7.5,
         "legend.fontsize": 7.5, "legend.title_fontsize": 7.5}  # pt; nothing smaller than 7 pt
COLOURS = sns.color_palette("colorblind")  # colour-blind safe, for every categorical colour
PAPER_SEEDS = Params.n_seeds  # the paper's grid (params/<domain>.yaml): a figure drawn from fewer seeds says so


def seed_note(results: dict[str, audit_lib.AuditResult], domains) -> str | None:
    """"3 seeds" (or "3–5 seeds") when the audits of ``domains`` took fewer seeds than the paper's grid (``make
    quick``, a panel of your own), so a figure from a small grid is not read as the paper's; None at the paper's
    count."""
    counts = sorted({results[d].l1.seed.nunique() for d in domains if d in results and not results[d].l1.empty})
    if not counts or counts[0] >= PAPER_SEEDS:
        return None
    return f"{counts[0]} seeds" if len(counts) == 1 else f"{counts[0]}–{counts[-1]} seeds"


def _label_seeds(fig: plt.Figure, note: str | None) -> None:
    """The seed count of a small grid, in the figure's top right corner."""
    if note:
        fig.suptitle(note, x=0.99, ha="right", fontsize=STYLE["font.size"])


def panel_units(data_root: Path, domain: str) -> tuple[str, str]:
    """(what one entity is, what one time step is) in a real domain's panel, from the loader its manifest records
    (:data:`acgate.data.sources.PANEL_UNITS`: countries and years for the paper's panels); a panel whose manifest names
    no loader is a user's own: ("entity", "time steps")."""
    manifest = panel_dir(data_root, domain) / "manifest.json"
    params = json.loads(manifest.read_text()).get("params", {}) if manifest.is_file() else {}
    loader = (params.get("data") or {}).get("loader") if isinstance(params, dict) else None
    return PANEL_UNITS.get(loader, PANEL_UNITS["csv"])


def _case_study_panels(results: dict[str, audit_lib.AuditResult], paper: dict) -> list[tuple[str, pd.Series]]:
    """(domain, AC-GATE's L2 summary row) per case-study panel: per real domain the paper's stratifier, and when
    that one is circular or absent (a user's panel) the strongest non-circular one."""
    panels = []
    for domain, result in results.items():
        summary = result.l2_summary[result.l2_summary.method == "acgate"] if not result.l2_summary.empty else None
        if result.kind != "data" or summary is None or summary.empty:
            continue
        named = paper["case_study"].get(domain, {}).get("stratifier")
        chosen = [named] if named in set(summary.stratifier) else []
        clean = summary[~summary.circular]
        if (not chosen or summary.set_index("stratifier").circular[named]) and not clean.empty:
            chosen.append(clean.loc[clean.mean_abs_rho.idxmax(), "stratifier"])
        panels += [(domain, summary[summary.stratifier == c].iloc[0]) for c in dict.fromkeys(chosen)]
    return panels


def quantile_medians(x: pd.Series, y: pd.Series, bins: int = 5) -> pd.DataFrame:
    """The median of x and of y within each quantile bin of x: a rank-based trend (as the Spearman rho is) that
    stays within the data, where a straight line would leave the range k* can take."""
    groups = pd.qcut(x.rank(method="first"), min(bins, len(x)), labels=False)
    return pd.DataFrame({"x": x, "y": y}).groupby(groups).median()


def case_study_figure(results: dict[str, audit_lib.AuditResult], data_root: Path, paper: dict | None = None
                      ) -> plt.Figure | None:
    """Stratifier against the seed-mean AC-GATE k* per entity (paper figure case_study_panel), with the
    seed-pooled Spearman rho and permutation p of the audit and the median k* per stratifier quintile; the panels
    share the k* axis and are lettered in reading order, each axis in its units (:func:`panel_units`,
    :func:`acgate.report.render.with_unit`). See :func:`_case_study_panels` for which stratifiers."""
    panels = _case_study_panels(results, paper or paper_numbers())
    if not panels:
        return None
    columns = min(len(panels), 2)
    rows = math.ceil(len(panels) / columns)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, columns, figsize=(PAGE_WIDTH * columns / 2, 2.7 * rows), squeeze=False,
                                 sharey=True, layout="constrained")
    for letter, ax, (domain, row) in zip(string.ascii_uppercase, axes.flat, panels, strict=False):
        entity, step = panel_units(data_root, domain)
        kstar = results[domain].kstar_by_entity.query("method == 'acgate'").groupby("entity").kstar.mean()
        strat = read_csv_ids(panel_dir(data_root, domain) / "stratifiers.csv", ["entity"], written=True).set_index(
            "entity")[row.stratifier]
        both = pd.concat([strat.rename("x"), kstar.rename("y")], axis=1, join="inner")
        trend = quantile_medians(both.x, both.y)
        with plt.rc_context(STYLE):
            ax.scatter(both.x, both.y, s=10, alpha=0.7, color=COLOURS[0], linewidths=0, label=entity)
            ax.plot(trend.x, trend.y, color="black", lw=1.2, marker="o", ms=3, label="median per quintile")
            circular = (f"\n(circular: ~ proxy {readable(row.closest_proxy)})" if row.circular else
                        f"\n(proxies predict its ranks, R = {row.proxy_r_joint:.2f})" if row.circular_joint else "")
            p = p_text(row.pooled_p, results[domain].config.permutations)  # "p ≤ 1/(B+1)" at the floor
            ax.set(xlabel=f"{with_unit(row.stratifier)}{circular}",
                   ylabel=f"seed-mean $k^\\star$ of AC-GATE ({step})" if ax.get_subplotspec().is_first_col() else "")
            ax.set_title(f"{letter}  {readable(domain)}: $\\rho$ = {row.pooled_rho:.2f}, {p}", loc="left",
                         fontweight="bold")
    for ax in axes.flat[len(panels):]:
        ax.remove()
    axes.flat[0].legend(loc="lower right", fontsize=STYLE["legend.fontsize"], frameon=False)
    _label_seeds(fig, seed_note(results, [domain for domain, _ in panels]))
    return fig


def _recovery_panel(ax: plt.Axes, synth: pd.DataFrame, scenarios: list[str]) -> None:
    """Synthetic recovery: Spearman of k* with the true lag centre per method and scenario (bar: mean over seeds;
    error bar: sd over seeds; greys, one per scenario). A method whose k* is constant has no Spearman: "n/a"; one
    that a scenario did not run (leave_out) has no bar there: "not run (<scenario>)"."""
    methods = list(dict.fromkeys(synth.method))
    for j, domain in enumerate(scenarios):
        ran = synth[synth.domain == domain].set_index("method")
        rows = ran.reindex(methods)
        y = np.arange(len(methods)) + (j - (len(scenarios) - 1) / 2) * 0.38
        scenario = readable(domain).removeprefix("synthetic ")
        ax.barh(y, rows.spearman_lag_centre_mean.fillna(0), height=0.38, xerr=rows.spearman_lag_centre_sd.fillna(0),
                color=("0.3", "0.65")[j % 2], label=scenario, error_kw={"lw": 0.8, "capsize": 2, "ecolor": "black"})
        for i in np.flatnonzero(~rows.index.isin(ran.index)):
            ax.text(0.02, y[i], f"not run ({scenario})", va="center", fontsize=7, color="0.35")
    undefined = synth.groupby("method").spearman_lag_centre_mean.apply(lambda v: v.isna().all())
    for i, method in enumerate(methods):
        if undefined[method]:
            ax.text(0.02, i, "n/a", va="center", fontsize=7, color="0.35")
    ax.set_yticks(np.arange(len(methods)), [readable(m) for m in methods])
    ax.invert_yaxis()
    ax.set(xlim=(0, 1.05), xlabel="Spearman($k^\\star$, true lag centre)")
    handles, labels = ax.get_legend_handles_labels()
    handles.append(plt.Line2D([], [], color="black", lw=0.8, marker="|", ms=5))
    labels.append("sd over seeds")
    if undefined.any():
        handles.append(plt.Line2D([], [], ls=""))
        labels.append("n/a: $k^\\star$ constant")
    ax.legend(handles, labels, title="scenario (bar: mean over seeds)", loc="upper center",
              bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)


def _stratifier_panel(ax: plt.Axes, mine: pd.DataFrame) -> None:
    """AC-GATE's mean |rho| per stratifier (colour: domain; hatched and light: circular), with its share of seeds
    p < .05."""
    domains = list(dict.fromkeys(mine.domain))
    y = np.arange(len(mine))
    for yy, r in zip(y, mine.itertuples(), strict=True):
        colour = COLOURS[domains.index(r.domain) % 10]
        ax.barh(yy, r.mean_abs_rho, color=_lighter(colour) if r.circular else colour, edgecolor=colour,
                hatch="////" if r.circular else None, lw=0.8)
        ax.text(r.mean_abs_rho + 0.02, yy, f"{r.share_p_below_alpha:.0%}", va="center", fontsize=7)
    ax.set_yticks(y, [readable(s) for s in mine.stratifier])
    ax.invert_yaxis()
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[i % 10]) for i in range(len(domains))]
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="0.3", hatch="////"))
    ax.legend(handles, [*map(readable, domains), "circular (a proxy)"], loc="upper center",
              bbox_to_anchor=(0.5, -0.3), ncol=3, frameon=False)
    ax.set(xlim=(0, 1.2), xticks=(0, 0.5, 1),
           xlabel="mean |$\\rho$| over seeds\n(at the bar: share of seeds with p < 0.05)")


def _lighter(colour) -> tuple[float, float, float]:
    return tuple(1 - 0.45 * (1 - c) for c in colour)


def alignment_points(results: dict[str, audit_lib.AuditResult]) -> pd.DataFrame:
    """Per real domain (and proxy-shuffle twin) and method with a tested k*: mean test R2 over seeds and mean |rho|
    over its non-circular stratifiers and seeds (a circular one duplicates a proxy, so it would count the proxies'
    alignment as the lags'), with the domain's persistence R2."""
    points = []
    for domain, result in results.items():
        if result.kind == "synthetic" or result.l2.empty:
            continue
        circular = set(result.l2_summary[result.l2_summary.circular].stratifier)
        tested = result.l2[result.l2.skipped.isna() & ~result.l2.stratifier.isin(circular)]
        rho = tested.assign(abs_rho=tested.rho.abs()).groupby("method", sort=False).abs_rho.mean()
        r2 = result.l0.groupby("method").r2_by_time.mean()
        points += [{"domain": domain, "method": m, "test_r2": r2.get(m, math.nan), "mean_abs_rho": v,
                    "persistence_r2": r2.get("persistence", math.nan)} for m, v in rho.items()]
    return pd.DataFrame(points, columns=["domain", "method", "test_r2", "mean_abs_rho", "persistence_r2"])


def _forecast_panel(ax: plt.Axes, points: pd.DataFrame) -> None:
    """Forecast (test R2) against lag alignment per method and domain, with each domain's persistence R2."""
    points = points[~points.method.isin(("shared_dl", "shuffled_dl", "two_stage_dl"))]  # the yardstick shows once
    methods = list(dict.fromkeys(in_paper_order(points).method))
    markers = dict(zip(dict.fromkeys(points.domain), "oXsP^v<>", strict=False))
    for row in points.itertuples():
        ax.scatter(row.test_r2, row.mean_abs_rho, color=COLOURS[methods.index(row.method) % 10],
                   marker=markers[row.domain], s=30, edgecolor="white", lw=0.4)
    floors = points.dropna(subset=["persistence_r2"]).groupby("persistence_r2", sort=False).domain.first()
    styles = dict(zip(floors.index, ("--", ":", "-."), strict=False))  # a twin shares its domain's floor
    for r2, style in styles.items():
        ax.axvline(r2, color="0.3", ls=style, lw=0.9)
    # methods by colour and domains by marker, each in a legend of its own; a domain's entry carries the line of its
    # persistence R2 (a proxy-shuffle twin shares its domain's)
    dot = [plt.Line2D([], [], color=COLOURS[i % 10], marker="o", ls="") for i in range(len(methods))]
    method_legend = ax.add_artist(ax.legend(dot, [readable(m) for m in methods], title="method", loc="upper left",
                                            bbox_to_anchor=(1.01, 1.0), frameon=False))
    method_legend.set_clip_on(False)  # add_artist clips it to the panel, which would leave it out of the layout
    floor_of = points.groupby("domain", sort=False).persistence_r2.first()
    handles = [(*([plt.Line2D([], [], color="0.3", ls=styles[floor_of[d]], lw=0.9)] if floor_of[d] in styles else []),
                plt.Line2D([], [], color="0.3", marker=marker, ls="")) for d, marker in markers.items()]
    ax.legend(handles, [readable(d) for d in markers], title="domain (line: its persistence $R^2$)", loc="upper center",
              bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False, handler_map={tuple: HandlerTuple(ndivide=1)})
    ax.set(xlabel="test $R^2$ (L0)", ylabel="mean |Spearman($k^\\star$, stratifier)|\n(non-circular stratifiers, L2)")


def evidence_figure(tables: dict[str, pd.DataFrame], results: dict[str, audit_lib.AuditResult]) -> plt.Figure | None:
    """The evidence figure (paper figure compact_evidence_panel), with the panels the domains support: synthetic
    recovery (L3) and AC-GATE's alignment per stratifier (L2) side by side, and below them forecast (L0) against
    lag alignment per method and real domain, beside the persistence forecast. Lettered in reading order; None
    when the domains support no panel."""
    synth = tables.get("synthetic_summary", pd.DataFrame())
    scenarios = [d for d in paper_scenarios() if not synth.empty and d in set(synth.domain)]
    l2 = [t.assign(domain=name.removesuffix("_l2")) for name, t in tables.items()
          if name.endswith("_l2") and results.get(name.removesuffix("_l2"), None) is not None
          and results[name.removesuffix("_l2")].kind == "data"]
    mine = pd.concat(l2, ignore_index=True).query("method == 'acgate'") if l2 else pd.DataFrame()
    points = alignment_points(results).dropna(subset=["mean_abs_rho"])
    top = [n for n, shown in (("recovery", scenarios), ("stratifiers", not mine.empty)) if shown]
    rows = [top] if top else []
    if not points.empty:
        rows.append(["forecast"] * max(len(top), 1))
    if not rows:
        return None
    titles = {"recovery": "synthetic recovery (L3)", "stratifiers": "stratifier alignment (AC-GATE, L2)",
              "forecast": "forecast vs lag alignment (L0, L2)"}
    with plt.rc_context(STYLE):
        fig, axes = plt.subplot_mosaic(rows, figsize=(PAGE_WIDTH, 3.1 * len(rows)), layout="constrained",
                                       width_ratios=[0.8, 1.2] if len(top) == 2 else None)
        for letter, name in zip("ABC", dict.fromkeys(n for row in rows for n in row), strict=False):
            ax = axes[name]
            if name == "recovery":
                _recovery_panel(ax, synth[synth.domain.isin(scenarios)], scenarios)
            elif name == "stratifiers":
                _stratifier_panel(ax, mine)
            else:
                _forecast_panel(ax, points)
            ax.set_title(f"{letter}  {titles[name]}", loc="left", fontweight="bold")
    _label_seeds(fig, seed_note(results, [*scenarios, *dict.fromkeys(mine.get("domain", [])),
                                          *dict.fromkeys(points.domain)]))
    return fig


def forecast_r2_figure(runs_root: Path, results: dict[str, audit_lib.AuditResult]) -> plt.Figure | None:
    """Test R2 (by time, the paper's) per method and seed on the real panels (dots), its mean over seeds (black
    bar) and the persistence forecast (dashed line), the panels on one R2 axis (paper figure r2_floor); a method that
    a panel did not run (leave_out) keeps its row there, with "not run"."""
    domains = of_kind(results, "data")
    if not domains:
        return None
    runs_of = {d: collect(runs_root, results[d]).assign(label=lambda r: r.method.map(readable)) for d in domains}
    order = list(dict.fromkeys(in_paper_order(pd.concat(runs_of.values(), ignore_index=True)).label))
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(domains), figsize=(min(PAGE_WIDTH, 3.5 * len(domains)), 3.4), squeeze=False,
                                 sharex=True, sharey=True, layout="constrained")
        for ax, domain in zip(axes[0], domains, strict=True):
            runs = runs_of[domain]
            state = np.random.get_state()  # seaborn jitters with numpy's global generator: fix it, then restore it
            np.random.seed(0)
            sns.stripplot(data=runs, x="test_r2_by_time", y="label", order=order, ax=ax, size=2.5, alpha=0.6,
                          jitter=0.2, color=COLOURS[0])
            np.random.set_state(state)
            sns.pointplot(data=runs, x="test_r2_by_time", y="label", order=order, ax=ax, errorbar=None, color="black",
                          markers="|", markersize=10, linestyles="none")
            for i in (i for i, label in enumerate(order) if label not in set(runs.label)):
                ax.text(0.02, i, "not run", transform=ax.get_yaxis_transform(), va="center", fontsize=7, color="0.35")
            floor = results[domain].l0.query("method == 'persistence'").r2_by_time
            if len(floor):
                ax.axvline(floor.iloc[0], ls="--", color="0.3", lw=1)
            ax.axvline(0, color="black", lw=0.5)
            ax.set(xlabel="test $R^2$ (per-year cross-section,\nmean over years)", ylabel="", title=readable(domain))
        handles = [plt.Line2D([], [], color=COLOURS[0], marker="o", ms=3, alpha=0.6, ls=""),
                   plt.Line2D([], [], color="black", marker="|", ms=10, mew=2, ls=""),
                   plt.Line2D([], [], ls="--", color="0.3", lw=1)]
        fig.legend(handles, ["one seed", "mean over seeds", "persistence forecast"], loc="outside lower center",
                   ncol=3, frameon=False)
    _label_seeds(fig, seed_note(results, domains))
    return fig


def replicate_counts(shown: pd.DataFrame) -> dict[str, str]:
    """Per scenario of a calibration table, how many replicates each reference's shares stand on: "n = 50", or
    "n = 5 AC-GATE, 20 moderated DL" where the references had different numbers (a panel-matched study trains fewer
    neural replicates)."""
    counts = {}
    for scenario, rows in shown.groupby("scenario", sort=False):
        per_reference = rows.groupby("reference", sort=False).replicates.max()
        counts[scenario] = (f"n = {per_reference.iloc[0]}" if per_reference.nunique() == 1 else
                            "n = " + ", ".join(f"{n} {readable(r)}" for r, n in per_reference.items()))
    return counts


def calibration_figure(table: pd.DataFrame):
    """Share of replicates "supported" with its 95 % interval, per scenario, for L1, L2, L3 and the lags-differ
    statement (the classical reference's alone): AC-GATE under the paper's rules, the calibrated ones and the
    calibrated ones with the practical spread threshold at zero, and the moderated distributed lag under the
    calibrated ones; a grey cross marks the right answer (0 or 1); negative controls above the line, positive
    controls below, each row labelled with its replicate count. At a page's width in one font size, with no title:
    its caption is the notebook's and docs/results.md's."""
    size = 7.5  # pt, every text of the figure
    layers = ("L1", "L2", "L3", "lags differ")
    shown = table[table.layer.isin(layers)]
    order = list(dict.fromkeys(shown.sort_values("control", kind="stable").scenario))
    series = [(reference, rule) for reference, rule in (("acgate", "paper"), ("acgate", "calibrated"),
                                                        ("acgate", RULES["calibrated_sd0"]),
                                                        (CLASSICAL_REFERENCE, "calibrated"))
              if ((shown.reference == reference) & (shown.rule == rule)).any()]
    colours = dict(zip(series, sns.color_palette("colorblind", len(series)), strict=True))
    with plt.rc_context({"font.size": size, "axes.titlesize": size, "axes.labelsize": size, "xtick.labelsize": size,
                         "ytick.labelsize": size, "legend.fontsize": size, "legend.title_fontsize": size,
                         "figure.titlesize": size, "figure.labelsize": size}):
        fig, axes = plt.subplots(1, len(layers), figsize=(PAGE_WIDTH, 0.42 * len(order) + 1.5), sharey=True,
                                 layout="constrained")
        for ax, layer in zip(axes, layers, strict=True):
            for n, (reference, rule) in enumerate(series):
                rows = shown[(shown.layer == layer) & (shown.rule == rule) & (shown.reference == reference)]
                if rows.empty:
                    continue
                rows = rows.set_index("scenario").reindex(order)
                y = np.arange(len(order)) + 0.18 * (n - (len(series) - 1) / 2)
                ax.errorbar(rows.share_supported, y, xerr=[rows.share_supported - rows.ci_low,
                                                           rows.ci_high - rows.share_supported],
                            fmt="o", ms=3, capsize=1.5, lw=0.9, color=colours[(reference, rule)],
                            label=f"{readable(reference)}, {rule}")
            truth = shown[shown.layer == layer].drop_duplicates("scenario").set_index("scenario").truth.reindex(order)
            ax.scatter((truth == "supported").astype(float), np.arange(len(order)), marker="x", color="grey",
                       zorder=0, label="the right answer")
            negatives = int((shown.drop_duplicates("scenario").control == "negative").sum())
            ax.axhline(negatives - 0.5, color="grey", lw=0.8)
            ax.set(xlim=(-0.08, 1.08), xticks=(0, 0.5, 1), xticklabels=("0", "0.5", "1"), title=layer)
            ax.grid(axis="x", lw=0.4, alpha=0.5)
        control = shown.drop_duplicates("scenario").set_index("scenario").control
        counts = replicate_counts(shown)
        axes[0].set_yticks(np.arange(len(order)), [f"{s.replace('_', ' ')} ({control[s]})\n{counts[s]}"
                                                   for s in order])
        axes[0].invert_yaxis()
        handles, labels = axes[0].get_legend_handles_labels()  # the first panel has every series, the cross first
        fig.legend([*handles[1:], handles[0]], [*labels[1:], labels[0]], loc="outside upper center", ncol=3,
                   frameon=False, title="reference, rules (dot: share of replicates; bar: its 95 % Clopper-Pearson "
                                        "interval)")
        fig.supxlabel('share of replicates "supported"')
    return fig
