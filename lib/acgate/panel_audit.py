"""Audit a panel held in a pandas DataFrame in one call, on your own column names:

    import acgate
    result = acgate.audit_panel(frame, entity="region", time="year", target="outcome", features=["driver"],
                                proxies=["mean:capacity", "mean:openness"],
                                stratifiers=["mean:governance"], workdir="my_audit")
    print(result.summary())    # the verdicts at a glance (.as_html(), .as_latex() too)
    result.to_frame()          # the numbers: one row per reference and layer, the deciding p, the rates on the panel
    result.conf_int()          # each entity's k* per reference with its interval over seeds
    result.verdicts            # one row per reference and layer: verdict, evidence
    result.report              # my_audit/runs/<domain>/audit/report.html

It runs the steps of the workflow, through the same functions (no second implementation): the frame is written to
``<workdir>/data/raw/<domain>.csv`` and read back by the CSV loader (every check a CSV gets), the params are
validated by :func:`acgate.config.params_from_dict` and written to ``<workdir>/params/<domain>.yaml`` (so that
``make audit`` or the notebooks can run the same panel again), then preparation
(:mod:`acgate.data.prep`), training (:func:`acgate.models.runner.run_seeds`), the panel-matched study
(:func:`acgate.audit.panel_matched.run_study`: the rules' error rates on surrogates of this panel, and the smallest
lag spread each detects), the audit (:func:`acgate.audit.domain_audit.audit_domain`) and the audit report
(:mod:`acgate.report.audit_page`). Runs already on disk that are current for these params and this panel are kept,
and so is a study of the same size that is current, so a second call with the same arguments trains nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import yaml

from acgate.audit import panel_matched, reach, surrogates
from acgate.audit.domain_audit import AUDIT_TABLES, AuditResult, audit_domain
from acgate.audit.verdicts import LAYERS
from acgate.config import Params, params_from_dict
from acgate.data import prep
from acgate.data.panel import Panel
from acgate.layout import REPOSITORY_TABLES, audit_dir, panel_dir, panel_matched_dir, shown
from acgate.report.page_warnings import page_warnings
from acgate.runs import atomic_write, manifest, write_csv

if TYPE_CHECKING:
    from acgate.report.summary import AuditSummary

# the methods of params/example_panel.yaml: AC-GATE with the twins its calibrated L1 needs and its ablations, and
# the classical yardstick with its twins
OWN_PANEL_METHODS = ("acgate", "no_ac_encoder", "uniform_lag", "no_recon_reg", "shuffled_proxies",
                     "proxy_shared_gate", "moderated_dl", "shared_dl", "shuffled_dl", "proxy_scaled_dl",
                     "two_stage_dl")
HELD_OUT = (0.68, 0.84)  # default split: validation from 68 % of the time span, test from 84 %
# the first line of every params file audit_panel writes: a params file without it is someone else's, never replaced
WRITTEN_BY = "# written by acgate.audit_panel, which rewrites this file at each call: copy it to keep changes\n"


@dataclass
class PanelAudit:
    """What :func:`audit_panel` found: the audit (``result``, an :class:`acgate.audit.domain_audit.AuditResult`), its
    params, and where its report and runs are."""

    result: AuditResult
    params: Params
    report: Path  # the audit report page (report.html; report.md beside it)
    workdir: Path

    @property
    def verdicts(self) -> pd.DataFrame:
        """One row per reference method and layer (and one for "lags differ"): the calibrated verdict, the paper
        rule's, and the evidence."""
        rows = [{"reference": reference, "layer": layer, "verdict": found["calibrated"][layer]["verdict"],
                 "paper_rule": found["paper"][layer]["verdict"], "evidence": found["calibrated"][layer]["evidence"]}
                for reference, found in self.result.verdicts_by_reference.items() for layer in LAYERS]
        differ = self.result.lags_differ
        rows.append({"reference": "", "layer": "lags differ", "verdict": differ.get("verdict", ""),
                     "paper_rule": "", "evidence": differ.get("evidence", "")})
        return pd.DataFrame(rows)

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """The audit's numeric tables by name (docs/audit.md describes every column): ``l0`` (test loss per seed and
        method), ``l1``, ``l2`` and ``l2_summary`` (rho, the permutation and lag-free p, Holm p), ``l3``,
        ``heldout`` (the held-out comparisons' p), ``lag_tests`` (the GLS tests' F, p, rho, CD), ``wilcoxon``,
        ``seed_agreement``, ``kstar_by_entity`` and ``neural_vs_classical``: the numbers behind the verdicts, e.g.
        ``result.tables["lag_tests"][["p_vs_entity_scaled", "p_vs_shared"]]`` or ``.to_latex()`` of any."""
        return {name: getattr(self.result, name) for name in AUDIT_TABLES}

    @property
    def warnings(self) -> list[str]:
        """The problems (read these first) and the report page's warnings, each once: those the verdicts carry, and
        where the panel-matched rates, the lag tests' persistence or AC-GATE's reach say a verdict tells little here
        (:func:`acgate.report.page_warnings.page_warnings`)."""
        return [*self.result.problems, *page_warnings(self.result)[0]]

    def glance(self) -> pd.DataFrame:
        """The verdicts at a glance: one row per layer, one column per reference method."""
        table = self.verdicts
        wide = table[table.layer != "lags differ"].pivot(index="layer", columns="reference", values="verdict")
        wide = wide.reindex(list(LAYERS))
        wide.loc["lags differ"] = table.loc[table.layer == "lags differ", "verdict"].iloc[0]
        return wide.rename_axis(index=None, columns=None)

    def rates(self) -> pd.DataFrame:
        """Per layer and reference: how often the rule said "supported" on the null surrogates of the panel-matched
        study, and the smallest lag spread it detects in 80 % of them (or "not measured", and why)."""
        from acgate.report.audit_page import rates_at_a_glance  # matplotlib: imported where the report is drawn

        return rates_at_a_glance(self.result, list(self.glance().columns))

    def to_frame(self) -> pd.DataFrame:
        """The results as numbers, one row per reference and question (index: reference, layer; "lags differ" once,
        reference ""): the calibrated and the paper rule's verdict, the layer's headline statistic and value, the
        p-value the verdict turned on, alpha, and the panel-matched study's false supports of the worst null class
        with their 95 % interval and the smallest spread detected in 80 %
        (:func:`acgate.report.summary.audit_numbers` describes every column)."""
        from acgate.report.summary import audit_numbers  # with the report's modules: matplotlib

        return audit_numbers(self.result)

    @property
    def pvalues(self) -> pd.Series:
        """The p-value each calibrated verdict turned on, by (reference, layer); NaN where no test decided."""
        return self.to_frame().p_value

    def conf_int(self, alpha: float = 0.05) -> pd.DataFrame:
        """Each reference's k* per entity (index: reference, entity): the mean over seeds (``kstar``) with the
        ``lower`` and ``upper`` bounds of its t interval over the seeds at level 1 - ``alpha`` (training randomness
        only; NaN for a closed-form fit, which reads no seed), and the number of ``seeds``."""
        from acgate.report.summary import kstar_intervals

        return kstar_intervals(self.result, alpha)

    def to_latex(self) -> str:
        """:meth:`to_frame` as a booktabs LaTeX table (the layout of the repository's tables/*.tex)."""
        from acgate.report.render import latex_table

        return latex_table(self.to_frame().reset_index(), f"{self.params.domain}_numbers",
                           f"Audit of {self.params.domain}: the numbers the verdicts decided on")

    def summary(self) -> AuditSummary:
        """The glance table, one answer per question from both references (``acgate.report.reading``), the
        panel-matched error rates, the numbers behind the verdicts, the problems and warnings, and where the report
        is: ``print`` it, or ``as_text()``, ``as_html()`` (a notebook shows that by itself) and ``as_latex()``."""
        from acgate.report.summary import AuditSummary  # with the report's modules: matplotlib

        return AuditSummary.of(self.result, self.report, self.warnings, self.glance())

    def __repr__(self) -> str:
        glance = self.glance()
        cells = "; ".join(f"{reference} " + ", ".join(f"{layer} {glance.loc[layer, reference]}" for layer in LAYERS)
                          for reference in glance.columns)
        return (f"<PanelAudit {self.params.domain}: {cells}; lags differ "
                f"{glance.loc['lags differ'].iloc[0]}; summary() for more>")

    def _repr_html_(self) -> str:
        return self.summary().as_html()


def audit_panel(frame: pd.DataFrame, *, entity: str, time: str, target: str, features: Sequence[str],
                proxies: Sequence[str], stratifiers: Sequence[str] = (), static: Sequence[str] = (),
                seeds: int = 8, methods: Sequence[str] = OWN_PANEL_METHODS, split: tuple[int, int] | None = None,
                max_lag: int = 6, domain: str = "my_panel", workdir: str | Path = "acgate_audit",
                study_replicates: int = panel_matched.STUDY["replicates"],
                study_neural_replicates: int = panel_matched.STUDY["neural"],
                study_seeds: int = panel_matched.STUDY["seeds"],
                study_null_replicates: int = panel_matched.STUDY["null_replicates"], jobs: int = 0,
                log: Callable[[str], None] = print, **settings: Any) -> PanelAudit:
    """Audit the long panel ``frame`` (one row per entity and time) and write its audit report.

    Parameters
    ----------
    frame : pandas.DataFrame
        One row per entity and time, with the columns named below (others are ignored).
    entity, time : str
        The columns of the entity ids and of the time (whole numbers, one step apart: years, or steps). Integer
        column labels (a frame made from an array) are read as their text, here and in every argument below.
    target : str
        The column forecast.
    features : sequence of str
        Sequential feature columns, seen at lags 1..``max_lag``.
    proxies : sequence of str
        The entity proxies: ``mean:col``, ``trend:col``, ``first:col`` or ``last:col`` over the training window, or
        a column constant within each entity (docs/parameters.md, ``data.proxies``).
    stratifiers, static : sequence of str
        The L2 stratifiers and the static features, in the same forms (may be empty).
    seeds : int, default 8
        Seeds per method (8 are the fewest with which every layer can be supported).
    methods : sequence of str
        The methods trained (default: AC-GATE with its twins and ablations, and the classical yardstick with its).
    split : (int, int) or None
        The first validation and the first test time; None holds out the last 32 % of the time window, half of it for
        the test. The window runs from the first time at which half of the entities have a row to the last at which
        half have the target; rows outside it are named and left out.
    max_lag : int, default 6
        K, the longest lag.
    domain : str, default "my_panel"
        The panel's name (letters, digits and _): the folder names under ``workdir``.
    workdir : str or Path, default "acgate_audit"
        Where the CSV, the params file, the panel, the runs, the study and the audit go (``~`` is your home folder);
        runs there that are current are kept. A project's root (a folder with ``pyproject.toml``, such as this
        repository's) is refused, and so is a params file there that ``audit_panel`` did not write.
    study_replicates, study_neural_replicates, study_seeds, study_null_replicates : int, default 15, 0, 5, 36
        The panel-matched study: surrogates of each scenario, how many of them train the AC-GATE family too (7-17
        times a classical one's cost; about 20 measure AC-GATE's rates, which are "not measured" with 0), seeds
        each, and surrogates of each null scenario (0: ``study_replicates``; 36 with no false support bound the
        worst null class's rate below 10 %) (the workflow's ``panel_matched_*`` settings). More replicates make its
        error rates more precise, take longer and leave more runs on disk (a classical replicate of an 88 x 44
        panel about 5 MB; a study the disk cannot hold stops before anything is written).
        ``study_replicates=0`` leaves the study out: no error rates beside the verdicts.
    jobs : int, default 0
        Replicates of the study run at once, one process each; 0: one per CPU core.
    log : callable, default print
        Where the progress lines go (``lambda _: None`` for none).
    **settings
        Any other params section as a dict, e.g. ``train={"max_epochs": 100}`` or ``audit={"true_lag": "lag"}``.
        AC-GATE is trained without the gate's memory (``model.gate_memory: false``, as ``params/example_panel.yaml``
        has it: its k* then sits where the moderated distributed lag's does on panels with one lag for all);
        ``model={"gate_memory": True}`` trains the paper's model. The surrogates' noise model takes 200 simulated
        panels (``audit.noise_draws``, as in the paper's domains; the default is 20).

    Returns
    -------
    PanelAudit
        The verdicts, warnings and the report's path; ``summary()`` prints them.
    """
    if study_replicates != 0:  # 0 leaves the study out; a bad size stops here, before any training
        panel_matched.check_size(study_replicates, study_neural_replicates, study_seeds, jobs, study_null_replicates,
                                 names={"replicates": "study_replicates", "neural": "study_neural_replicates",
                                        "seeds": "study_seeds", "null_replicates": "study_null_replicates"},
                                 zero={"replicates": "0: no study"})
    workdir = _own_folder(workdir, domain)
    _check_arguments({"features": features, "proxies": proxies, "stratifiers": stratifiers, "static": static,
                      "methods": methods}, settings)
    frame = _long_frame(frame, entity, time)
    if not all(isinstance(label, str) for label in frame.columns):  # e.g. a frame made from a NumPy array
        frame = _text_labels(frame)
        entity, time, target = str(entity), str(time), str(target)
        features, proxies, stratifiers, static = ([str(v) for v in values]
                                                  for values in (features, proxies, stratifiers, static))
    columns = [entity, time, target, *features, *(prep.parse_summary(spec)[1] for spec in
                                                 (*proxies, *stratifiers, *static))]
    if isinstance(settings.get("audit"), dict) and settings["audit"].get("true_lag"):
        columns.append(settings["audit"]["true_lag"])
    missing = [c for c in dict.fromkeys(columns) if c not in frame.columns]
    if missing:
        raise KeyError(f"the frame has no column(s) {', '.join(map(repr, missing))} (it has "
                       f"{', '.join(map(str, frame.columns[:12]))}{', ...' if len(frame.columns) > 12 else ''}); "
                       "name the frame's own columns in entity, time, target, features, proxies, stratifiers, static")
    first, last = _window(frame, entity, time, target, log)
    val_start, test_start = split or (first + round(HELD_OUT[0] * (last - first + 1)),
                                      first + round(HELD_OUT[1] * (last - first + 1)))
    csv = workdir / "data" / "raw" / f"{domain}.csv"
    spec: dict[str, Any] = {"domain": domain, "n_seeds": seeds, "methods": list(methods),
                            "data": {"loader": "csv", "csv_file": str(csv.relative_to(workdir)),
                                     "entity_column": entity, "time_column": time, "first_time": first,
                                     "last_time": last, "target": target, "features": list(features),
                                     "proxies": list(proxies), "static": list(static),
                                     "stratifiers": list(stratifiers)},
                            "split": {"val_start": val_start, "test_start": test_start},
                            "model": {"max_lag": max_lag, "gate_memory": False}, "audit": {"noise_draws": 200}}
    for section, values in settings.items():
        spec[section] = {**spec.get(section, {}), **values}
    params = params_from_dict(spec, f"audit_panel({domain!r})")
    if study_replicates > 0:  # the disk must hold the study's runs before anything is written
        _check_room(workdir / "runs", params, (frame[entity].nunique(), last - first + 1), study_replicates,
                    study_neural_replicates, study_seeds, study_null_replicates)
    _write_if_changed(csv, frame[list(dict.fromkeys(columns))].to_csv(index=False))
    _write_if_changed(workdir / "params" / f"{domain}.yaml", WRITTEN_BY + yaml.safe_dump(spec, sort_keys=False))
    wanted = {"replicates": study_replicates, "neural_replicates": study_neural_replicates, "seeds": study_seeds,
              **({"null_replicates": study_null_replicates}
                 if study_null_replicates not in (0, study_replicates) else {})}
    return _audit(params, workdir, wanted, jobs, log)


def _audit(params: Params, workdir: Path, wanted: dict, jobs: int, log: Callable[[str], None]) -> PanelAudit:
    """The steps of :func:`audit_panel` once its params are written to ``workdir``: the panel, AC-GATE's reach
    reading, the runs, the audit, the panel-matched study of size ``wanted`` (none where its replicates are 0) and
    the report."""
    domain, data, split = params.domain, params.data, params.split
    data_root, runs_root = workdir / "data", workdir / "runs"
    panel = _prepared(params, workdir, log)
    log(f"{domain}: {panel.n_entities} entities, times {data.first_time}..{data.last_time} (validation from "
        f"{split.val_start}, test from {split.test_start}); {params.n_seeds} seeds x {len(params.methods)} methods "
        f"-> {runs_root}")
    surrogate_source = surrogates.fit_source(panel, params) if "acgate" in params.methods else None
    if surrogate_source:  # before training: can AC-GATE's k* read lags in panels like this one?
        about = surrogate_source.about
        placed = reach.reading(panel.n_entities, about["lagged_share_of_variance"], about["residual_ar1"],
                               gate_memory=params.model.gate_memory)
        log(f"{domain}: " + (placed["sentence"] if placed else
                             f"AC-GATE's reach: no map measured ({reach.committed_map(params.model.gate_memory)[1]})"))
    _train(panel, params, runs_root, log)
    result = audit_domain(params, runs_root, data_root)
    if wanted["replicates"] > 0:
        result.error_rates = panel_matched.at_seeds(
            _study(panel, params, panel_matched_dir(runs_root, domain), wanted, jobs, log, surrogate_source),
            params.n_seeds)
    out = audit_dir(runs_root, domain)
    result.write(out)
    from acgate.report.audit_page import write_audit_report  # matplotlib: imported where the report is drawn

    report, _ = write_audit_report(result, params, runs_root, data_root, out, [REPOSITORY_TABLES])
    log(f"{domain}: audited; report {report}")
    return PanelAudit(result, params, report, workdir)


def _check_arguments(names: dict[str, Any], settings: dict[str, Any]) -> None:
    """A TypeError naming the argument and the fix where a list of columns or methods (``names``) is one string, or a
    params section of ``settings`` is no dict."""
    for name, value in names.items():
        if isinstance(value, str):
            raise TypeError(f"{name}={value!r} is one string, which would be read letter by letter: pass a list, "
                            f"{name}=[{value!r}]")
    for section, values in settings.items():
        if not isinstance(values, dict):
            raise TypeError(f"{section}={values!r} is no params section: audit_panel's own settings are its "
                            "arguments (seeds=, max_lag=, split=, ...); any other setting goes in as a section, e.g. "
                            "train={'max_epochs': 100} (docs/parameters.md lists the sections)")


def _prepared(params: Params, workdir: Path, log: Callable[[str], None]) -> Panel:
    """The panel of the CSV file that ``params`` names under ``workdir``, prepared and saved under its
    ``data/processed/``, as the workflow's data step does; the entities left out are named in the log."""
    data_root = workdir / "data"
    long, source = prep.load_long(params, workdir)
    prepared = prep.prepare(long, params, source)
    prep.save(prepared, panel_dir(data_root, params.domain), manifest(params.to_dict(), seed=-1, device="none"))
    dropped = prepared.report[~prepared.report.kept]
    if len(dropped):
        log(f"{params.domain}: {len(dropped)} of {len(prepared.report)} entities left out: "
            + "; ".join(f"{row.entity} ({row.reason})" for row in dropped.head(5).itertuples())
            + ("; ..." if len(dropped) > 5 else "")
            + f" (all in {panel_dir(data_root, params.domain) / 'entities.csv'})")
    return prepared.panel


def _train(panel: Panel, params: Params, runs_root: Path, log: Callable[[str], None]) -> None:
    """Every method's ``params.n_seeds`` runs on ``panel`` under ``runs_root`` (runs that are current kept), a line
    per method."""
    from acgate.models.runner import run_seeds  # torch: imported where runs train

    for done, method in enumerate(params.methods, start=1):
        lines: list[str] = []
        run_seeds(dict.fromkeys(range(params.n_seeds), panel), params, method, runs_root, log=lines.append)
        kept = [line for line in lines if "] kept: " in line]
        said = (f"kept the {len(kept)} finished runs" if len(kept) == params.n_seeds else
                f"trained {params.n_seeds - len(kept)} seed(s)" + (f", kept {len(kept)}" if kept else ""))
        log(f"{params.domain}: {method}: {said} ({done} of {len(params.methods)} methods)")


def _study(panel: Panel, params: Params, out: Path, wanted: dict, jobs: int, log: Callable[[str], None],
           source: surrogates.Source | None = None) -> dict:
    """The error rates of the panel-matched study in ``out`` (:func:`acgate.audit.panel_matched.read_rates`), run
    first unless one of this size is there and current for this panel and these params (a reference whose rules are
    unchanged keeps its rates: its table is beside the record); ``source``: the panel's, where it was fitted."""
    record = out / panel_matched.RECORD
    found = panel_matched.read_rates(record, panel, params)
    if found["note"] or found["stale"] or found["settings"] != wanted:
        source = source or surrogates.fit_source(panel, params)
        study = panel_matched.run_study(source, params, out, replicates=wanted["replicates"],
                                        neural=wanted["neural_replicates"], seeds=wanted["seeds"], jobs=jobs,
                                        null_replicates=wanted.get("null_replicates", 0), keep=record, log=log)
        record.unlink(missing_ok=True)  # first: a run that stops before the record is written keeps nothing
        write_csv(record.with_suffix(".csv"), study.table, index=False)
        study.write_record(record, params)
        found = panel_matched.read_rates(record, panel, params)
    else:
        log(f"{params.domain}: the panel-matched study in {shown(out)} is current for this panel and size: kept")
    return found


def _window(frame: pd.DataFrame, entity: str, time: str, target: str, log: Callable[[str], None]) -> tuple[int, int]:
    """The panel's time window: from the first time at which at least half of the entities have a row to the last
    at which at least half have the target. A stray early row (one entity's 1950 among 2000-2024) stretched the
    window and the split inferred from it until every entity was dropped as mostly missing; placeholder rows of
    future years (no target) put the test window where no target is. The rows left outside are named."""
    if frame.empty:
        raise ValueError("the frame has no rows: audit_panel takes one row per entity and time")
    times = pd.to_numeric(frame[time], errors="coerce")  # a cell that is no whole number stops in the CSV loader
    if times.isna().all():
        raise ValueError(f"column {time!r} holds no number: times are whole numbers (years, or steps 0, 1, 2, ...)")
    half = frame[entity].nunique() / 2
    rows = frame.assign(**{time: times})
    present = rows.groupby(time)[entity].nunique()
    observed = rows[pd.to_numeric(rows[target], errors="coerce").notna()].groupby(time)[entity].nunique()
    starts, ends = present[present >= half].index, observed[observed >= half].index
    if starts.empty or ends.empty or starts.min() > ends.max():
        raise ValueError(f"no time at which half of the {frame[entity].nunique()} entities have a row and the target "
                         f"{target!r}: check the columns entity={entity!r}, time={time!r} and target={target!r}")
    first, last = int(starts.min()), int(ends.max())
    outside = rows[(rows[time] < first) | (rows[time] > last)]
    if len(outside):
        example = outside.iloc[0]
        log(f"{len(outside)} row(s) outside the window {first}..{last} left out (the window runs from the first "
            "time at which half of the entities have a row to the last at which half have the target), e.g. "
            f"{entity} {example[entity]!r} at {time} {example[time]:g}; trim the frame to choose another window")
    return first, last


def _long_frame(frame: pd.DataFrame, entity: str, time: str) -> pd.DataFrame:
    """``frame`` with the entity and time as columns: a frame indexed by them (as linearmodels and statsmodels
    panels are) is taken with its index reset. A time column of dates or periods stops with the fix (times are whole
    numbers: years, or steps)."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"frame is a {type(frame).__name__}: audit_panel takes a pandas DataFrame, one row per entity "
                        "and time")
    if {entity, time} & set(frame.index.names) and not {entity, time} <= set(frame.columns):
        frame = frame.reset_index()
    if time in frame.columns and (pd.api.types.is_datetime64_any_dtype(frame[time])
                                  or isinstance(frame[time].dtype, pd.PeriodDtype)):
        raise TypeError(f"column {time!r} holds {frame[time].dtype} values: times are whole numbers (years, or steps "
                        f"0, 1, 2, ...); pass frame.assign({time}=frame[{time!r}].dt.year) for yearly data")
    return frame


def _check_room(runs: Path, params: Params, shape: tuple[int, int], replicates: int, neural: int, seeds: int,
                null_replicates: int) -> None:
    """Stop where the disk under ``runs`` cannot hold the runs of the largest study of this size (every scenario;
    ``shape`` the panel's entities and steps): :func:`acgate.audit.panel_matched.check_room`."""
    order = panel_matched.plan(list(surrogates.SCENARIOS), replicates, neural, null_replicates)
    counts = {with_neural: len(panel_matched.methods(params, with_neural)) for with_neural in (False, True)}
    panel_matched.check_room(runs, panel_matched.study_bytes(order, neural, counts, seeds, *shape),
                             "study_replicates, study_neural_replicates, study_null_replicates")


def _text_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its column labels as text (0 -> "0"), as a params file and a CSV header hold them; the arguments
    that name its columns are read as their text too. Two labels with one text (0 and "0") stop with both named."""
    text = [str(label) for label in frame.columns]
    clashes = [label for label in frame.columns if text.count(str(label)) > 1]
    if clashes:
        raise ValueError(f"the frame's columns {', '.join(map(repr, clashes))} are the same name once written as text, "
                         "as the audit's CSV and params file write them; rename one, e.g. "
                         "frame.rename(columns={0: 'x0'})")
    return frame.set_axis(text, axis=1)


def _own_folder(workdir: str | Path, domain: str) -> Path:
    """``workdir`` as an absolute folder (``~`` expanded), or a ValueError naming it and the fix where a call would
    write into someone else's files: a project's root (``runs/<domain>/`` and ``params/<domain>.yaml`` there are a
    grid's: the paper's in this repository), or a params file that :func:`audit_panel` did not write."""
    folder = Path(workdir).expanduser().resolve()
    if (folder / "pyproject.toml").is_file():
        raise ValueError(f"workdir={str(workdir)!r} is a project's root ({folder} has pyproject.toml): audit_panel "
                         f"would write params/{domain}.yaml and runs/{domain}/ there, where the project keeps its own; "
                         f"give a folder of the audit's own, e.g. workdir={str(folder / 'my_audit')!r}")
    params = folder / "params" / f"{domain}.yaml"
    if params.is_file() and not params.read_text(errors="replace").startswith(WRITTEN_BY):
        raise ValueError(f"{params} exists and audit_panel did not write it (its first line is not {WRITTEN_BY!r}): "
                         f"it would be replaced; give another domain= or workdir=, or delete the file if an earlier "
                         "version of audit_panel wrote it")
    return folder


def _write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, unless it holds it already (its date then stays, for a workflow)."""
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: f.write(text))


