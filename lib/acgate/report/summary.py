"""The results of one panel's audit as numbers, and its summary in three renderings (text for a terminal, HTML for a
notebook, LaTeX for a paper), as a statsmodels user reads a fitted model's:

    numbers = audit_numbers(result)      # per reference and question: verdicts, the deciding p, rates with intervals
    intervals = kstar_intervals(result)  # per reference and entity: k* over the seeds with its interval
    print(AuditSummary.of(result, report, warnings, glance))  # what PanelAudit.summary() gives

:class:`acgate.panel_audit.PanelAudit` hands them out as ``to_frame()``, ``pvalues``, ``conf_int()`` and
``summary()``. The numbers are the ones the verdicts decided on (each verdict cell's ``p`` and ``value``,
:func:`acgate.audit.verdicts.cell`) and the panel-matched study's record, never computed a second time.
"""

from __future__ import annotations

import html
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from acgate.audit.domain_audit import AuditResult
from acgate.audit.verdicts import LAYERS
from acgate.config import SEEDLESS_METHODS
from acgate.report.audit_page import rates_at_a_glance
from acgate.report.page_warnings import lags_differ_rate
from acgate.report.reading import QUESTIONS, readings
from acgate.report.render import latex_table


def audit_numbers(result: AuditResult) -> pd.DataFrame:
    """One row per reference and question (L0-L3 of each reference, then "lags differ" once, reference ""), indexed
    by (reference, layer).

    Columns: ``verdict`` (calibrated) and ``paper_rule`` (the paper rule's verdict); ``statistic`` and ``value``, the
    layer's headline number (e.g. "GLS mean sd(k*)"); ``p_value``, the p the verdict turned on (of the tests a
    "supported" needs below ``alpha``, the largest; NaN where no test decided); and from the panel-matched study (NaN
    or "" where its rates on this panel were not measured): ``false_supported`` of ``false_replicates`` null
    surrogates of ``worst_null`` (the null class where the rule said "supported" most often: a test's size is its
    worst class's) with the 95 % Clopper-Pearson interval ``false_rate_low``-``false_rate_high``, and
    ``smallest_detectable``, the smallest simulated lag spread (sd of the true k*, in lags) the rule detected in
    80 % of surrogates (NaN: none, or not measured)."""
    rates = result.error_rates.get("error_rates", {})
    alpha = result.config.alpha
    rows = [_numbers(reference, layer, found["calibrated"][layer], found["paper"][layer]["verdict"],
                     rates.get(reference, {}).get(layer), alpha)
            for reference, found in result.verdicts_by_reference.items() for layer in LAYERS]
    rows.append(_numbers("", "lags differ", result.lags_differ, "", lags_differ_rate(rates) if rates else None,
                         alpha))
    return pd.DataFrame(rows).set_index(["reference", "layer"])


def _numbers(reference: str, layer: str, found: dict, paper: str, rate: dict | None, alpha: float) -> dict:
    worst = (rate.get("worst_null") or {}) if rate else {}  # empty where no null was run
    low, high = worst.get("ci") or (np.nan, np.nan)
    smallest = rate.get("smallest_detectable") if rate else None
    return {"reference": reference, "layer": layer, "verdict": found.get("verdict", ""), "paper_rule": paper,
            "statistic": found.get("statistic", ""), "value": _float(found.get("value")),
            "p_value": _float(found.get("p")), "alpha": alpha,
            "false_supported": _float(worst.get("supported")), "false_replicates": _float(worst.get("replicates")),
            "worst_null": worst.get("scenario", ""), "false_rate_low": _float(low),
            "false_rate_high": _float(high), "smallest_detectable": _float(smallest)}


def _float(x: object) -> float:
    return np.nan if x is None else float(x)  # type: ignore[arg-type]


def kstar_intervals(result: AuditResult, alpha: float = 0.05) -> pd.DataFrame:
    """Each reference's k* per entity of a panel every seed shares (a user's panel), indexed by (reference, entity),
    with columns ``kstar`` (the mean over the seeds' runs; for the classical reference its fitted runs', whose
    agreement with the GLS fit its L1 reads is ``lag_tests.kstar_agreement``), ``lower`` and ``upper`` (the t
    interval of that mean over the seeds at level 1 - ``alpha``: training randomness, not sampling uncertainty; NaN
    for a closed-form fit, which reads no seed, and with one seed) and ``seeds``."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha!r}: the interval's level is 1 - alpha, so alpha must lie between 0 and 1")
    if not result.shared_entities:
        raise ValueError(f"the seeds of {result.domain} have panels of their own, so an entity's k* has no interval "
                         "over seeds: read each run's k* in result.tables['kstar_by_entity']")
    runs = result.kstar_by_entity
    runs = runs[runs.method.isin(list(result.verdicts_by_reference))] if len(runs) else runs
    if runs.empty:
        return pd.DataFrame(columns=["kstar", "lower", "upper", "seeds"],
                            index=pd.MultiIndex.from_arrays([[], []], names=["reference", "entity"]))
    grouped = runs.groupby(["method", "entity"]).kstar
    out = pd.DataFrame({"kstar": grouped.mean(), "sd": grouped.std(ddof=1), "seeds": grouped.count()})
    half = stats.t.ppf(1 - alpha / 2, out.seeds - 1) * out.sd / np.sqrt(out.seeds)
    seedless = out.index.get_level_values("method").isin(SEEDLESS_METHODS)
    out["lower"] = np.where(seedless, np.nan, out.kstar - half)
    out["upper"] = np.where(seedless, np.nan, out.kstar + half)
    return out[["kstar", "lower", "upper", "seeds"]].rename_axis(["reference", "entity"])


@dataclass
class AuditSummary:
    """What ``PanelAudit.summary()`` gives: ``print`` it (or ``as_text()``), show it in a notebook (``as_html()``),
    or put it in a paper (``as_latex()``: the verdicts at a glance and the numbers as booktabs tables)."""

    domain: str
    title: str
    glance: pd.DataFrame  # layer x reference: the calibrated verdicts
    answers: list[str]  # one answer per question from both references
    rates_heading: str
    rates: list[str]  # per layer and reference: false supports on the null surrogates, the smallest spread detected
    numbers: pd.DataFrame  # audit_numbers
    warnings: list[str]
    report: Path

    @classmethod
    def of(cls, result: AuditResult, report: Path, warnings: list[str], glance: pd.DataFrame) -> AuditSummary:
        title = (f"AC-GATE audit of {result.domain}: {result.l0.seed.nunique()} seeds, {result.l0.method.nunique()} "
                 "methods (persistence included)")
        answers = [f"{QUESTIONS[question]} {text}" for question, text in readings(result).items()]
        settings = result.error_rates.get("settings")
        size = [f"{settings['replicates']} a scenario", f"{settings['neural_replicates']} with AC-GATE",
                *([f"{settings['null_replicates']} of each null"] if settings.get("null_replicates") else []),
                f"{settings['seeds']} seeds each"] if settings else []
        heading = ("On surrogates of this panel" + (f" ({', '.join(size)})" if size else "")
                   + ":\nfalse supports in the nulls, and the smallest lag spread detected in 80 %")
        return cls(result.domain, title, glance, answers, heading, _rate_lines(result, list(glance.columns)),
                   audit_numbers(result), warnings, report)

    def as_text(self) -> str:
        out = io.StringIO()
        out.write(f"{self.title}\n\n{self.glance.to_string()}\n")
        out.write("\nWhat this panel shows (one answer per question from both references):\n")
        out.writelines(f"- {answer}\n" for answer in self.answers)
        out.write(f"\n{self.rates_heading}\n")
        out.writelines(f"- {line}\n" for line in self.rates)
        if self.warnings:
            out.write(f"\n{len(self.warnings)} problem(s) and warning(s):\n")
            out.writelines(f"- {text}\n" for text in self.warnings)
        out.write(f"\nreport: {self.report}\n")
        return out.getvalue()

    def as_html(self) -> str:
        def items(lines: list[str]) -> str:
            return "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>"

        return (f"<p><b>{html.escape(self.title)}</b></p>" + self.glance.to_html()
                + "<p>What this panel shows:</p>" + items(self.answers)
                + f"<p>{html.escape(self.rates_heading)}</p>" + items(self.rates)
                + "<p>The numbers the verdicts decided on:</p>" + self.numbers.to_html(float_format="{:.4g}".format)
                + (f"<p>Problems and warnings:</p>{items(self.warnings)}" if self.warnings else "")
                + f"<p>Report: <code>{html.escape(str(self.report))}</code></p>")

    def as_latex(self) -> str:
        glance = self.glance.rename_axis("layer").reset_index()
        return (latex_table(glance, f"{self.domain}_glance", f"{self.title}: the calibrated verdicts at a glance")
                + latex_table(self.numbers.reset_index(), f"{self.domain}_summary_numbers",
                              f"{self.title}: the numbers the verdicts decided on and the rates on surrogates of the "
                              "panel"))

    def __str__(self) -> str:
        return self.as_text()

    def _repr_html_(self) -> str:
        return self.as_html()


def _rate_lines(result: AuditResult, references: list[str]) -> list[str]:
    """The study's rates as lines: per layer and reference, the lags-differ statement once, and one line for a
    reference none of whose rates were measured."""
    rates = rates_at_a_glance(result, references).iloc[1:]  # not L0: the surrogates test no forecast
    layers, differ = rates.iloc[:-1], rates.iloc[-1]  # the lags-differ statement: one for both references
    unmeasured = {reference: texts.iloc[0] for reference, texts in layers.items()
                  if texts.iloc[0].startswith("not measured") and (texts == texts.iloc[0]).all()}
    lines = [f"{layer}, {reference}: {text}" for layer, row in layers.iterrows() for reference, text in row.items()
             if reference not in unmeasured]
    lines.append(f"{differ.name}: {differ.iloc[0]}")
    return lines + [f"L1-L3, {reference}: {text}" for reference, text in unmeasured.items()]

