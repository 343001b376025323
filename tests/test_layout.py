"""Tests of acgate.layout: where things live, and how a path is shown on a page or in a notebook's output."""

from pathlib import Path

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
