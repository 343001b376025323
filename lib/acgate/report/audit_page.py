"""A domain's audit as one page a referee or co-author reads without Jupyter:

    html_path, md_path = write_audit_report(result, params, runs_root, data_root, out_dir)

``report.html`` (self-contained: figures embedded as PNG, styles inline, no script) and ``report.md``, its Markdown
twin (figures as PNG files in ``report_figures/`` beside it), in the audit's folder. Top to bottom: the verdicts at
a glance, the audit's problems and warnings (each once, numbered), each verdict in one plain sentence with its
evidence, warnings and error rates (the panel-matched study's where one is current, and the generic calibration of
the rules on simulated control panels, ``tables/audit_calibration``), whether the lags differ at all and AC-GATE
against the classical yardstick; then the figures that carry them (:mod:`acgate.report.audit_figures`), the data
(entities kept and dropped, time span, splits), the runs audited and left out, and the provenance (code versions,
devices, dates, parameters).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from acgate.audit.domain_audit import AuditResult
from acgate.audit.head_to_head import CLASSICAL, NEURAL
from acgate.audit.panel_matched import lags_text
from acgate.audit.run_folders import load_panel
from acgate.audit.verdicts import CLASSICAL_REFERENCE, LAYERS, RULES_VERSIONS, rules_versions, versions_text
from acgate.config import GATE_METHODS, Params
from acgate.layout import AUDIT_MARKDOWN, AUDIT_PAGE, MEMORY_OFF, audit_dir, method_dir, panel_dir, shown
from acgate.report import audit_figures, render
from acgate.report.page import FIGURES_FOLDER, Code, Link, Page, Strong, render_html, render_markdown
from acgate.report.page_warnings import lags_differ_rate, page_warnings, reach_reading
from acgate.report.reading import QUESTIONS, lags_differ_reading, readings
from acgate.runs import RunFolderBusy, atomic_write, code_versions, git_sha, reading

# one plain sentence per layer and verdict ({r}: the reference's name); the evidence and the rule follow it
SENTENCES = {
    "L0": {"supported": "{r} forecasts the test window better than every other method and persistence.",
           "not certified": "{r} is not shown to forecast the test window better than every other method and "
                            "persistence.",
           "ruled out": "Another method (or persistence) forecasts the test window better than {r}.",
           "not claimed": "No forecast could be compared."},
    "L1": {"supported": "The proxies hold the lags: {r} beats its shared-lag, shuffled-proxy and proxy twins on "
                        "held-out data, and its k* spreads across entities.",
           "not certified": "It is not shown that the proxies hold the lags: {r} does not beat each of its "
                            "shared-lag, shuffled-proxy and proxy twins on held-out data, or its k* hardly spreads.",
           "ruled out": "{r}'s k* is the same for every entity in every seed: it finds no lag differences.",
           "not claimed": "{r} was not audited."},
    "L2": {"supported": "{r}'s k* orders the entities like a stratifier the proxies do not carry, beyond chance and "
                        "more closely than a random direction of the proxies would.",
           "not certified": "It is not shown that {r}'s k* orders the entities like a stratifier the proxies do not "
                            "carry, beyond chance and beyond a random direction of the proxies.",
           "ruled out": "{r}'s k* is constant in every seed: there is nothing to stratify.",
           "not claimed": "No stratifier could be tested."},
    "L1 in-sample": {  # the classical reference's L1: its evidence is in-sample, not held-out
        "supported": "The proxies hold the lags: in-sample, under the panel's AR(1) errors, {r}'s lag curves moderated "
                     "by the proxies fit better than one shape scaled for each entity and than the shared curve, "
                     "against permutations of the proxies across entities, and its k* spreads across entities.",
        "not certified": "It is not shown that the proxies hold the lags: in-sample, under the panel's AR(1) errors, "
                         "{r}'s lag curves moderated by the proxies do not fit better than both one shape scaled for "
                         "each entity and the shared curve (against permutations of the proxies), or its k* hardly "
                         "spreads.",
        "ruled out": "{r}'s k* is the same for every entity in every seed: it finds no lag differences.",
        "not claimed": "{r} was not audited."},
    "L3": {"supported": "{r}'s k* recovers the true lags, better than the models with one lag for all.",
           "not certified": "It is not shown that {r}'s k* recovers the true lags better than the models with one "
                            "lag for all.",
           "ruled out": "{r}'s k* does not recover the true lags (mean Spearman with them below 0.2).",
           "not claimed": "The true lags are not known here, so their recovery is not tested."},
}
LAYER_TITLES = {"L0": "forecast", "L1": "the proxies hold the lags", "L2": "alignment with a stratifier",
                "L3": "recovery of the true lags"}
STATEMENTS = ("L1", "L2", "L3", "lags differ")  # the layers both error-rate studies measure
ASPECTS = {"forecast": "forecasts held-out data", "ranking": "ranks the true lags", "lag_size": "sizes the true lags"}
OUTCOMES = {"AC-GATE better": "better", "no better": "no better", "AC-GATE worse": "worse"}


# --- what the page says


def generic_calibration(tables_dirs: list[Path], gate_memory: bool = True) -> dict:
    """The committed calibration of the rules on simulated control panels (``audit_calibration.csv`` and its record,
    in the first of ``tables_dirs`` that has both; for AC-GATE without the gate's memory, ``gate_memory`` false, in
    their folders :data:`acgate.layout.MEMORY_OFF`): per (reference, rule, layer), "supported" counts on negatives
    and on positives; ``{"note": why}`` alone when there is none, or it measured other rules or the other model,
    naming the make target that measures it (``calibrate``, or ``calibrate-own`` without the memory)."""
    folders = [Path(d) if gate_memory else Path(d) / MEMORY_OFF for d in tables_dirs]
    fix = f"; make {'calibrate' if gate_memory else 'calibrate-own'} measures it"
    for folder in folders:
        table, record = folder / "audit_calibration.csv", folder / "audit_calibration.json"
        if not (table.is_file() and record.is_file()):
            continue
        about = json.loads(record.read_text())
        measured = rules_versions(about.get("rules_version"))
        if measured != RULES_VERSIONS:
            return {"note": f"the calibration in {shown(folder)} measured rules versions {versions_text(measured)}, "
                            f"the rules are now versions {versions_text(RULES_VERSIONS)}: its error rates do not "
                            f"apply{fix}"}
        if about.get("params", {}).get("model", {}).get("gate_memory", True) != gate_memory:
            return {"note": f"the calibration in {shown(folder)} measured AC-GATE {_memory(not gate_memory)} and "
                            f"this audit's AC-GATE is {_memory(gate_memory)}: its error rates do not apply{fix}"}
        frame = pd.read_csv(table)
        absent = sorted({"reference", "rule", "layer", "truth", "supported", "replicates"} - set(frame.columns))
        if absent:  # a calibration that measured nothing (a smoke grid's) has its scenarios only
            return {"note": f"the calibration in {shown(folder)} holds no rates (no column {', '.join(absent)}){fix}"}
        counts = frame.groupby(["reference", "rule", "layer", "truth"])[["supported", "replicates"]].sum()
        rates: dict[tuple, dict] = {}
        for (reference, rule, layer, truth), row in counts.iterrows():
            side = "negatives" if truth == "not supported" else "positives"
            rates.setdefault((reference, rule, layer), {})[side] = (int(row.supported), int(row.replicates))
        return {"note": "", "rates": rates, "file": shown(table), "created_utc": about.get("created_utc"),
                "git_sha": about.get("git_sha")}
    return {"note": "no calibration of the rules (audit_calibration.csv) in " + ", ".join(map(shown, folders)) + fix}


def _memory(gate_memory: bool) -> str:
    return "with the gate's memory (the paper's model)" if gate_memory else "without the gate's memory"


def _calibration_sentence(calibration: dict, reference: str, layer: str) -> str | None:
    """How often the calibrated rule (and the paper's, where it has the layer) said "supported" on the calibration's
    negative and positive controls; None where the calibration does not measure the layer."""
    said = []
    for rule in ("calibrated", "paper"):
        found = calibration.get("rates", {}).get((reference, rule, layer))
        if found and layer in STATEMENTS:
            said.append(f"{'the calibrated' if rule == 'calibrated' else 'the paper'} rule in "
                        + " and ".join(f"{s} of {n} {side}" for side, (s, n) in found.items()))
    if not said:
        return None
    return ("on the simulated control panels of the calibration (06_audit_calibration), \"supported\" said by "
            + "; by ".join(said) + " (right: none of the negatives, all of the positives)")


def unmeasured(study: dict, reference: str) -> str:
    """Why the panel-matched ``study`` (``AuditResult.error_rates``) gives no rate of ``reference``."""
    settings = study.get("settings", {})
    if not study.get("error_rates") and not study.get("seeds_differ"):
        return study.get("note") or "no panel-matched study"
    if reference in study.get("stale", []):
        return "the study measured them under other rules; run it again (07_panel_matched measures only what changed)"
    if reference in study.get("seeds_differ", []):
        return (f"the study's replicates have {settings.get('seeds')} seeds and this audit {study.get('audit_seeds')}, "
                f"and {render.readable(reference)}'s verdicts test over seeds")
    return (f"the study trained no {render.readable(reference)} replicates (neural_replicates "
            f"{settings.get('neural_replicates', 0)}; about 20 a scenario measure its rates, each costing 7-17 "
            "classical ones)")


def rate_in_cell(study: dict, reference: str, layer: str) -> str:
    """What a glance cell of ``reference`` and ``layer`` (L1-L3) says of its rate on this panel: the false supports
    of its worst null, or "rate not measured"."""
    rate = study.get("error_rates", {}).get(reference, {}).get(layer)
    if rate is None:
        return "rate not measured"
    worst = rate.get("worst_null") or rate["false_support"]
    return f"false in {worst['supported']}/{worst['replicates']} nulls" + (" of its worst" if rate.get("worst_null")
                                                                          else "")


def rates_at_a_glance(result: AuditResult, references: list[str]) -> pd.DataFrame:
    """Per layer (and the lags-differ statement) and reference: the panel-matched false supports and the smallest
    spread detected in 80 % of surrogates, or "not measured" and why."""
    study = result.error_rates
    rates = study.get("error_rates", {})

    def said(rate: dict | None, reference: str) -> str:
        if rate is None:
            return f"not measured: {unmeasured(study, reference)}"
        false, worst = rate["false_support"], rate.get("worst_null") or {}
        smallest = rate.get("smallest_detectable")
        power = (f"detects a spread of {lags_text(smallest)} in 80 %"
                 if smallest is not None else "detects no spread simulated in 80 %")
        falsely = (f"false in {worst['supported']} of {worst['replicates']} of its worst null ({worst['scenario']}), "
                   f"{false['supported']} of {false['replicates']} in all" if worst
                   else f"false in {false['supported']} of {false['replicates']} nulls")
        return f"{falsely}; {power}"

    table = pd.DataFrame({render.readable(r): [said(rates.get(r, {}).get(layer), r) if layer in STATEMENTS
                                                else "not measured: a forecast comparison, which the surrogates "
                                                     "(built for the lag statements) do not test" for layer in LAYERS]
                          for r in references}, index=[f"{layer} {LAYER_TITLES[layer]}" for layer in LAYERS])
    table.loc["lags differ at all"] = said(lags_differ_rate(rates), CLASSICAL_REFERENCE) if rates else said(None, "")
    return table


def _evidence(text: str) -> list:
    return [[part] for part in text.split("; ") if part]


def _see(numbers: list[int]) -> list:
    runs: list = ["warnings: " if len(set(numbers)) > 1 else "warning: "]
    for i, n in enumerate(sorted(set(numbers))):
        runs += [", " if i else "", Link(f"W{n}", f"#w{n}")]
    return runs


def _verdicts(page: Page, result: AuditResult, calibration: dict) -> None:
    """The verdicts at a glance, the problems and the warnings (numbered, each once), and each reference's verdicts
    with their evidence, error rates and the numbers of their warnings."""
    rates = result.error_rates.get("error_rates", {})
    references = list(result.verdicts_by_reference)
    warnings, numbers = page_warnings(result)
    reach_said = reach_reading(result)

    def no_evidence(reference: str, layer: str) -> str:
        found = numbers.get((reference, "matched", layer))
        return f"; says little here: W{found[0]}" if found else ""

    def glance_cell(reference: str, layer: str) -> str:
        found = result.verdicts_by_reference[reference]
        rate = f"; {rate_in_cell(result.error_rates, reference, layer)}" if layer in STATEMENTS and \
            found["calibrated"][layer]["verdict"] != "not claimed" else ""
        return (f"{found['calibrated'][layer]['verdict']} (paper: {found['paper'][layer]['verdict']}{rate}"
                f"{no_evidence(reference, layer)})")

    glance = pd.DataFrame({render.readable(r): [glance_cell(r, layer) for layer in LAYERS] for r in references},
                          index=[f"{layer} {LAYER_TITLES[layer]}" for layer in LAYERS])
    differs = result.lags_differ.get("verdict", "")
    glance.loc["lags differ at all"] = f"{differs} (W{numbers[('', 'matched', 'lags differ')][0]}: no evidence here)" \
        if ("", "matched", "lags differ") in numbers else differs
    for classical, line in result.neural_vs_classical_verdict.items():
        if classical in CLASSICAL and NEURAL in references:
            said = "; ".join(f"{aspect.replace('_', ' ')}: {outcome}" for aspect, outcome in line.items()
                             if aspect != "evidence")
            glance.loc[f"AC-GATE vs {render.readable(classical)}"] = [said if r == NEURAL else "" for r in references]
    page.heading(2, "What this panel shows", "reading")
    page.paragraph("One answer per question from both references' calibrated verdicts: a reference whose error "
                   "rates on this panel are measured speaks for it over one whose rates are not, and where they "
                   "disagree the answer says why, from what the audit computed.", kind="small")
    page.bullets([f"{QUESTIONS[question]} {text[:1].upper()}{text[1:]}."
                  for question, text in readings(result).items()])
    page.heading(2, "Verdicts at a glance", "verdicts")
    page.paragraph("The calibrated verdict of each layer, with the paper rule's in brackets, for each reference "
                   "method (docs/audit.md explains both rule sets): supported, not certified (the evidence falls "
                   "short), ruled out, or not claimed (nothing to test). Whether the lags differ at all is one "
                   "statement for both, apart from the layers.", kind="small")
    page.table(glance.rename_axis("").reset_index(), verdicts=True)
    page.paragraph("How often each rule is wrong on panels like this one (surrogates of this panel whose lags are "
                   "known: 07_panel_matched): how many null surrogates it falsely supported, and the smallest spread "
                   "of the entities' lags (sd of k*) it detects in at least 80 % of the surrogates. A \"not "
                   "certified\" cannot exclude a spread below it.", kind="small")
    page.table(rates_at_a_glance(result, references).rename_axis("").reset_index())
    if result.problems:
        page.box("problem", f"Problems ({len(result.problems)}): read these before the verdicts")
        page.bullets(result.problems)
        page.end_box()
    if warnings:
        page.box("warning", f"Warnings ({len(warnings)}), each shown once; the verdicts below refer to them")
        page.bullets(warnings, label="W")
        page.end_box()

    for reference in references:
        name = render.readable(reference)
        found = result.verdicts_by_reference[reference]
        page.heading(2, f"Verdicts for {name}", f"verdicts-{reference}")
        if reference == NEURAL and reach_said and reach_said["reads"]:
            page.paragraph(reach_said["sentence"][:1].upper() + reach_said["sentence"][1:] + ".", kind="small")
        for layer in LAYERS:
            cell, paper = found["calibrated"][layer], found["paper"][layer]
            page.heading(3, f"{layer}: {LAYER_TITLES[layer]}")
            said = "L1 in-sample" if layer == "L1" and reference not in GATE_METHODS else layer
            page.paragraph(Strong(cell["verdict"]), " ", SENTENCES[said][cell["verdict"]].format(r=name),
                           f" The paper's rule says: {paper['verdict']}.")
            page.bullets(_evidence(cell["evidence"]))
            rate = rates.get(reference, {}).get(layer)
            if rate and cell["verdict"] == "not certified" and rate.get("unseen"):
                page.paragraph(rate["unseen"][:1].upper() + rate["unseen"][1:] + ".")
            if rate and cell["verdict"] != "not claimed":
                page.paragraph(f"Panel-matched error rates: {rate['sentence']}.", kind="small")
            if cell["verdict"] != "not claimed" and (sentence := _calibration_sentence(calibration, reference, layer)):
                page.paragraph(f"Generic error rates: {sentence}.", kind="small")
            mine = numbers[(reference, "calibrated", layer)] + numbers.get((reference, "matched", layer), []) \
                + numbers.get((reference, "noise", layer), []) + numbers.get((reference, "reach", layer), [])
            theirs = numbers[(reference, "paper", layer)]
            if mine or theirs:
                page.paragraph(*(_see(mine) + [" (calibrated rule)"] if mine else []), *(["; "] if mine and theirs
                                                                                          else []),
                               *(_see(theirs) + [" (paper's rule)"] if theirs else []), ".", kind="small")
    _statements(page, result, rates, calibration, numbers.get(("", "matched", "lags differ"), [])
                + numbers.get(("", "noise", "lags differ"), []))


def _statements(page: Page, result: AuditResult, rates: dict, calibration: dict, warned: list[int]) -> None:
    """Whether the lags differ at all, and AC-GATE against the classical yardstick."""
    page.heading(2, "Do the entities' lags differ at all?", "lags-differ")
    cell = result.lags_differ
    if cell:
        reading = lags_differ_reading(result) or "not testable"
        page.paragraph(Strong(cell["verdict"]), " ", reading[:1].upper() + reading[1:] + ". ",
                       "Apart from the layers and whatever the proxies say: per-entity F-tests of the shape of the "
                       "lag curves.")
        page.bullets(_evidence(cell["evidence"]))
        differ = lags_differ_rate(rates)
        if differ and cell["verdict"] == "not certified" and differ.get("unseen"):
            page.paragraph(differ["unseen"][:1].upper() + differ["unseen"][1:] + ".")
        if differ:
            page.paragraph(f"Panel-matched error rates: {differ['sentence']}.", kind="small")
        if sentence := _calibration_sentence(calibration, CLASSICAL_REFERENCE, "lags differ"):
            page.paragraph(f"Generic error rates: {sentence}.", kind="small")
        if warned:
            page.paragraph(*_see(warned), ".", kind="small")
    page.heading(2, "AC-GATE against the classical yardstick", "classical")
    lines = {c: line for c, line in result.neural_vs_classical_verdict.items() if c in CLASSICAL}
    if not lines:
        page.paragraph("AC-GATE and a classical model did not both run: no head-to-head comparison.")
        return
    for classical, line in lines.items():
        said = [f"{ASPECTS.get(aspect, aspect)} {OUTCOMES.get(outcome, outcome)}"
                for aspect, outcome in line.items() if aspect != "evidence"]
        page.paragraph(f"Against the {render.readable(classical)}, AC-GATE "
                       + (", ".join(said[:-1]) + " and " if len(said) > 1 else "") + f"{said[-1]}.")
        page.bullets(_evidence(line.get("evidence", "")))
    page.paragraph(result.neural_vs_classical_verdict.get("rule", ""), kind="small")


def _figures(page: Page, result: AuditResult, data_root: Path) -> None:
    reference = audit_figures.shown_reference(result)
    name = render.readable(reference)
    cfg = result.config
    drawn = [
        ("kstar", audit_figures.kstar_figure(result),
         "k* per method: its distribution across entities (box: quartiles; whiskers: 1.5 times the box), its sd "
         f"across entities in each seed against the practical threshold of L1 (dashed: {cfg.practical_sd:g} lags), "
         "and, where the seeds share their entities, how closely the seeds agree on the k* ordering (median Spearman "
         f"of every pair of seeds; dashed: the {cfg.min_seed_agreement:g} L2 needs). No agreement dot: k* is the same "
         "for every entity."),
        ("stratifier_rho", audit_figures.stratifier_rho_figure(result),
         "L2: the Spearman correlation of k* and each stratifier in every tested seed, per method."),
        ("kstar_stratifiers", audit_figures.kstar_stratifier_figure(result, data_root, reference),
         f"L2: {name}'s k* against each stratifier, one point per entity"
         + (" (seed mean)." if result.shared_entities else " of every seed.")),
        ("heldout", audit_figures.heldout_figure(result),
         "L0 and L1: each comparator's held-out test MSE on the same rows, relative to the reference's (mean over "
         "seeds; positive: the reference forecasts better), coloured by the one-sided test over seeds and entities, "
         "Holm-adjusted over the comparators. In bold: the twins the calibrated L1 must beat."),
        ("neural_vs_classical", audit_figures.neural_vs_classical_figure(result),
         "AC-GATE against the classical models, one dot per seed and a bar at the mean: test MSE on the same rows "
         "and, where the true lags are known, their recovery; the title gives the outcome against the first."),
        ("recovery", audit_figures.recovery_figure(result),
         "L3: learned k* against the true lag centre, every entity of every seed (the diagonal: perfect recovery)."),
    ]
    page.heading(2, "Figures", "figures")
    shown = [(n, f, c) for n, f, c in drawn if f is not None]
    if not shown:
        page.paragraph("Nothing to draw: no run left a k* or a held-out comparison.")
    for figure_name, fig, caption in shown:
        page.figure(figure_name, fig, caption)


def _data(page: Page, result: AuditResult, params: Params, data_root: Path) -> None:
    page.heading(2, "Data", "data")
    seeds = sorted(result.l1.seed.unique()) if not result.l1.empty else [0]
    panel = load_panel(data_root, result.domain, int(seeds[0]))
    if panel is None:
        page.paragraph(f"No panel under {panel_dir(data_root, result.domain)}.")
        return
    K = params.model.max_lag
    labels = panel.target_split(K)
    span = {s: panel.times[K:][labels == s] for s in ("train", "val", "test")}
    observed = {s: int(np.isfinite(panel.Y[:, K:][:, labels == s]).sum()) for s in span}
    described = "each seed draws its own panel, the same size as this one (seed " + f"{seeds[0]})" \
        if result.kind == "synthetic" else "every seed trains on this panel" + (
            " with its own permutation of the proxies (the negative control)" if result.kind == "proxy_shuffle" else "")
    # a panel whose true lags the user names (audit.true_lag) is simulated too: an observed panel has no such column
    what = ("A simulated panel" if result.kind == "synthetic" else "A simulated panel (its true lags in column "
            f"{result.config.true_lag})" if result.config.true_lag else "An observed panel")
    page.paragraph(f"{what}: {panel.n_entities} entities, "
                   f"times {panel.times[0]}..{panel.times[-1]} "
                   f"({len(panel.times)} steps; the first {K} warm up the lags, model.max_lag); {described}.")
    page.table(pd.DataFrame([{"split": s, "target times": f"{t[0]}..{t[-1]}" if len(t) else "none",
                              "steps": len(t), "observed targets": observed[s]} for s, t in span.items()]))
    page.bullets([[Strong("features: "), ", ".join(panel.feature_names)],
                  [Strong("proxies (z): "), ", ".join(panel.proxy_names) or "none"],
                  [Strong("static: "), ", ".join(panel.static_names) or "none"],
                  [Strong("stratifiers: "), ", ".join(panel.stratifiers.columns) or "none"]])
    prep = panel.meta.get("prep", {})
    entities_file = panel_dir(data_root, result.domain) / "entities.csv"
    if prep:
        page.paragraph(f"Preparation saw {prep.get('entities_seen')} entities and kept {prep.get('entities_kept')}; "
                       f"it left out {prep.get('targets_left_out', 0)} target values of kept entities.")
        if prep.get("warning"):
            page.paragraph(prep["warning"], kind="small")
    if result.kind != "synthetic" and entities_file.is_file():
        entities = pd.read_csv(entities_file, dtype={"entity": str})
        kept = entities.kept.astype(str).str.lower() == "true"
        reasons = (entities[~kept].groupby("reason").size().sort_values(ascending=False)
                   .rename("entities").reset_index())
        dropped = int((~kept).sum())
        page.paragraph(f"{int(kept.sum())} entities kept, {dropped} dropped" + (" (" if dropped else "."),
                       *([Code(entities_file.name), " beside the panel gives each one's reason):"] if dropped else []))
        if dropped:
            page.table(reasons)
            page.preformatted(f"the {dropped} dropped entities",
                              "\n".join(f"{r.entity}: {r.reason}" for r in entities[~kept].itertuples()))


def _runs(page: Page, result: AuditResult) -> None:
    page.heading(2, "Runs audited", "runs")
    if not result.l1.empty:
        seeds = result.l1.groupby("method", sort=False).seed.agg(lambda s: f"{len(s)}: {_ranges(sorted(s))}")
        page.table(seeds.rename("seeds").rename_axis("method").reset_index())
    if len(result.excluded):
        page.paragraph(f"{len(result.excluded)} run folder(s) left out, with the reason:")
        page.table(result.excluded)
    else:
        page.paragraph("No run folder was left out: every run asked for is current and complete.")


def _ranges(values: list[int]) -> str:
    """"0-4, 7" for [0, 1, 2, 3, 4, 7]."""
    spans: list[list[int]] = []
    for v in values:
        if spans and v == spans[-1][1] + 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)


def manifests(result: AuditResult, runs_root: Path) -> tuple[list[dict], list[str]]:
    """The manifest.json of every run the audit took, and a note per run whose manifest could not be read now
    (being rewritten, removed)."""
    found, notes = [], []
    for seed, method in result.l1[["seed", "method"]].itertuples(index=False):
        folder = method_dir(runs_root, result.domain, seed, method)
        try:
            with reading(folder):
                found.append({**json.loads((folder / "manifest.json").read_text()), "method": method})
        except (RunFolderBusy, FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError) as err:
            notes.append(f"seed {seed:02d} {method}: manifest.json not read ({type(err).__name__})")
    return found, notes


def _provenance(page: Page, result: AuditResult, params: Params, runs_root: Path, calibration: dict) -> None:
    page.heading(2, "Provenance", "provenance")
    records, notes = manifests(result, runs_root)
    verdicts_file = audit_dir(runs_root, result.domain) / "verdicts.json"
    audited = datetime.fromtimestamp(verdicts_file.stat().st_mtime, UTC) if verdicts_file.is_file() else None
    later = [r for r in records if audited and r.get("created_utc") and
             datetime.fromisoformat(r["created_utc"]) > audited]
    differ = code_versions(records)
    if later or differ:
        page.box("warning", "Code versions and dates")
        if later:
            page.paragraph(f"{len(later)} of the {len(records)} runs now in the run folders were made after this "
                           f"audit was written ({audited.isoformat(timespec='seconds')}): the verdicts describe the "
                           "runs they replaced, and the manifests below describe the new ones; audit again.")
        if differ:
            page.paragraph(differ)
        page.end_box()
    if records:
        frame = pd.DataFrame([{"git_sha": _short(r.get("git_sha", "not recorded")),
                               "code_digest": r.get("code_digest", "not recorded"),
                               "device": r.get("device", "") + (f" ({r['gpu']})" if r.get("gpu") else ""),
                               "machine": r.get("machine", ""),
                               "created_utc": r.get("created_utc", "")[:16].replace("T", " ")}
                              for r in records])
        versions = (frame.groupby(["git_sha", "code_digest", "device", "machine"], sort=False)
                    .created_utc.agg(runs="size", first="min", last="max").reset_index())
        page.paragraph(f"The {len(records)} runs audited were made by (first and last: UTC):")
        by_version = versions.astype(str).T  # one column per code version: narrow enough for a phone
        by_version.columns = [f"version {n + 1}" for n in range(len(versions))] if len(versions) > 1 else ["made by"]
        page.table(by_version.rename(index=render.header).rename_axis("").reset_index())
        packages = pd.DataFrame([r.get("packages", {}) for r in records]).astype(str)
        page.paragraph("Packages: " + ", ".join(
            f"{name} {' / '.join(sorted(set(packages[name])))}" for name in packages.columns)
            + f"; Python {' / '.join(sorted({r.get('python', '?') for r in records}))}.", kind="small")
    for note in notes:
        page.paragraph(note, kind="small")
    page.bullets([
        [Strong("audit: "), f"verdicts.json written {audited.isoformat(timespec='seconds') if audited else 'never'}, "
                            f"rules versions {versions_text(RULES_VERSIONS)}; this page written "
                            f"{datetime.now(UTC).isoformat(timespec='seconds')} by git {git_sha()}"],
        [Strong("seeds: "), _ranges(sorted(int(s) for s in result.l1.seed.unique())) if not result.l1.empty else ""],
        [Strong("params: "), f"domain {params.domain}, params hash {params.digest()} (what shapes a run)"],
        [Strong("panel-matched study: "), _study(result)],
        [Strong("generic calibration: "), (f"{calibration['file']} ({calibration['created_utc']}, git "
                                           f"{calibration['git_sha']})" if calibration.get("rates")
                                           else calibration["note"])],
    ])
    page.preformatted("the resolved parameters (params.to_dict())",
                      yaml.safe_dump(params.to_dict(), sort_keys=False, default_flow_style=None, width=110))


def _short(sha: str) -> str:
    """A git SHA as 12 digits (enough to check it out), with its "+dirty"."""
    head, plus, rest = sha.partition("+")
    return head[:12] + plus + rest if len(head) == 40 else sha


def _study(result: AuditResult) -> str:
    """Which panel-matched study gave the error rates, or why none did."""
    rates = result.error_rates
    if rates.get("error_rates"):
        return f"{rates.get('file')} ({rates.get('created_utc')})"
    if rates.get("note"):
        return rates["note"]
    return "none: a synthetic domain carries its own truth" if result.kind == "synthetic" else "none was read"


def build_page(result: AuditResult, params: Params, runs_root: Path, data_root: Path, tables_dirs: Sequence[Path] = ()
               ) -> Page:
    """The report page of ``result`` (see the module's docstring)."""
    calibration = generic_calibration(list(tables_dirs), result.gate_memory)  # the reach reading's model too
    page = Page(f"Audit report: {result.domain}")
    page.heading(1, f"Audit report: {result.domain}")
    seeds, methods = (result.l1.seed.nunique(), result.l1.method.nunique()) if not result.l1.empty else (0, 0)
    runs = shown(Path(runs_root) / result.domain, Path(runs_root).parent)  # no folder of the machine on the page
    page.paragraph(f"The layered lag audit (L0-L3) of {result.kind} domain ", Code(result.domain), f": {seeds} seeds "
                   f"x {methods} methods from ", Code(runs), ". Sections: ",
                   Link("verdicts", "#verdicts"), ", ", Link("figures", "#figures"), ", ", Link("data", "#data"),
                   ", ", Link("runs", "#runs"), ", ", Link("provenance", "#provenance"), ".", kind="small")
    _verdicts(page, result, calibration)
    _figures(page, result, data_root)
    _data(page, result, params, data_root)
    _runs(page, result)
    _provenance(page, result, params, runs_root, calibration)
    return page


def _write(data: bytes, sink) -> None:
    sink.write(data)


def write_audit_report(result: AuditResult, params: Params, runs_root: Path, data_root: Path, out_dir: Path,
                       tables_dirs: Sequence[Path] = ()) -> tuple[Path, Path]:
    """``report.html`` and ``report.md`` (with its figures in ``report_figures/``) in ``out_dir``, the audit's
    folder; the generic calibration is read from the first of ``tables_dirs`` that has one. Each file is written
    atomically, and figures of an earlier report that this one no longer draws are removed."""
    out_dir = Path(out_dir)
    page = build_page(result, params, Path(runs_root), Path(data_root), tables_dirs)
    markdown, files = render_markdown(page)
    folder = out_dir / FIGURES_FOLDER
    for stale in folder.glob("*.png") if folder.is_dir() else ():
        if f"{FIGURES_FOLDER}/{stale.name}" not in files:
            stale.unlink()
    for path, png in files.items():
        atomic_write(out_dir / path, functools.partial(_write, png), binary=True)
    html_path, md_path = out_dir / AUDIT_PAGE, out_dir / AUDIT_MARKDOWN
    atomic_write(html_path, lambda f: f.write(render_html(page)))
    atomic_write(md_path, lambda f: f.write(markdown))
    return html_path, md_path
