"""The paper's tables (acgate.report.paper_tables): a user's own panel getting a report about that panel only, the
note on a Wilcoxon p at its floor, the LaTeX views, the run manifest and the suite times."""

from types import SimpleNamespace

import pandas as pd
import pytest

from acgate import statistics
from acgate.layout import method_dir
from acgate.report import paper_tables, render
from acgate.runs import code_digest, code_versions
from tests.report.conftest import L2_COLUMNS, METHODS, l2_frame


def test_an_own_panel_gets_no_paper_only_tables(own_report, own_panel):
    tables, _ = own_report
    domain = own_panel[2]
    assert "reproduction" not in tables  # no domain of the paper was run
    assert "wilcoxon_real_r2" not in tables and f"{domain}_wilcoxon_r2" in tables
    assert set(tables[f"{domain}_wilcoxon_r2"].domain) == {domain}
    assert set(tables["controlled_comparison"].method) == set(METHODS)  # only the methods that ran
    assert paper_tables.caption(f"{domain}_wilcoxon_r2").startswith(f"{domain}: paired Wilcoxon")


def test_a_wilcoxon_p_at_the_floor_of_its_pairs_says_so():
    values = pd.Series([1.0, 2.0, 3.0, 4.0, 5.0])
    row = statistics.paired_wilcoxon(values * 2, values)  # 5 seeds, all better: p = 2/2^5
    wilcoxon = pd.DataFrame([{"metric": "test_mse", "reference": "acgate", "method": "tft", **row}])
    table = paper_tables.wilcoxon_table({"toy": SimpleNamespace(wilcoxon=wilcoxon)}, "test_mse", ["toy"])
    assert table.p[0] == pytest.approx(0.0625) and table.note[0] == "p at its floor for 5 pairs (every pair agrees)"


def test_the_l2_tables_show_their_main_columns_on_one_page_and_the_reproduction_no_latex(tmp_path):
    """economics_l2.tex ran to 4 stacked parts of 18 columns; the reproduction's LaTeX to 40 pages."""
    frame = l2_frame()
    paths = render.write_table(frame, tmp_path, "economics_l2", "Economics L2.", paper_tables.latex_view("economics_l2",
                                                                                                  frame))
    assert pd.read_csv(paths[0]).columns.tolist() == L2_COLUMNS and "lag-free p" in paths[1].read_text()
    assert r"\medskip" not in paths[2].read_text() and "lag-free" not in paths[2].read_text()
    (tmp_path / "reproduction.tex").write_text("stale")
    assert paper_tables.latex_view("reproduction", frame) is False
    paths = render.write_table(frame, tmp_path, "reproduction", "R.", paper_tables.latex_view("reproduction", frame))
    assert [p.suffix for p in paths] == [".csv", ".md"] and not (tmp_path / "reproduction.tex").exists()


def test_the_run_manifest_says_when_runs_were_made_by_different_code(own_panel, own_report):
    runs_root, _, _ = own_panel
    record = paper_tables.run_manifest(runs_root, own_report[1], [], [])
    assert record["runs_code_digest"] == [code_digest()] and record["code_versions"] is None
    manifests = [{"code_digest": "aaa", "git_sha": "1+dirty"}] * 3 + [{"code_digest": "bbb", "git_sha": "1+dirty"}]
    sentence = code_versions(manifests)
    assert sentence.startswith("these runs were made by 2 different versions of the code")
    assert "aaa (3 runs, git 1+dirty); bbb (1 runs, git 1+dirty)" in sentence and "retrain=true" in sentence


def test_suite_times_keep_the_last_whole_suite_per_device():
    def record(devices, made, wall, cores=2, load=1.9):
        return {"domains": {"a": {"runs": 30}, "b": {"runs": 10}}, "devices": devices, "training_seconds_total": 99.0,
                "machine": {"cores": cores, "cpu": "Some CPU", "load_average": [load, load, load]},
                "runs_git_sha": ["abc"], "created_utc": f"t{wall}",
                "workflow": {"wall_minutes_to_report": wall, "runs_made_in_this_invocation": made}}

    cpu = paper_tables.suite_times(record(["cpu"], 40, 31.5), {})
    assert cpu == {"cpu on 2 cores (Some CPU)": {"wall_minutes": 31.5, "runs": 40, "training_seconds_total": 99.0,
                                                  "runs_git_sha": ["abc"], "finished_utc": "t31.5",
                                                  "load_average_15min": 1.9, "loaded": False}}
    assert paper_tables.suite_times(record(["cpu"], 0, 0.4), cpu) == cpu  # only the report redone: not a suite time
    assert paper_tables.suite_times(record(["cpu"], 12, 9.0), cpu) == cpu  # a few runs redone
    both = paper_tables.suite_times(record(["cuda (NVIDIA H100)"], 40, 2.5, cores=16), cpu)
    assert both["cpu on 2 cores (Some CPU)"] == cpu["cpu on 2 cores (Some CPU)"]
    assert both["cuda (NVIDIA H100) on 16 cores (Some CPU)"]["wall_minutes"] == 2.5
    kept = paper_tables.suite_times(record(["cpu"], 40, 29.0), both)
    assert kept["cpu on 2 cores (Some CPU)"]["wall_minutes"] == 29.0
    partial = record(["cpu"], 40, 12.0)
    partial["workflow"]["skipped_domains"] = {"energy": "input files missing", "economics": "input files missing"}
    both = paper_tables.suite_times(partial, cpu)
    assert both["cpu on 2 cores (Some CPU), without economics, energy"]["wall_minutes"] == 12
    assert both["cpu on 2 cores (Some CPU)"]["wall_minutes"] == 31.5
    lighter = record(["cpu"], 40, 20.0)
    lighter["workflow"]["left_out_methods"] = {"economics": ["tft", "ganet"]}  # leave_out
    both = paper_tables.suite_times(lighter, cpu)
    assert both["cpu on 2 cores (Some CPU), without tft, ganet in economics"]["wall_minutes"] == 20
    assert both["cpu on 2 cores (Some CPU)"]["wall_minutes"] == 31.5


def test_a_suite_on_a_loaded_machine_does_not_replace_an_idle_ones_time():
    """suite_times.json kept a run on a loaded machine under the same key as an idle one, with no load: the 15-minute
    load average is kept, and a loaded suite goes beside an idle one, not over it."""
    def record(wall, load):
        return {"domains": {"a": {"runs": 40}}, "devices": ["cpu"], "training_seconds_total": 9.0,
                "machine": {"cores": 2, "cpu": "Some CPU", "load_average": [load, load, load]},
                "runs_git_sha": ["abc"], "created_utc": "t",
                "workflow": {"wall_minutes_to_report": wall, "runs_made_in_this_invocation": 40}}

    idle = paper_tables.suite_times(record(30.0, 1.8), {})
    busy = paper_tables.suite_times(record(55.0, 4.1), idle)
    assert busy["cpu on 2 cores (Some CPU)"]["wall_minutes"] == 30.0
    assert busy["cpu on 2 cores (Some CPU), loaded"] == {**busy["cpu on 2 cores (Some CPU), loaded"],
                                                         "wall_minutes": 55.0, "load_average_15min": 4.1,
                                                         "loaded": True}
    assert paper_tables.suite_times(record(28.0, 1.5), busy)["cpu on 2 cores (Some CPU)"]["wall_minutes"] == 28.0
    assert paper_tables.suite_times(record(50.0, 4.0), {})["cpu on 2 cores (Some CPU)"]["loaded"]  # none to keep


def test_a_damaged_model_file_is_named_with_the_fix(tmp_path):
    """A truncated model.pt ended the report with a torch error that named no file."""
    folder = method_dir(tmp_path, "synthetic_linear", 0, "acgate")
    folder.mkdir(parents=True)
    (folder / "model.pt").write_bytes(b"PK\x03\x04 cut short")
    results = {"synthetic_linear": SimpleNamespace(kind="synthetic", l1=pd.DataFrame({"method": ["acgate"],
                                                                                      "seed": [0]}))}
    with pytest.raises(ValueError, match=r"seed00/acgate/model.pt is damaged .*; delete its run folder"):
        paper_tables.controlled_comparison(tmp_path, results)
