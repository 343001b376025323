"""The notebooks run headlessly (Jupytext -> Papermill) under the smoke profile, and a re-execution
reproduces the cells marked NBVAL_CHECK_OUTPUT exactly (nbval, lax mode). The workflow that runs them in a
grid is tested in test_workflow.py."""

import argparse
import io
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import jupytext
import nbformat
import numpy as np
import pandas as pd
import pytest
import yaml

from acgate.audit import domain_audit as audit
from acgate.data.example import write_example
from acgate.notebook import __main__, execution
from acgate.notebook.execution import execute_notebook, execute_notebooks
from acgate.notebook.html_view import _exporter, _write_page, html_view
from acgate.report import inputs, paper_tables, render

ROOT = Path(__file__).resolve().parents[2]

SMOKE = "params/smoke.yaml"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return tmp_path_factory.mktemp("nb")


@pytest.fixture(scope="module")
def dgp_notebook(workspace):
    out = workspace / "02_synthetic_dgp.ipynb"
    execute_notebook(ROOT / "notebooks" / "02_synthetic_dgp.py", out,
                     {"domain": "synthetic_nonlinear", "seed": 1, "profile_file": SMOKE,
                      "data_dir": str(workspace / "data")})
    return out


@pytest.fixture(scope="module")
def suite_runs(workspace):
    runs = workspace / "runs"
    execute_notebook(ROOT / "notebooks" / "03_train.py", runs / "synthetic_linear" / "seed00" / "03_train.ipynb",
                     {"domain": "synthetic_linear", "seed": 0, "profile_file": SMOKE, "runs_dir": str(runs),
                      "data_dir": str(workspace / "data")})
    return runs


@pytest.fixture(scope="module")
def suite_audit(suite_runs, workspace):
    executed = suite_runs / "synthetic_linear" / "audit" / "04_audit.ipynb"
    execute_notebook(ROOT / "notebooks" / "04_audit.py", executed,
                     {"domain": "synthetic_linear", "profile_file": SMOKE, "runs_dir": str(suite_runs),
                      "data_dir": str(workspace / "data"), "seeds": 1})
    return executed


def nbval(notebook, workspace):
    env = {**os.environ, "ACGATE_ROOT": str(ROOT)}
    # a notebook's cells run in order: no reordering plugin (pytest-randomly) in this inner run
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "--nbval-lax",
                           str(notebook)], cwd=workspace, env=env, capture_output=True, text=True)


def checked_cells(notebook):
    nb = nbformat.read(notebook, as_version=4)
    return [c for c in nb.cells if c.cell_type == "code" and "NBVAL_CHECK_OUTPUT" in c.source]


def test_dgp_notebook_writes_the_panel_and_reproduces(dgp_notebook, workspace):
    assert (workspace / "data" / "processed" / "synthetic_nonlinear" / "seed01" / "panel.npz").is_file()
    nb = nbformat.read(dgp_notebook, as_version=4)
    assert any("injected-parameters" in c.metadata.get("tags", []) for c in nb.cells)
    assert sum(o.get("output_type") == "display_data" for c in nb.cells for o in c.get("outputs", [])) >= 3
    assert len(checked_cells(dgp_notebook)) == 1
    result = nbval(dgp_notebook, workspace)
    assert result.returncode == 0, result.stdout[-3000:]


def test_training_notebook_writes_every_method_and_its_log(suite_runs):
    seed_dir = suite_runs / "synthetic_linear" / "seed00"
    assert (seed_dir / "03_train.ipynb").is_file() and (seed_dir / "03_train.log").is_file()
    for method in ("acgate", "no_ac_encoder", "uniform_lag", "no_recon_reg", "plain_lstm", "tft", "ganet"):
        assert (seed_dir / method / "metrics.json").is_file()
    assert not list(seed_dir.glob(".*partial*")) and not list(seed_dir.glob(".*input*"))
    assert "epoch" in (seed_dir / "03_train.log").read_text()  # the training progress streams into the log


def test_training_notebook_reproduces_and_nbval_can_fail(suite_runs, workspace):
    executed = suite_runs / "synthetic_linear" / "seed00" / "03_train.ipynb"
    assert len(checked_cells(executed)) == 1
    result = nbval(executed, workspace)
    assert result.returncode == 0, result.stdout[-3000:]
    # the check is real: a changed stored output must fail
    nb = nbformat.read(executed, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and "NBVAL_CHECK_OUTPUT" in c.source)
    cell.outputs[0]["text"] = cell.outputs[0]["text"].replace("best epoch", "best epoch 9")
    tampered = workspace / "tampered.ipynb"
    nbformat.write(nb, tampered)
    assert nbval(tampered, workspace).returncode != 0


def test_audit_notebook_writes_the_audit_and_reproduces(suite_runs, suite_audit, workspace):
    audit_dir = suite_audit.parent
    for name in audit.AUDIT_TABLES:
        assert (audit_dir / f"{name}.csv").is_file()
    verdicts = json.loads((audit_dir / "verdicts.json").read_text())
    assert set(verdicts["verdicts"]) == {"L0", "L1", "L2", "L3"}
    l2 = pd.read_csv(audit_dir / "l2.csv")
    assert set(l2.stratifier) == {"latent_z", "noise"} and (l2.permutations == 2000).all()
    assert verdicts["excluded_runs"] == []  # the one seed asked for, every method current and complete
    assert len(checked_cells(suite_audit)) == 1
    result = nbval(suite_audit, workspace)
    assert result.returncode == 0, result.stdout[-3000:]
    matrix = paper_tables.verdict_table(inputs.audits(suite_runs, ["synthetic_linear", "synthetic_nonlinear"]))
    assert list(zip(matrix.domain, matrix.reference, strict=True)) == [("synthetic_linear", "acgate"),
                                                                       ("synthetic_linear", "moderated_dl")]
    columns = [f"{k} {rule}" for k in ("L0", "L1", "L2", "L3") for rule in ("paper", "calibrated")]
    assert list(matrix[columns].iloc[0]) == [verdicts[rule][k]["verdict"] for k in ("L0", "L1", "L2", "L3")
                                             for rule in ("verdicts_paper", "verdicts")]
    classical = verdicts["verdicts_by_reference"]["moderated_dl"]
    assert list(matrix[columns].iloc[1]) == [classical[rule][k]["verdict"] for k in ("L0", "L1", "L2", "L3")
                                             for rule in ("paper", "calibrated")]
    assert (matrix[paper_tables.MATCHED_COLUMN] == "").all()  # a synthetic domain has no panel-matched study
    assert (matrix["lags differ"] == verdicts["lags_differ"]["verdict"]).all()
    for method in ("moderated_dl", "two_stage_dl"):
        assert matrix[f"vs {method}"].iloc[0] == verdicts["neural_vs_classical"][method]["forecast"]
        assert matrix[f"vs {method}"].iloc[1] == ""


def test_summary_table_reads_the_audited_runs(suite_runs, suite_audit):
    audits = inputs.audits(suite_runs, ["synthetic_linear"])
    summary = paper_tables.synthetic_summary(suite_runs, audits).set_index("method")
    assert list(summary.index) == ["acgate", "no_ac_encoder", "uniform_lag", "no_recon_reg", "shuffled_proxies",
                                   "proxy_shared_gate", "plain_lstm", "tft", "ganet", "moderated_dl", "shared_dl",
                                   "shuffled_dl", "proxy_scaled_dl", "two_stage_dl"]
    assert summary.kstar_kind["acgate"] == "structural" and summary.kstar_kind["tft"] == "diagnostic: occlusion"
    assert np.isnan(summary.spearman_lag_centre_mean["uniform_lag"]) and summary.kstar_sd_mean["uniform_lag"] == 0
    lags = pd.read_csv(suite_runs / "synthetic_linear" / "seed00" / "acgate" / "lags.csv")
    assert summary.mae_lag_centre_mean["acgate"] == pytest.approx((lags.kstar - lags.kstar_true).abs().mean())
    assert np.isnan(summary.mae_lag_centre_sd["acgate"])  # one seed: no sd
    shown = render.display(summary.reset_index()).set_index("method")
    assert shown.loc["Uniform-Lag", "spearman_lag_centre"] == "undefined"
    assert shown.loc["AC-GATE", "mae_lag_centre"] == f"{(lags.kstar - lags.kstar_true).abs().mean():.3f}"


def test_data_prep_notebook_on_a_users_panel(workspace):
    csv = write_example(workspace / "own" / "example_panel.csv")
    spec = yaml.safe_load((ROOT / "params" / "example_panel.yaml").read_text())
    spec["data"]["csv_file"] = str(csv)
    params_file = workspace / "own" / "example_panel.yaml"
    params_file.write_text(yaml.safe_dump(spec))
    out = workspace / "own" / "01_data_prep.ipynb"
    execute_notebook(ROOT / "notebooks" / "01_data_prep.py", out,
                     {"domain": "example_panel", "params_file": str(params_file),
                      "data_dir": str(workspace / "own" / "data")})
    processed = workspace / "own" / "data" / "processed" / "example_panel"
    assert pd.read_csv(processed / "entities.csv").kept.sum() == 40
    manifest = json.loads((processed / "manifest.json").read_text())
    assert manifest["inputs"][0]["file"] == str(csv) and len(manifest["inputs"][0]["sha256"]) == 64
    result = nbval(out, workspace)
    assert result.returncode == 0, result.stdout[-3000:]


def test_data_prep_notebook_on_the_real_economics_panel(workspace, raw_dir):
    out = workspace / "econ" / "01_data_prep.ipynb"
    execute_notebook(ROOT / "notebooks" / "01_data_prep.py", out,
                     {"domain": "economics", "data_dir": str(workspace / "econ" / "data")})
    report = pd.read_csv(workspace / "econ" / "data" / "processed" / "economics" / "entities.csv")
    assert report.kept.sum() == 88
    reasons = report[~report.kept].reason.str.replace(r"\d\.\d\d", "x", regex=True).value_counts()
    assert reasons.to_dict() == {"target ctfp never observed in 1980..2023": 65,
                                 "missing share x > x (years lacking the target or a feature)": 15,
                                 "feature gdp_growth missing at the start or end (no extrapolation; "
                                 "data.feature_edges: leave_out_targets would keep the entity)": 11,
                                 "no training-window value for proxies 'mean:log_emp_hours'": 6}
    result = nbval(out, workspace)
    assert result.returncode == 0, result.stdout[-3000:]


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
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where the kernel's sockets go
    with socket.create_server(("127.0.0.1", 0)) as taken:
        monkeypatch.setattr(LocalPortCache, "find_available_port", lambda self, ip: taken.getsockname()[1])
        execute_notebook(source, tmp_path / "ports.ipynb", {})
    assert nbformat.read(tmp_path / "ports.ipynb", as_version=4).cells[-1].outputs[0]["text"] == "started\n"
    assert not list((tmp_path / "tmp").iterdir())  # the sockets' folder is gone with the kernel


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


def test_seeds_run_in_one_kernel_give_what_fresh_kernels_give(tmp_path, capfd):
    """The workflow's jobs run several seeds in one kernel (--seeds): the second seed's panel, runs and reproducible
    outputs are those of a kernel of its own, to the bit (methods with dropout and relaxed gates among them)."""
    data, shared, alone = tmp_path / "data", tmp_path / "shared", tmp_path / "alone"
    common = {"domain": "synthetic_linear", "profile_file": SMOKE, "methods": ["acgate", "tft", "ganet"]}
    dgp, dgp_alone = ROOT / "notebooks" / "02_synthetic_dgp.py", tmp_path / "dgp_alone"
    pattern = data / "processed" / "synthetic_linear" / "seed{seed:02d}" / "02_synthetic_dgp.ipynb"
    done = subprocess.run([sys.executable, "-m", "acgate.notebook", "run", str(dgp), str(pattern),
                           "domain=synthetic_linear", f"profile_file={SMOKE}", f"data_dir={data}", "--seeds", "0", "1"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    execute_notebook(dgp, dgp_alone / "02_synthetic_dgp.ipynb",
                     {"domain": "synthetic_linear", "seed": 1, "profile_file": SMOKE, "data_dir": str(dgp_alone)})
    panels = [np.load(d / "processed" / "synthetic_linear" / "seed01" / "panel.npz") for d in (data, dgp_alone)]
    assert set(panels[0].files) == set(panels[1].files)
    for name in panels[0].files:
        np.testing.assert_array_equal(panels[0][name], panels[1][name], err_msg=name)
    execute_notebooks(ROOT / "notebooks" / "03_train.py",
                      [(shared / "synthetic_linear" / f"seed{s:02d}" / "03_train.ipynb",
                        {**common, "seed": s, "runs_dir": str(shared), "data_dir": str(data)}) for s in (0, 1)])
    execute_notebook(ROOT / "notebooks" / "03_train.py", alone / "synthetic_linear" / "seed01" / "03_train.ipynb",
                     {**common, "seed": 1, "runs_dir": str(alone), "data_dir": str(data)})
    for method in common["methods"]:
        for name in ("predictions.csv", "lags.csv", "history.csv"):
            files = [root / "synthetic_linear" / "seed01" / method / name for root in (shared, alone)]
            assert files[0].read_bytes() == files[1].read_bytes(), (method, name)
    executed = [nbformat.read(root / "synthetic_linear" / "seed01" / "03_train.ipynb", as_version=4)
                for root in (shared, alone)]
    shown = [[untimed(c) for c in nb.cells if c.cell_type == "code"] for nb in executed]
    assert shown[0] == shown[1]
    checked = [[coalesced(c) for c in nb.cells if "NBVAL_CHECK_OUTPUT" in c.source] for nb in executed]
    assert checked[0] == checked[1]


def coalesced(cell) -> list[dict]:
    """A cell's outputs with consecutive stream outputs of one name joined, as nbval compares them (the kernel may
    flush one print in one message or two)."""
    outputs = []
    for output in cell.outputs:
        last = outputs[-1] if outputs else {}
        if output.output_type == "stream" == last.get("output_type") and output.name == last["name"]:
            outputs[-1] = {**last, "text": last["text"] + output.text}
        else:
            outputs.append(dict(output))
    return outputs


def untimed(cell) -> tuple[str, list[str]]:
    """A cell's printed text (however its streams were split) with times and rates masked, and its other outputs'
    types."""
    text = "".join(o.text for o in cell.outputs if o.output_type == "stream")
    text = re.sub(r"\d\d:\d\d|[\d.]+(?=epoch/s| s\b)", "#", text)
    return text, [o.output_type for o in cell.outputs if o.output_type != "stream"]


@pytest.fixture
def notebook_copy(tmp_path):
    """The notebooks and the Jupytext configuration, copied as a user's checkout has them."""
    (tmp_path / "notebooks").mkdir()
    for source in (ROOT / "notebooks").glob("*.py"):
        (tmp_path / "notebooks" / source.name).write_bytes(source.read_bytes())
    (tmp_path / "jupytext.toml").write_bytes((ROOT / "jupytext.toml").read_bytes())
    return tmp_path


def test_pairing_the_notebooks_leaves_their_py_files_unchanged(notebook_copy):
    sources = {p.name: p.read_bytes() for p in (notebook_copy / "notebooks").glob("*.py")}
    subprocess.run([sys.executable, "-m", "jupytext", "--sync", *sorted((notebook_copy / "notebooks").glob("*.py"))],
                   check=True, capture_output=True)
    for name, text in sources.items():
        assert (notebook_copy / "notebooks" / name).read_bytes() == text, f"jupytext --sync rewrote {name}"
        assert (notebook_copy / "notebooks" / name).with_suffix(".ipynb").is_file()  # paired as jupytext.toml says


def test_saving_a_notebook_as_jupyterlab_does_leaves_its_py_file_unchanged(notebook_copy):
    manager = jupytext.TextFileContentsManager(root_dir=str(notebook_copy))  # what JupyterLab's server saves with
    for source in sorted((notebook_copy / "notebooks").glob("*.py")):
        text, path = source.read_bytes(), f"notebooks/{source.name}"
        model = manager.get(path, type="notebook", content=True)
        assert any("parameters" in cell.metadata.get("tags", []) for cell in model["content"].cells)
        manager.save(model, path)
        assert source.read_bytes() == text, f"saving {source.name} in JupyterLab would rewrite it"
        assert nbformat.read(source.with_suffix(".ipynb"), as_version=4).cells == model["content"].cells


def test_html_view_lists_pages_in_pipeline_order_links_outputs_and_scrolls_wide_tables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for output in ("tables/verdict_matrix.csv", "tables/verdict_matrix.md", "figures/evidence.png"):
        (tmp_path / output).parent.mkdir(exist_ok=True)
        (tmp_path / output).write_text("x")
    report_params = {"tables_dir": str(tmp_path / "tables"), "figures_dir": "figures"}
    made = {"data/processed/d/seed00/02_synthetic_dgp.ipynb": {}, "runs/d/seed00/03_train.ipynb": {},
            "runs/d/panel_matched/07_panel_matched.ipynb": {}, "runs/d/audit/04_audit.ipynb": {},
            "runs/report/05_report.ipynb": report_params}
    for path, parameters in made.items():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
        nb.metadata["papermill"] = {"duration": 1.0, "parameters": parameters}
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, tmp_path / path)
    html_view(tmp_path / "runs" / "html" / "index.html", [Path(p) for p in sorted(made)])
    index = (tmp_path / "runs" / "html" / "index.html").read_text()
    steps = [index.index(f"{step}</a>") for step in ("02_synthetic_dgp", "03_train", "07_panel_matched", "04_audit",
                                                     "05_report")]
    assert steps == sorted(steps)  # prep and DGP, training, the panel-matched study the audit reads, audit, report
    assert "<h2>panel_matched</h2>" not in index and index.count("<h2>d</h2>") == 1  # the study under its domain
    assert 'href="../../tables/verdict_matrix.md"' in index and 'href="../../tables/verdict_matrix.csv"' in index
    assert 'src="../../figures/evidence.png"' in index
    page = (tmp_path / "runs" / "html" / "runs" / "d" / "audit" / "04_audit.html").read_text()
    assert 'href="../../../index.html"' in page and "overflow-x:auto" in page


def test_html_pages_show_a_progress_bar_once_are_titled_by_domain_and_seed_and_render_markdown(tmp_path, monkeypatch):
    """A training page held 95 frames of its progress bars (a stream output each, ending in a carriage return), every
    page was titled only by its step, and an index link to a Markdown table showed its source text."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "t.csv").write_text("a\n1\n")
    (tmp_path / "tables" / "t.md").write_text("Caption.\n\n| a |\n|--:|\n| 1 |\n")
    frames = [nbformat.v4.new_output("stream", name="stdout", text=f"\racgate seed 3: {p:3d}%|") for p in range(95)]
    cell = nbformat.v4.new_code_cell("train()", outputs=frames)
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["papermill"] = {"duration": 1.0, "parameters": {"tables_dir": "tables"}}
    path = tmp_path / "runs" / "economics" / "seed03" / "03_train.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    html_view(tmp_path / "runs" / "html" / "index.html", [path])
    page = (tmp_path / "runs" / "html" / "runs" / "economics" / "seed03" / "03_train.html").read_text()
    assert page.count("acgate seed 3:") == 1 and " 94%|" in page
    assert "<title>03_train · economics · seed03</title>" in page
    index = (tmp_path / "runs" / "html" / "index.html").read_text()
    assert 'href="tables/t.html">view</a>' in index
    assert '<td style="text-align:right">1</td>' in (tmp_path / "runs" / "html" / "tables" / "t.html").read_text()


def test_notebooks_tried_with_a_profile_keep_to_the_profiles_own_folders(tmp_path, monkeypatch):
    """03_train and 04_audit run with the smoke profile and no folders given write under runs/smoke/ (the panel in
    runs/smoke/data/), never over the paper's runs/ and data/, whose runs would then be stale or smoke runs."""
    project = tmp_path / "project"  # a project root of its own, so that what the notebooks write is seen
    project.mkdir()
    for name in ("params", "pyproject.toml"):
        (project / name).symlink_to(ROOT / name)
    monkeypatch.setenv("ACGATE_ROOT", str(project))
    common = {"domain": "synthetic_linear", "profile_file": SMOKE, "methods": ["acgate"]}
    execute_notebook(ROOT / "notebooks" / "03_train.py", tmp_path / "03_train.ipynb", {**common, "seed": 0})
    execute_notebook(ROOT / "notebooks" / "04_audit.py", tmp_path / "04_audit.ipynb", {**common, "seeds": 1})
    own = project / "runs" / "smoke"
    assert (own / "synthetic_linear" / "seed00" / "acgate" / "metrics.json").is_file()
    assert (own / "data" / "processed" / "synthetic_linear" / "seed00" / "panel.npz").is_file()
    assert (own / "synthetic_linear" / "audit" / "verdicts.json").is_file()
    assert sorted(p.name for p in project.iterdir()) == ["params", "pyproject.toml", "runs"]
    assert [p.name for p in (project / "runs").iterdir()] == ["smoke"]


def test_html_pages_converted_in_several_processes_are_those_of_a_fresh_exporter_each(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # pages mirror the notebooks' paths below the working directory
    notebooks = []
    for i in range(5):  # each with metadata of its own, so that one page taking another's would show
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# notebook {i}"),
                                             nbformat.v4.new_code_cell(f"print({i})")])
        nb.metadata["language_info"] = {"name": "python", "version": f"3.{i}", "codemirror_mode": f"mode{i}"}
        nb.metadata["title"] = f"title {i}"
        notebooks.append(tmp_path / "runs" / "d" / f"seed{i:02d}" / "03_train.ipynb")
        notebooks[-1].parent.mkdir(parents=True)
        nbformat.write(nb, notebooks[-1])
    pages = {}
    for jobs in (2, 1):
        index = tmp_path / f"html{jobs}" / "index.html"
        written = html_view(index, notebooks, jobs=jobs)
        assert written == [index.parent / n.relative_to(tmp_path).with_suffix(".html") for n in notebooks]
        pages[jobs] = [page.read_text() for page in written]
    fresh = tmp_path / "fresh" / "index.html"  # the pages as one exporter per page makes them
    for path in notebooks:
        _exporter.cache_clear()
        _write_page(nbformat.read(path, as_version=4), path.stem, fresh,
                             fresh.parent / path.relative_to(tmp_path).with_suffix(".html"))
    expected = [(fresh.parent / n.relative_to(tmp_path).with_suffix(".html")).read_text() for n in notebooks]
    assert pages[2] == expected and pages[1] == expected
    for i, page in enumerate(expected):  # each page shows its own notebook's title, and no other's
        assert [f"title {j}" in page for j in range(5)] == [j == i for j in range(5)]


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


def test_the_training_and_dgp_kernels_import_neither_seaborn_nor_scipy_stats():
    """Their imports (each notebook's own import lines) leave out seaborn and scipy.stats, about 0.7 s of every
    kernel's start: the audit's tests import scipy.stats where they call it."""
    for name in ("02_synthetic_dgp.py", "03_train.py"):
        source = (ROOT / "notebooks" / name).read_text()
        imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
        probe = "; ".join(imports + ["import sys", "print(sorted(m for m in ('seaborn', 'scipy.stats') if m in "
                                     "sys.modules))"])
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
        assert done.stdout.strip() == "[]", (name, imports, done.stdout)


def test_the_notebooks_import_nothing_of_the_runner(tmp_path):
    """Every notebook imports acgate.notebook (for resolve); Jupytext, nbformat and Papermill stay out of the kernel,
    as does jsonschema under them, whose optional IRI grammar (rfc3987_syntax) takes seconds to import. The runner
    process does without that grammar too."""
    probe = ("import sys, acgate.notebook, acgate.models.runner, acgate.audit, acgate.report.paper_tables; "
             "print(sorted(m for m in ('jupytext', 'nbformat', 'papermill', 'jsonschema') if m in sys.modules))")
    kernel = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert kernel.stdout.strip() == "[]", kernel.stdout
    header = "# ---\n# jupyter:\n#   kernelspec:\n#     display_name: Python 3\n#     name: python3\n# ---\n"
    (tmp_path / "tiny.py").write_text(header + "# %%\nx = 1\n")
    probe = ("import sys, acgate.notebook; acgate.notebook.__main__.main(['run', sys.argv[1], sys.argv[2]]); "
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


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.py")), ids=lambda p: p.name)
def test_saving_an_untouched_notebook_in_jupyterlab_leaves_its_source_as_it_was(path):
    """JupyterLab saves a paired notebook through Jupytext with the running kernel's spec and language in its
    metadata; the tracked .py must come back byte for byte (its display_name was rewritten on every save)."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    document = jupytext.read(path)
    document.metadata["kernelspec"] = {"display_name": spec.display_name, "language": spec.language,
                                       "name": "python3"}
    document.metadata["language_info"] = {"name": "python", "version": sys.version.split()[0],
                                          "mimetype": "text/x-python", "file_extension": ".py"}
    assert jupytext.writes(document, fmt="py:percent") == path.read_text()
