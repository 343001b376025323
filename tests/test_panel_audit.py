"""acgate.audit_panel: a DataFrame audited in one call, through the workflow's own steps."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import acgate
from acgate.audit.domain_audit import read_audit
from acgate.config import load_params
from acgate.data.example import example_frame

METHODS = ["acgate", "no_ac_encoder", "moderated_dl", "shared_dl", "shuffled_dl", "proxy_scaled_dl"]


@pytest.mark.slow
def test_a_dataframe_is_audited_in_one_call_and_a_second_call_trains_nothing(tmp_path):
    frame = example_frame()  # the example panel, with its own column names (region, year, outcome, ...)
    lines = []
    kwargs = dict(entity="region", time="year", target="outcome", features=["driver"],
                  proxies=["mean:capacity", "mean:openness"], static=["size"],
                  stratifiers=["mean:governance", "mean:survey_noise"], seeds=2, methods=METHODS, workdir=tmp_path,
                  train={"max_epochs": 5}, audit={"permutations": 99, "bootstrap": 99, "true_lag": "true_lag"},
                  study_replicates=1, study_neural_replicates=0, study_seeds=2, study_null_replicates=1, jobs=1)
    result = acgate.audit_panel(frame, log=lines.append, **kwargs)
    written = read_audit(result.report.parent)  # what the workflow's audit writes, read back
    assert result.result.verdicts_by_reference == written.verdicts_by_reference
    assert written.gate_memory is False  # the model the page's calibration and reach map are of
    page = result.report.with_suffix(".md").read_text()  # the repository's calibration of that model
    assert "Generic error rates" in page and "tables/gate_memory_off/audit_calibration.csv (" in page
    table = result.verdicts
    assert list(table.columns) == ["reference", "layer", "verdict", "paper_rule", "evidence"]
    assert set(table.reference) == {"acgate", "moderated_dl", ""} and len(table) == 9
    text = str(result.summary())
    assert "AC-GATE audit of my_panel: 2 seeds" in text and "lags differ" in text and str(result.report) in text
    assert all(line in text for line in result.warnings)
    # the panel-matched study ran before the audit, and its rates stand beside the verdicts, the page's and the text's
    assert result.result.error_rates["settings"] == {"replicates": 1, "neural_replicates": 0, "seeds": 2}
    assert "On surrogates of this panel (1 a scenario, 0 with AC-GATE, 2 seeds each):\nfalse supports" in text
    heading = next(line for line in text.splitlines() if line.startswith("On surrogates of this panel"))
    assert len(heading) <= 100, heading  # one line of about 150 characters before
    assert "- L1 the proxies hold the lags, Moderated DL: false in " in text
    assert "- lags differ at all: false in" in text
    assert "- L1-L3, AC-GATE: not measured: the study trained no AC-GATE replicates" in text  # one line, not three
    assert "- L0 forecast" not in text  # the surrogates test no forecast
    assert list(result.rates().columns) == ["AC-GATE", "Moderated DL"]
    # the numbers behind the verdicts, as tables (they sat only in evidence strings and in result.result)
    assert result.tables["lag_tests"].p_vs_shared.dtype == float and len(result.tables["heldout"])
    assert {"rho", "p_perm", "lag_free_p"} <= set(result.tables["l2"].columns)
    assert len(repr(result)) < 400 and repr(result).startswith("<PanelAudit my_panel: acgate L0 ")
    assert "<table" in result._repr_html_()
    assert result.report.is_file() and (tmp_path / "params" / "my_panel.yaml").is_file()
    assert lines[0].startswith("my_panel: 40 entities, times 2000..2024 (validation from 2017, test from 2021)")
    # before it trains: where the reach map of AC-GATE without the gate's memory (an own panel's default) places
    # this panel (acgate.audit.reach)
    reach = next(i for i, line in enumerate(lines) if line.startswith(
        "my_panel: AC-GATE's reach (without the gate's memory; DGP panels whose"))
    assert "tables/reach/gate_memory_off)" in lines[reach]
    assert load_params(tmp_path / "params" / "my_panel.yaml").model.gate_memory is False
    assert reach < next(i for i, line in enumerate(lines) if line.startswith("my_panel: acgate: trained"))
    trained = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("metrics.json")}
    assert len(list((tmp_path / "runs" / "my_panel").glob("seed*/*/metrics.json"))) == 2 * len(METHODS)
    lines.clear()
    again = acgate.audit_panel(frame, log=lines.append, **kwargs)  # current runs and study are kept: nothing retrained
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("metrics.json")} == trained
    assert any("the panel-matched study in" in line and "kept" in line for line in lines)
    # each method says it kept its runs ("trained for 2 seeds" was logged for every method)
    assert all(f"my_panel: {method}: kept the 2 finished runs" in "\n".join(lines) for method in METHODS), lines
    assert not any("trained" in line for line in lines if line.startswith("my_panel: "))
    pd.testing.assert_frame_equal(again.verdicts, table)


def test_a_column_the_frame_lacks_is_named(tmp_path):
    frame = example_frame()
    with pytest.raises(KeyError, match=r"the frame has no column\(s\) 'capacty' \(it has region, year, "):
        acgate.audit_panel(frame, entity="region", time="year", target="outcome", features=["driver"],
                           proxies=["mean:capacty"], workdir=tmp_path)


@pytest.mark.parametrize(("size", "message"), [({"study_seeds": 0}, "study_seeds = 0: a whole number of 1 or more"),
                                               ({"study_replicates": -2}, r"study_replicates = -2: .* \(0: no study\)"),
                                               ({"jobs": "2"}, "jobs = '2': a whole number of 0 or more"),
                                               ({"study_replicates": 1_000_000, "study_seeds": 10_000},
                                                r"study_replicates = 1000000: at most 10000 \(the study's limits")])
def test_a_bad_study_size_stops_before_anything_is_written_or_trained(tmp_path, size, message):
    """A study's size is checked first: a bad one stopped only after the runs had trained (minutes)."""
    with pytest.raises(ValueError, match=message):
        acgate.audit_panel(example_frame(), entity="region", time="year", target="outcome", features=["driver"],
                           proxies=["mean:capacity", "mean:openness"], methods=METHODS, workdir=tmp_path,
                           log=lambda _: None, **size)
    assert not any(tmp_path.iterdir())


def test_no_call_writes_into_a_project_root_or_a_params_file_it_did_not_write(tmp_path, monkeypatch):
    """workdir=<the project root>, domain="economics" rewrote the tracked params/economics.yaml and trained into the
    paper's runs/economics/; "~/audit" made a folder named "~" in the working directory. Each call here also names a
    column the frame lacks, so that code without these checks stops before it writes anything."""
    root = Path(__file__).resolve().parents[1]
    tracked = (root / "params" / "economics.yaml").read_text()
    kwargs = dict(entity="region", time="year", target="outcome", features=["driver"], proxies=["mean:not_there"],
                  log=lambda _: None)
    with pytest.raises(ValueError, match=r"is a project's root .* give a folder of the audit's own"):
        acgate.audit_panel(example_frame(), workdir=root, domain="economics", **kwargs)
    assert (root / "params" / "economics.yaml").read_text() == tracked
    monkeypatch.setenv("HOME", str(tmp_path))
    foreign = tmp_path / "audit" / "params" / "my_panel.yaml"
    foreign.parent.mkdir(parents=True)
    foreign.write_text("domain: my_panel\n")
    with pytest.raises(ValueError, match=f"{foreign} exists and audit_panel did not write it"):
        acgate.audit_panel(example_frame(), workdir="~/audit", **kwargs)
    assert foreign.read_text() == "domain: my_panel\n"


SCRIPT = """
import acgate
from acgate.data.example import example_frame

frame = example_frame()
result = acgate.audit_panel(frame, entity="region", time="year", target="outcome", features=["driver"],
                            proxies=["mean:capacity", "mean:openness"], static=["size"],
                            stratifiers=["mean:governance"], workdir="my_audit", seeds=2,
                            methods=["moderated_dl", "shared_dl", "shuffled_dl", "proxy_scaled_dl"],
                            study_replicates=1, study_seeds=2, study_null_replicates=1, jobs=2)
print(result.summary())
"""


@pytest.mark.slow
def test_the_readmes_call_runs_in_a_plain_script_without_a_main_guard(tmp_path):
    """Pasted into my_audit.py and run with `python my_audit.py`, the README's call trained every run, started the
    panel-matched study and died with BrokenProcessPool: each worker of the study ran the script again. Here with
    the classical family, two seeds and one surrogate of each scenario (the study's processes are what matter)."""
    script = tmp_path / "my_audit.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Fatal Python error" not in done.stderr, done.stderr[-3000:]
    assert "surrogate audits of my_panel" in done.stdout and "AC-GATE audit of my_panel: 2 seeds" in done.stdout
    assert done.stdout.count("my_panel: 40 entities") == 1  # the script ran once, not once more per worker


CALL = dict(entity="region", time="year", target="outcome", proxies=["mean:capacity", "mean:openness"],
            log=lambda _: None)


def test_common_dataframe_mistakes_end_in_one_message_naming_the_fix(tmp_path):
    """A string for a list was read letter by letter ('d', 'r', 'i', ...); dates for years ended in an internal
    CSV's 'line 2' and params-file keys. Each now stops at the call, before anything is written."""
    frame = example_frame()
    with pytest.raises(TypeError, match=r"features='driver' is one string, .* pass a list, features=\['driver'\]"):
        acgate.audit_panel(frame, features="driver", workdir=tmp_path, **CALL)
    dated = frame.assign(year=pd.to_datetime(frame.year.astype(str) + "-01-01"))
    with pytest.raises(TypeError, match=r"column 'year' holds datetime64\[.s\] values: .*frame\.assign\(year=frame"
                                        r"\['year'\]\.dt\.year\)"):
        acgate.audit_panel(dated, features=["driver"], workdir=tmp_path, **CALL)
    assert not any(tmp_path.iterdir())


def test_a_frame_indexed_by_entity_and_time_is_taken_as_it_is(tmp_path):
    """As linearmodels and statsmodels panels are: the index is reset (it was refused as lacking both columns). The
    call then names the one column that is really missing."""
    indexed = example_frame().set_index(["region", "year"])
    with pytest.raises(KeyError, match=r"the frame has no column\(s\) 'not_there' \("):
        acgate.audit_panel(indexed, features=["driver"], static=["not_there"], workdir=tmp_path, **CALL)


def test_a_study_the_disk_cannot_hold_stops_before_anything_is_written(tmp_path, monkeypatch):
    """Within the size limits a study can still outgrow its disk (10,000 replicates of every scenario: hundreds of GB
    of runs, found hours in); the call estimates its runs' bytes first and stops naming both figures."""
    import shutil

    from acgate.audit import panel_matched

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(panel_matched.shutil, "disk_usage", lambda _: usage._replace(free=50_000_000))
    with pytest.raises(ValueError, match=r"the study would write about 0\.[1-9] GB of runs under .* that disk has 0.1 "
                                         r"GB free: ask for fewer replicates \(study_replicates"):
        acgate.audit_panel(example_frame(), features=["driver"], workdir=tmp_path, study_replicates=2,
                           study_null_replicates=2, **CALL)
    assert not any(tmp_path.iterdir())
    one = panel_matched.study_bytes([("one_curve", 0)], 0, {False: 4, True: 8}, 5, 88, 44)
    assert 4.8e6 <= one <= 2 * 4.8e6  # one classical replicate of the economics panel left 4.8 MB


def test_a_frame_whose_column_labels_are_integers_is_read_by_their_text(tmp_path):
    """A frame made from a NumPy array has the labels 0, 1, 2, ...: they were refused as "not a column name"; they are
    read as their text, as the audit's CSV header and params file write them. 0 and "0" in one frame are named."""
    import yaml

    frame = example_frame()
    number = {name: i for i, name in enumerate(frame.columns)}
    numbered = frame.rename(columns=number)
    result = acgate.audit_panel(numbered, entity=number["region"], time=number["year"], target=number["outcome"],
                                features=[number["driver"]],
                                proxies=[f"mean:{number['capacity']}", f"mean:{number['openness']}"],
                                methods=["moderated_dl"], seeds=1, study_replicates=0, workdir=tmp_path,
                                log=lambda _: None)
    written = yaml.safe_load((tmp_path / "params" / "my_panel.yaml").read_text().split("\n", 1)[1])
    data = written["data"]
    assert (data["entity_column"], data["features"]) == (str(number["region"]), [str(number["driver"])])
    assert written["audit"] == {"noise_draws": 200}  # the own panels' noise model, as the paper's domains'
    assert result.report.is_file() and set(result.verdicts.reference) >= {"moderated_dl"}
    clash = frame.assign(**{"0": 1.0}).rename(columns={"region": 0})
    with pytest.raises(ValueError, match=r"the frame's columns 0, '0' are the same name once written as text"):
        acgate.audit_panel(clash, entity=0, time="year", target="outcome", features=["driver"],
                           proxies=["mean:capacity"], workdir=tmp_path / "clash", log=lambda _: None)


def test_entities_left_out_by_preparation_are_named_at_the_call(tmp_path):
    """An entity with 3 rows was dropped without a word ("40 entities" for 41 given); the call now says which
    and why before anything trains."""
    frame = example_frame()
    short = frame[frame.region == frame.region.iloc[0]].head(3).assign(region="region_short")
    lines = []
    acgate.audit_panel(pd.concat([frame, short]), features=["driver"], workdir=tmp_path, methods=["moderated_dl"],
                       seeds=1, study_replicates=0, **{**CALL, "log": lines.append})
    left_out = next(line for line in lines if "left out" in line)
    assert left_out.startswith("my_panel: 1 of 41 entities left out: region_short (") and "entities.csv" in left_out


@pytest.mark.parametrize(("change", "error", "message"), [
    (lambda f: f.assign(outcome=1.0), "PrepError", r"target 'outcome' is 1 in every observed row of the training "
                                                   r"window \(before 2017\): there is nothing to forecast"),
    (lambda f: f.iloc[:0], "ValueError", "the frame has no rows"),
    (lambda f: f.assign(driver=1.0), "PrepError", r"feature 'driver' is 1 in every observed row of the training "
                                                  r"window \(before 2017\): the models read lags from a feature's "
                                                  r"changes over time, so it carries none"),
    (lambda f: f.assign(driver=f.region.str[-2:].astype(float)), "PrepError",
     r"feature 'driver' is constant within every entity \(it differs only between entities\)"),
])
def test_a_frame_with_nothing_to_forecast_stops_at_the_call(tmp_path, change, error, message):
    """A constant target trained every run and then stopped in the report's figures (ZeroDivisionError); an empty
    frame was "column 'year' holds no number"; a feature that never changes within an entity (a column of one value,
    or an entity-level one given as a feature) was audited without a word, though it carries no lag."""
    with pytest.raises(Exception, match=message) as raised:
        acgate.audit_panel(change(example_frame()), features=["driver"], workdir=tmp_path, methods=["moderated_dl"],
                           seeds=1, study_replicates=0, **CALL)
    assert type(raised.value).__name__ == error


def test_a_domain_name_too_long_for_a_file_name_is_refused_by_the_params_check(tmp_path):
    with pytest.raises(Exception, match=r"domain = 'd{250}' is not allowed: must be a plain name of letters, digits "
                                        r"and _, at most 100 of them"):
        acgate.audit_panel(example_frame(), features=["driver"], workdir=tmp_path, domain="d" * 250, **CALL)


def test_stray_and_placeholder_rows_do_not_stretch_the_window(tmp_path):
    """One 1950 row among 2000-2024 stretched the inferred window and split until every entity was dropped as
    mostly missing; rows for future years without a target put the test window where no target is. Both are left
    outside the window, and said."""
    frame = example_frame()
    future = frame[frame.year == 2024].assign(year=2025, outcome=np.nan)
    lines = []
    acgate.audit_panel(pd.concat([frame.iloc[:1].assign(year=1950), frame, future]), features=["driver"],
                       workdir=tmp_path, methods=["moderated_dl"], seeds=1, study_replicates=0,
                       **{**CALL, "log": lines.append})
    assert any(line.startswith("41 row(s) outside the window 2000..2024 left out") and "1950" in line
               for line in lines), lines
    assert any("times 2000..2024 (validation from 2017, test from 2021)" in line for line in lines)


def test_a_setting_given_as_a_plain_keyword_is_named_with_its_section(tmp_path):
    """`n_seeds=3` ended in "'int' object is not a mapping"."""
    with pytest.raises(TypeError, match=r"n_seeds=3 is no params section: .*seeds=.*train=\{'max_epochs': 100\}"):
        acgate.audit_panel(example_frame(), features=["driver"], workdir=tmp_path, n_seeds=3, **CALL)
    assert not any(tmp_path.iterdir())
