"""Tests of acgate.notebook.execution: headless execution of toy notebooks, their logs, progress lines and kernels."""

import os
import socket
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from acgate.notebook import execution
from acgate.notebook.execution import execute_notebook, execute_notebooks

ROOT = Path(__file__).resolve().parents[2]


def toy_notebook(path: Path, cells: str) -> Path:
    """A percent-format notebook at ``path``: 03_train's Jupytext header (its kernelspec) and then ``cells``."""
    header = (ROOT / "notebooks" / "03_train.py").read_text().split("# %% [markdown]")[0]
    path.write_text(header + cells)
    return path


def test_a_failing_notebook_leaves_its_partial_copy_and_log_and_no_output(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    source = toy_notebook(tmp_path / "fails.py", '# %% tags=["parameters"]\nvalue = 1\n\n'
                          '# %%\nimport os\nprint("before, threads", os.environ["OMP_NUM_THREADS"])\n\n'
                          '# %%\nraise ValueError(f"broken {value}")\n')
    output = tmp_path / "out" / "fails.ipynb"
    with pytest.raises(RuntimeError, match=r"fails.py failed: ValueError: broken 7\n  parameters: \{'value': 7\}"):
        execute_notebook(source, output, {"value": 7})
    assert not output.exists()
    partial = nbformat.read(output.with_name(".fails.partial.ipynb"), as_version=4)
    error = partial.cells[-1].outputs[-1]
    assert error.output_type == "error" and error.evalue == "broken 7"
    log = output.with_suffix(".log").read_text()
    assert "before, threads 1" in log and "ValueError: broken 7" in log  # the kernel ran on one thread
    assert "OMP_NUM_THREADS" not in os.environ  # and this process's environment is as it was


@pytest.mark.skipif(os.name != "posix", reason="Unix sockets: POSIX only (elsewhere the kernel uses TCP)")
def test_a_kernel_starts_though_the_tcp_ports_jupyter_would_give_it_are_taken(tmp_path, monkeypatch):
    # jobs starting kernels at once can take each other's ports between Jupyter's choice and the kernel's bind; here
    # every port Jupyter would pick is held by a listening socket (with TCP, the kernel dies at its start)
    from jupyter_client.provisioning.local_provisioner import LocalPortCache

    source = toy_notebook(tmp_path / "ports.py", '# %%\nprint("started")\n')
    # where the kernel's sockets go: a short path of its own (a Unix socket's path has at most 107 characters, which
    # a pytest-xdist worker's tmp_path can pass)
    sockets = Path(tempfile.mkdtemp(prefix="ports", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(sockets))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        monkeypatch.setattr(LocalPortCache, "find_available_port", lambda self, ip: taken.getsockname()[1])
        execute_notebook(source, tmp_path / "ports.ipynb", {})
    assert nbformat.read(tmp_path / "ports.ipynb", as_version=4).cells[-1].outputs[0]["text"] == "started\n"
    assert not list(sockets.iterdir())  # the sockets' folder is gone with the kernel
    sockets.rmdir()


def test_progress_lines_reach_the_terminal_and_the_rest_stays_in_the_log(tmp_path, capfd):
    source = toy_notebook(tmp_path / "talks.py", '# %%\nprint("  [acgate seed 4] epoch  25/200  train 0.1")\n'
                          'print("a table row")\nprint("[calibration 3/19] 2 replicates running")\n'
                          'print("[1 2] an array")\n')
    execute_notebook(source, tmp_path / "toy" / "seed04" / "talks.ipynb", {})
    terminal = capfd.readouterr().err
    assert "toy/seed04: [acgate seed 4] epoch  25/200  train 0.1" in terminal and "a table row" not in terminal
    assert "toy/seed04: [calibration 3/19] 2 replicates running" in terminal and "an array" not in terminal
    assert "a table row" in (tmp_path / "toy" / "seed04" / "talks.log").read_text()


def test_a_progress_bar_reaches_the_terminal_every_few_seconds(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(execution, "BAR_EVERY", 0.5)
    source = toy_notebook(tmp_path / "bar.py", "# %%\nimport sys, time\nfrom tqdm import tqdm\n"
                          "for _ in tqdm(range(30), desc='acgate seed 4', file=sys.stdout, mininterval=0):\n"
                          "    time.sleep(0.1)\n")
    execute_notebook(source, tmp_path / "toy" / "seed04" / "bar.ipynb", {})
    echoed = [line for line in capfd.readouterr().err.splitlines() if line.startswith("toy/seed04: acgate seed 4:")]
    assert 1 <= len(echoed) <= 10  # 3 s of a bar redrawn 30 times: a line every 0.5 s or so, not every redraw


def test_notebooks_sharing_a_kernel_see_only_what_they_define(tmp_path, monkeypatch):
    source = toy_notebook(tmp_path / "shared.py", '# %% tags=["parameters"]\nseed = 0\n\n'
                          '# %%\nimport warnings\nassert "left_over" not in globals(), left_over\n'
                          'left_over = seed\nwarnings.warn(f"shown in every notebook ({seed})")\n')
    runs = [(tmp_path / f"seed{seed:02d}" / "shared.ipynb", {"seed": seed}) for seed in (3, 4)]
    assert len(execute_notebooks(source, runs)) == 2
    for output, parameters in runs:
        nb = nbformat.read(output, as_version=4)
        cells = [c for c in nb.cells if c.cell_type == "code"]
        assert [c.execution_count for c in cells] == [1, 2, 3]  # numbered as in a fresh kernel
        assert f"shown in every notebook ({parameters['seed']})" in cells[-1].outputs[0]["text"]
        assert output.with_suffix(".log").is_file()
    # the check can fail: without clearing the kernel between them, the second notebook sees the first's name
    monkeypatch.setattr(execution, "RESET", "pass")
    with pytest.raises(RuntimeError, match=r"shared.py failed: AssertionError: 3\n  parameters: \{'seed': 4\}\n  "
                                           r"log: .*seed4\.log\n  partly .*\n  the kernel's own output .*seed3\.log$"):
        execute_notebooks(source, [(tmp_path / "again" / f"seed{s}.ipynb", {"seed": s}) for s in (3, 4)])
    assert (tmp_path / "again" / "seed3.ipynb").is_file() and not (tmp_path / "again" / "seed4.ipynb").exists()


def test_progress_lines_name_a_notebook_by_its_last_two_folders():
    assert execution.where(Path("/work/runs/economics/seed03/03_train.ipynb")) == "economics/seed03"
    assert execution.where(Path("/tmp/study.ipynb")) == "tmp"  # not "//tmp"


def test_a_notebook_silent_for_a_while_says_which_cell_it_is_running(tmp_path, capfd, monkeypatch):
    """04_audit and 05_report computed for up to 86 s with nothing on the terminal; after HEARTBEAT seconds without a
    line, the runner says which cell runs (and stops when the notebook ends)."""
    monkeypatch.setattr(execution, "HEARTBEAT", 0.5)
    source = toy_notebook(tmp_path / "quiet.py", '# %% tags=["parameters"]\nvalue = 1\n\n'
                          "# %%\nx = 1\n\n# %%\nimport time\ntime.sleep(2.5)\n")
    execute_notebook(source, tmp_path / "toy" / "audit" / "quiet.ipynb", {"value": 2})
    beats = [line for line in capfd.readouterr().err.splitlines() if "quiet.py: running cell" in line]
    assert beats and all(line.startswith("toy/audit: quiet.py: running cell ") for line in beats), beats
    assert "running cell 4 of 4 (" in beats[-1]  # the parameters, the injected ones, two cells: the last runs
    time.sleep(1.5)
    assert "running cell" not in capfd.readouterr().err  # the heartbeat ended with the notebook
