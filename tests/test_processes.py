"""acgate.processes: work in worker processes from any kind of caller, ending with it. Each caller runs in a
subprocess of its own: the pytest process cannot show what a plain script does."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from acgate import processes

ROOT = Path(__file__).resolve().parents[1]

# at the top level, without `if __name__ == "__main__":`, as a user pastes the README's call into a file; the
# replicates of a study in worker processes, as audit_panel runs them
CALLER = """
import json, os
from acgate.audit import calibration
from tests.test_processes import replicate
table = calibration.run_replicates([("a", 0), ("a", 1), ("b", 0), ("b", 1)], replicate, jobs=2, log=lambda _: None)
print("RESULT", json.dumps({"replicates": len(table), "pids": sorted(set(table.pid.tolist())), "caller": os.getpid()}))
"""


def replicate(name: str, replicate: int) -> list[dict]:
    """A replicate's record as calibration.run_replicates reads it, with the process that ran it."""
    return [{"control": "negative", "scenario": name, "replicate": replicate, "reference": "moderated_dl",
             "seconds": 0.0, "calibrated_L1": "not certified", "calibrated_L2": "not certified", "pid": os.getpid()}]


def _run(kind: str, folder: Path) -> str:
    """Run CALLER as ``kind`` of caller; its standard output."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    script = folder / "my_audit.py"
    script.write_text(CALLER)
    if kind == "notebook":
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CALLER)])
        nbformat.write(notebook, folder / "caller.ipynb")
        subprocess.run([sys.executable, "-m", "papermill", "--log-output", "-k", "python3",
                        str(folder / "caller.ipynb"), str(folder / "out.ipynb"), "--cwd", str(ROOT)], env=env,
                       check=True, capture_output=True, timeout=300)
        executed = nbformat.read(folder / "out.ipynb", as_version=4)
        return "".join(out.get("text", "") for out in executed.cells[0].outputs)
    command = {"script": [sys.executable, str(script)], "python -c": [sys.executable, "-c", CALLER],
               "ipython": [str(Path(sys.executable).with_name("ipython")), "--no-banner", str(script)]}[kind]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Fatal Python error" not in done.stderr, done.stderr[-3000:]  # the host ends cleanly, not in its shutdown
    return done.stdout


@pytest.mark.parametrize("kind", ["script", "python -c", "ipython", "notebook"])
def test_workers_run_from_any_caller_without_a_main_guard(kind, tmp_path):
    """A plain script that called audit_panel at its top level started the whole audit again in every worker of
    the study's pool ('An attempt has been made to start a new process before the current process has finished its
    bootstrapping phase', BrokenProcessPool, 13 minutes in)."""
    line = next(line for line in _run(kind, tmp_path).splitlines() if line.startswith("RESULT "))
    found = json.loads(line.removeprefix("RESULT "))
    assert found["replicates"] == 4
    assert found["caller"] not in found["pids"] and 1 <= len(found["pids"]) <= 2


def fail(x: int) -> int:
    raise ValueError(f"item {x} is bad")


def test_an_error_in_a_worker_is_raised_in_the_caller_with_its_traceback():
    with pytest.raises(ValueError, match="item 1 is bad") as raised:
        list(processes.results(fail, [1], jobs=1, heartbeat=5.0))
    assert any("in a worker process" in note and "fail" in note for note in raised.value.__notes__)


def slower_first(x: int) -> int:
    time.sleep(0.3 if x == 0 else 0.0)  # the first item finishes last
    return x * x


def test_in_order_gives_the_items_results_in_their_order_and_says_how_far(capsys):
    assert processes.in_order(slower_first, [0, 1, 2, 3], jobs=2, label="toy", every=2) == [0, 1, 4, 9]
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["toy: 2/4", "toy: 4/4"]
