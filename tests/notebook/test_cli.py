"""Tests of the command line of acgate.notebook (``python -m acgate.notebook run|html``, its ``__main__.py``)."""

import argparse
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from acgate.notebook import __main__


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, whose writes fail as a full disk's do")
def test_a_full_disk_stops_the_html_view_with_the_cause_and_the_file(tmp_path, monkeypatch):
    """A write on a full disk fails with "No space left on device" and no file name; the view stops with both (the
    workflow shows it in the terminal, as the step's log may be what cannot be written) and leaves no half page."""
    monkeypatch.chdir(tmp_path)
    executed = Path("runs/d/seed00/03_train.ipynb")
    executed.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), executed)
    real_open = io.open

    def full_disk(file, mode="r", *args, **kwargs):  # every file opened for writing is full
        if "w" not in mode:
            return real_open(file, mode, *args, **kwargs)
        if isinstance(file, int):  # a descriptor (a temporary file's), handed over to the file object
            os.close(file)
        return real_open("/dev/full", mode, *args, **kwargs)

    monkeypatch.setattr(io, "open", full_disk)
    with pytest.raises(SystemExit) as stop:
        __main__.main(["html", "runs/html/index.html", str(executed)])
    assert re.search(r"the HTML view runs/html/index.html failed: \[Errno 28\] No space left on device: "
                     r"'runs/html/runs/d/seed00/03_train.html'", str(stop.value.code)), stop.value.code
    assert [p for p in Path("runs/html").rglob("*") if p.is_file()] == []


def test_the_notebooks_import_nothing_of_the_runner(tmp_path):
    """Every notebook imports acgate.notebook (for resolve); Jupytext, nbformat and Papermill stay out of the kernel,
    as does jsonschema under them, whose optional IRI grammar (rfc3987_syntax) takes seconds to import. The runner
    process does without that grammar too."""
    probe = ("import sys, acgate.notebook.resolve, acgate.models.runner, acgate.audit.domain_audit, "
             "acgate.report.paper_tables; "
             "print(sorted(m for m in ('jupytext', 'nbformat', 'papermill', 'jsonschema') if m in sys.modules))")
    kernel = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert kernel.stdout.strip() == "[]", kernel.stdout
    header = "# ---\n# jupyter:\n#   kernelspec:\n#     display_name: Python 3\n#     name: python3\n# ---\n"
    (tmp_path / "tiny.py").write_text(header + "# %%\nx = 1\n")
    probe = ("import sys, acgate.notebook.__main__ as cli; cli.main(['run', sys.argv[1], sys.argv[2]]); "
             "print('jsonschema' in sys.modules, sys.modules.get('rfc3987_syntax', 'absent'))")
    runner = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "tiny.py"), str(tmp_path / "tiny.ipynb")],
                            capture_output=True, text=True)
    assert runner.returncode == 0, runner.stderr[-2000:]
    assert runner.stdout.split("\n")[-2] == "True None", runner.stdout  # jsonschema imported, without the grammar


def test_a_parameter_that_is_not_valid_yaml_names_its_key_and_the_list_syntax():
    assert __main__._parameter("methods=[acgate, tft]") == ("methods", ["acgate", "tft"])
    with pytest.raises(argparse.ArgumentTypeError, match=r"parameter methods: '\[acgate, tft' is not valid YAML .*"
                                                         r"written like 'methods=\[acgate, tft\]'"):
        __main__._parameter("methods=[acgate, tft")


def test_every_parameter_is_described_on_its_own_line():
    """papermill --help-notebook prints a parameter's inline comment: one that went on to a comment line below was cut
    mid-sentence. Every line of a parameters cell is `name: type = default  # what it is`."""
    root = Path(__file__).resolve().parents[2]
    for notebook in sorted((root / "notebooks").glob("0*.py")):
        cell = notebook.read_text().split('# %% tags=["parameters"]\n', 1)[1].split("# %%", 1)[0]
        for line in cell.strip().splitlines():
            assert re.fullmatch(r"\w+: \w+ = .+  # .+", line), f"{notebook.name}: {line}"
