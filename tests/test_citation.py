"""CITATION.cff copies two facts from the package: its version (written once, as ``__version__`` in
lib/acgate/__init__.py, which pyproject.toml reads) and its license."""

import tomllib
from pathlib import Path

import yaml

import acgate

# the project root: the nearest folder above this file with a pyproject.toml (wherever under tests/ this file is)
ROOT = next(folder for folder in Path(__file__).resolve().parents if (folder / "pyproject.toml").is_file())


def test_citation_states_the_package_version_and_license():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "version" not in project and "version" in project["dynamic"]  # one source: acgate.__version__
    assert citation["version"] == acgate.__version__
    assert citation["license"] == project["license"] == "BSD-3-Clause"
