"""Fixtures shared by the test modules of acgate.tools."""

from pathlib import Path

import pytest
import yaml

from acgate.audit import surrogates
from acgate.config import load_params
from acgate.data import prep
from acgate.data.example import write_example
from acgate.data.panel import Panel
from acgate.layout import panel_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The example panel under the smoke profile, prepared in a temporary folder, and its surrogates' source."""
    tmp = tmp_path_factory.mktemp("example")
    spec = yaml.safe_load((ROOT / "params" / "example_panel.yaml").read_text())
    spec["data"]["csv_file"] = str(write_example(tmp / "example_panel.csv"))
    (tmp / "example_panel.yaml").write_text(yaml.safe_dump(spec))
    params = load_params(tmp / "example_panel.yaml", ROOT / "params" / "smoke_panel.yaml")
    long, source = prep.load_long(params, ROOT)
    prep.save(prep.prepare(long, params, source), panel_dir(tmp / "data", params.domain), {"note": "test"})
    panel = Panel.load(panel_dir(tmp / "data", params.domain))
    return params, tmp, surrogates.fit_source(panel, params)
