"""Tests of acgate.audit.calibration: replicates run in worker processes, and the calibration record."""

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil

from acgate.audit import calibration, verdicts

ROOT = Path(__file__).resolve().parents[2]


def test_replicates_in_worker_processes_report_while_they_run(small, tmp_path, monkeypatch):
    monkeypatch.setattr(calibration, "HEARTBEAT", 0.2)  # the workers take seconds just to start
    lines = []
    work = functools.partial(calibration.run_replicate, params=small, root=tmp_path)
    records = calibration.run_replicates([("lag_free", 0), ("lag_free", 1)], work, jobs=2, log=lines.append)
    assert sorted(zip(records.replicate, records.reference, strict=True)) == [
        (0, "acgate"), (0, "moderated_dl"), (1, "acgate"), (1, "moderated_dl")]
    assert lines[0] == ("[calibration 0/2] 2 replicates, 2 at a time; the time left is estimated once replicates of "
                        "each kind have finished")
    assert lines[1].startswith("[calibration 0/2] 2 replicates running (")
    assert [line.split("]")[0] for line in lines if "lag_free replicate" in line] == ["[calibration 1/2",
                                                                                       "[calibration 2/2"]


def test_the_time_left_is_costed_per_kind_of_replicate():
    """Worked by hand. The own-panel study ran its AC-GATE replicates (about 10x a classical one) first and estimated
    elapsed / done x left: "about 1285.7 min left" for a study of minutes. Each kind now costs its own mean, and no
    estimate is given while a kind left has none (costed as the classical ones, the first AC-GATE replicates of the
    example's study were "about 1.5 min left" of 3.9)."""
    seconds = {"classical": [10.0, 20.0], "with AC-GATE": []}
    assert calibration.remaining_minutes(seconds, ["with AC-GATE", "classical", "classical"], 2) is None
    assert calibration.remaining_minutes(seconds, ["classical", "classical"], 2) == 30 / 2 / 60
    seconds = {"classical": [10.0], "with AC-GATE": [100.0, 140.0]}
    assert calibration.remaining_minutes(seconds, ["classical"] * 6, 2) == 60 / 2 / 60
    assert calibration.remaining_minutes({"classical": []}, ["classical"], 1) is None


def test_a_broken_calibration_record_is_not_kept_and_says_why(tmp_path, small):
    """The workflow asks calibration.reusable while it loads: a truncated, non-object or partial record must give
    'not kept' with a reason (or be kept without the optional facts), never an exception."""
    (tmp_path / "audit_calibration.csv").write_text("scenario\n")
    record = tmp_path / calibration.RECORD
    for text in ('{"rules_version": 2, "sett', "[1, 2]", ""):
        record.write_text(text)
        kept, why = calibration.reusable(tmp_path, small, ["lag_free"], 3, 2)
        assert not kept and "calibration record" in why, why
    record.write_text(json.dumps({"rules_version": verdicts.RULES_VERSIONS,
                                  "settings": calibration.settings(small, ["lag_free"], 3, 2)}, default=list))
    kept, why = calibration.reusable(tmp_path, small, ["lag_free"], 3, 2)
    assert kept and "measured the current rules" in why


def sleep_and_say(name: str, replicate: int) -> list[dict]:
    """A replicate that names its process and sleeps: what a worker does while its runner is killed. One write of
    the whole line, so two workers' lines do not interleave ("worker 26948worker 26949" under load)."""
    os.write(sys.stdout.fileno(), f"worker {os.getpid()}\n".encode())
    time.sleep(120)
    return []


POOL = """
import sys
from acgate.audit import calibration
from tests.audit.test_calibration import sleep_and_say
calibration.run_replicates([("a", 0), ("a", 1)], sleep_and_say, jobs=2, log=lambda _: None)
"""


def _living(pids) -> list[int]:
    return [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def _all_end(pids, seconds: float) -> list[int]:
    """The processes of ``pids`` still alive after ``seconds`` (killed then, to leave nothing behind)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and _living(pids):
        time.sleep(0.2)
    alive = _living(pids)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    return alive


def test_worker_processes_end_with_the_runner_that_started_them():
    """A runner killed with SIGKILL (a notebook's kernel, a cluster's time limit) left its pool's workers running,
    orphaned, on replicates a rerun writes too; they now end within seconds."""
    runner = subprocess.Popen([sys.executable, "-c", POOL], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(runner.stdout.readline().split()[1]) for _ in range(2)]
    finally:
        runner.kill()
        runner.wait()
    assert _all_end(workers, 15) == [], "workers outlived their runner"


def test_processes_end_with_a_runner_killed_in_its_first_seconds():
    """A SIGKILL while the workers were still starting (importing PyTorch, before they knew their parent) left them
    and the resource tracker running for minutes. Every process started under the runner is followed until the
    kill, then must end."""
    runner = subprocess.Popen([sys.executable, "-c", POOL], cwd=ROOT, stdout=subprocess.DEVNULL)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            seen.update(p.pid for p in psutil.Process(runner.pid).children(recursive=True))
            time.sleep(0.05)
        grace = time.monotonic() + 0.5  # the host has started; its pool is starting
        while time.monotonic() < grace:
            seen.update(p.pid for p in psutil.Process(runner.pid).children(recursive=True))
            time.sleep(0.05)
    finally:
        runner.kill()
        runner.wait()
    assert seen, "nothing was started under the runner within 30 s"
    assert _all_end(seen, 15) == [], "processes outlived their runner"


INTERRUPTED = """
import faulthandler, signal
faulthandler.register(signal.SIGUSR1)  # the test asks for every thread's stack when the runner does not end
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, where the tests run with it ignored too
from acgate.audit import calibration
from tests.audit.test_calibration import sleep_and_say
calibration.run_replicates([("a", 0), ("a", 1), ("a", 2), ("a", 3)], sleep_and_say, jobs=2, log=print)
"""


def test_ctrl_c_stops_the_replicates_within_seconds_and_says_what_is_kept():
    """Ctrl-C in a terminal (SIGINT to the whole process group) printed nothing and stopped only after every queued
    replicate had run (about 80 s on the own-panel study), as the pool waited for them."""
    runner = subprocess.Popen([sys.executable, "-c", INTERRUPTED], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        workers = []
        while len(workers) < 2:
            line = runner.stdout.readline()
            if line.startswith("worker "):
                workers.append(int(line.split()[1]))
        os.killpg(runner.pid, signal.SIGINT)
        try:
            out, err = runner.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # where it hangs, for the failure to say
            os.kill(runner.pid, signal.SIGUSR1)
            time.sleep(1)
            runner.kill()
            out, err = runner.communicate(timeout=10)
            raise AssertionError(f"no end within 10 s of Ctrl-C; its output:\n{out}\nits threads:\n{err}") from None
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
    assert "KeyboardInterrupt" in err
    assert "[calibration 0/4] interrupted: the runs of the 0 finished replicates are kept on disk" in out
    assert _all_end(workers, 5) == [], "workers outlived the interrupted runner"


def test_the_printed_calibration_table_is_one_row_per_scenario_reference_and_rule():
    """The LaTeX view of a calibration: supported/replicates per layer, a star where "supported" is right."""
    import pandas as pd

    replicates = pd.DataFrame({"scenario": ["random_lags"] * 3 + ["ar_noise"] * 3, "reference": "moderated_dl",
                               "control": ["positive"] * 3 + ["negative"] * 3,
                               "lags_differ_truth": [True] * 3 + [False] * 3,
                               **{f"{rule}_{layer}": ["supported", "supported", "not certified"] * 2
                                  for rule in calibration.RULES for layer in ("L0", "L1", "L2", "L3")},
                               "lags_differ": ["supported", "not certified", "not certified"] * 2})
    table = calibration.calibration_table(replicates)
    compact = calibration.compact_table(table)
    assert len(compact) == 2 * len(calibration.RULES)
    first = compact[compact.rule == "calibrated"].iloc[0]  # the lags-differ statement: one per replicate
    assert (first.scenario, first.L1, first["lags differ"]) == ("random_lags", "2/3*", "1/3*")
    last = compact.iloc[-1]
    assert last.scenario == "ar_noise" and last.L1 == "2/3"  # no star: on a negative, "supported" is wrong


def test_the_lags_differ_and_stability_rows_are_the_classical_references():
    """Both statements are GLS tests of the classical fit, under its rules version, so only the classical reference's
    rows carry them: in a fresh table, and in one merged with kept rows of AC-GATE measured before (whose statement
    rows came from classical rules that may have changed since)."""
    import pandas as pd

    both = pd.DataFrame({"scenario": ["ar_noise"] * 4 + ["random_lags"] * 2, "control": "negative",
                         "reference": ["acgate", "acgate", "moderated_dl", "moderated_dl", "acgate", "acgate"],
                         "lags_differ_truth": False, "calibrated_L1": "not certified",
                         "lags_differ": ["supported", "supported", "not certified", "not certified",
                                         "supported", "not certified"],
                         "lags_changed": "not certified"})
    table = calibration.calibration_table(both).set_index(["scenario", "reference", "layer"])
    assert table.loc[("ar_noise", "moderated_dl", "lags differ"), "supported"] == 0
    assert ("ar_noise", "moderated_dl", "lags changed") in table.index
    assert not any(key in table.index for key in [(s, "acgate", layer) for s in ("ar_noise", "random_lags")
                                                  for layer in calibration.STATEMENTS])
    assert ("random_lags", "acgate", "L1") in table.index
    older = pd.DataFrame({"scenario": "ar_noise", "control": "negative", "reference": "acgate", "rule": "calibrated",
                          "layer": ["L1", "lags differ", "lags changed"], "truth": "not supported", "replicates": 2,
                          "supported": [0, 2, 1], "share_supported": [0.0, 1.0, 0.5], "ci_low": 0.0, "ci_high": 1.0})
    merged = calibration.merged_table(older, both[both.reference == "moderated_dl"])
    assert set(merged[merged.layer.isin(calibration.STATEMENTS)].reference) == {"moderated_dl"}
    assert ((merged.reference == "acgate") & (merged.layer == "L1")).sum() == 1


def test_ar_noise_controls_add_stationary_ar1_noise_of_their_coefficient(small):
    """The noise the AR controls add to the DGP's target (the same panel draw without it) has the scenario's lag-1
    autocorrelation and, from the first step on, its stationary sd, sd / sqrt(1 - coefficient^2)."""
    import dataclasses

    params = dataclasses.replace(small, synthetic=dataclasses.replace(small.synthetic, n_entities=2000))
    base = calibration.draw_panel("homogeneous_lags", params, 7).Y.astype(float)
    for name, (coef, sd) in calibration.AR_NOISE.items():
        noise = calibration.draw_panel(name, params, 7).Y.astype(float) - base
        stationary = sd / np.sqrt(1 - coef ** 2)
        assert abs(noise[:, 0].std() / stationary - 1) < 0.05 and abs(noise[:, -1].std() / stationary - 1) < 0.05
        lag1 = np.corrcoef(noise[:, 1:].ravel(), noise[:, :-1].ravel())[0, 1]
        assert abs(lag1 - coef) < 0.02, (name, lag1)


def test_the_calibration_measures_again_only_the_reference_whose_rules_changed(tmp_path):
    """06_audit_calibration beside a calibration of the same settings whose classical rows were measured under other
    rules keeps the AC-GATE rows, audits the classical family alone, and writes the table one calibration of both
    gives (the lag-free control is deterministic); the record names where the kept rows came from."""
    import pandas as pd

    from acgate.notebook.execution import execute_notebook

    common = {"scenarios": ["lag_free"], "negative_replicates": 2, "positive_replicates": 1, "jobs": 1,
              "runs_dir": str(tmp_path / "runs"), "tables_dir": str(tmp_path / "tables"),
              "figures_dir": str(tmp_path / "figures")}
    notebook = ROOT / "notebooks" / "06_audit_calibration.py"
    execute_notebook(notebook, tmp_path / "whole.ipynb", common)
    whole = pd.read_csv(tmp_path / "tables" / "audit_calibration.csv")
    record = json.loads((tmp_path / "tables" / calibration.RECORD).read_text())
    older = {**verdicts.RULES_VERSIONS, "moderated_dl": verdicts.RULES_VERSIONS["moderated_dl"] - 1}
    (tmp_path / "tables" / calibration.RECORD).write_text(json.dumps({**record, "rules_version": older}))
    execute_notebook(notebook, tmp_path / "again.ipynb", common)
    printed = "".join("".join(output.get("text", "")) for cell in json.loads((tmp_path / "again.ipynb").read_text())[
        "cells"] for output in cell.get("outputs", []))
    assert "the rows of acgate" in printed and "measured again: moderated_dl" in printed, printed[:2000]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "tables" / "audit_calibration.csv"), whole)
    again = json.loads((tmp_path / "tables" / calibration.RECORD).read_text())
    assert again["rules_version"] == verdicts.RULES_VERSIONS
    assert again["kept"]["acgate"]["created_utc"] == record["created_utc"]
    assert pd.read_csv(tmp_path / "runs" / "audit_calibration" / "replicates.csv").reference.unique().tolist() == [
        "moderated_dl"]


def test_the_common_shock_control_adds_one_ar1_shock_with_loadings_that_follow_z(small):
    """What common_shock adds to the DGP's target (the same panel draw without it) is one series f_t shared by every
    entity (rank one), AR(1) at the scenario's coefficient with the DGP's noise sd, times loadings a + b z."""
    import dataclasses

    params = dataclasses.replace(small, synthetic=dataclasses.replace(small.synthetic, n_steps=4000, n_entities=30))
    base = calibration.draw_panel("homogeneous_lags", params, 7)
    added = calibration.draw_panel("common_shock", params, 7).Y.astype(float) - base.Y.astype(float)
    coef, (a, b) = calibration.COMMON_SHOCK
    loadings = a + b * base.truth["z"]
    shock = added[0] / loadings[0]
    assert np.allclose(added, np.outer(loadings, shock), atol=1e-4)  # float32 targets
    assert abs(shock.std() / params.synthetic.noise_sd - 1) < 0.1
    assert abs(np.corrcoef(shock[1:], shock[:-1])[0, 1] - coef) < 0.03


def test_a_scenario_added_to_the_calibration_is_measured_alone(tmp_path, small):
    """Beside a calibration of the same settings but for its scenarios, one that adds a scenario keeps the earlier
    scenarios' rows of each reference whose rules are current and measures the new scenario alone; other replicate
    counts, or rules that changed, keep nothing of them."""
    import pandas as pd

    rows = pd.DataFrame({"scenario": ["lag_free", "lag_free", "homogeneous_lags"],
                         "reference": ["acgate", "moderated_dl", "moderated_dl"], "supported": [0, 0, 1]})
    rows.to_csv(tmp_path / "audit_calibration.csv", index=False)
    older = {"rules_version": verdicts.RULES_VERSIONS, "created_utc": "then",
             "settings": calibration.settings(small, ["lag_free", "homogeneous_lags"], 3, 2)}
    (tmp_path / calibration.RECORD).write_text(json.dumps(older, default=list))
    names = ["lag_free", "common_shock"]
    kept, kept_rows = calibration.kept_rates(tmp_path, small, names, 3, 2)
    assert sorted(kept) == ["acgate", "moderated_dl"] and kept["acgate"]["created_utc"] == "then"
    assert kept_rows.scenario.unique().tolist() == ["lag_free"]  # homogeneous_lags is not asked for
    measure = calibration.to_measure(kept_rows, names, ["acgate", "moderated_dl"])
    assert measure == {"lag_free": [], "common_shock": ["acgate", "moderated_dl"]}
    assert calibration.measured_text(measure) == ["acgate in common_shock", "moderated_dl in common_shock"]
    other, other_rows = calibration.kept_rates(tmp_path, small, names, 4, 2)
    assert other == {} and other_rows.empty
    stale = {**older, "rules_version": {**verdicts.RULES_VERSIONS, "acgate": verdicts.RULES_VERSIONS["acgate"] - 1}}
    (tmp_path / calibration.RECORD).write_text(json.dumps(stale, default=list))
    kept, kept_rows = calibration.kept_rates(tmp_path, small, names, 3, 2)
    assert list(kept) == ["moderated_dl"]
    assert calibration.to_measure(kept_rows, names, ["acgate", "moderated_dl"]) == {
        "lag_free": ["acgate"], "common_shock": ["acgate", "moderated_dl"]}
