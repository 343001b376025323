"""Tests of acgate.layout: where things live, and how a path is shown on a page or in a notebook's output."""

from pathlib import Path

from acgate import layout
from acgate.data import sources
from acgate.layout import project_root, shown


def test_a_path_is_shown_relative_to_the_project_root_or_the_base_given(tmp_path, monkeypatch):
    root = project_root()
    assert shown(root / "runs" / "economics" / "audit") == "runs/economics/audit"
    assert shown(tmp_path / "work" / "runs" / "d", base=tmp_path / "work") == "runs/d"  # an audit outside a project
    assert shown(tmp_path / "elsewhere.csv") == str(tmp_path / "elsewhere.csv")  # outside both: as given
    monkeypatch.chdir(tmp_path)  # no project at or above the working folder
    monkeypatch.delenv("ACGATE_ROOT", raising=False)
    assert shown(tmp_path / "runs" / "d", base=tmp_path) == "runs/d"
    assert shown(Path("relative/path")) == "relative/path"


def test_a_folder_given_with_a_tilde_is_in_the_home_folder(tmp_path, monkeypatch):
    """`runs_dir="~/audit"` made a folder literally named "~" in the working directory; so did `workdir=`."""
    monkeypatch.setenv("HOME", str(tmp_path))
    folders = layout.grid_folders([], runs_dir="~/audit", data_dir="~/data")
    assert folders["runs_dir"] == str(tmp_path / "audit") and folders["data_dir"] == str(tmp_path / "data")
    assert folders["tables_dir"] == str(tmp_path / "audit" / "tables")
    monkeypatch.setenv(sources.DATA_DIRS, "~/inputs")
    (tmp_path / "inputs").mkdir()
    assert sources.csv_path("~/inputs/panel.csv", tmp_path / "project") == tmp_path / "inputs" / "panel.csv"
