"""The notebooks run headlessly (Jupytext -> Papermill) under the smoke profile, and a re-execution
reproduces the cells marked NBVAL_CHECK_OUTPUT exactly (nbval, lax mode). The workflow that runs them in a
grid is tested in test_workflow.py; the execution of toy notebooks, the HTML view and the command line in
test_execution.py, test_html_view.py and test_cli.py."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import numpy as np
import pandas as pd
import pytest
import yaml

from acgate.audit import domain_audit as audit
from acgate.data.example import write_example
from acgate.notebook.execution import execute_notebook, execute_notebooks
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


def test_a_hand_run_replaces_an_audit_asked_for_otherwise_only_when_told(suite_runs, suite_audit, workspace,
                                                                         tmp_path):
    """The audit folder holds an audit of one seed and every method (suite_audit, as a grid would leave it): an audit
    of one method, or with other audit settings, stops before it replaces it, naming what differs and
    overwrite=true; the same audit again and an audit with overwrite=true run. (The shared audit is put back.)"""
    common = {"domain": "synthetic_linear", "profile_file": SMOKE, "runs_dir": str(suite_runs),
              "data_dir": str(workspace / "data"), "seeds": 1}
    verdicts = suite_audit.parent / "verdicts.json"
    before = verdicts.read_bytes()
    try:
        with pytest.raises(RuntimeError, match=r"holds another audit \(methods \[.*\] there, \['acgate'\] here\)"
                                               r".*overwrite=true"):
            execute_notebook(ROOT / "notebooks" / "04_audit.py", tmp_path / "one.ipynb",
                             {**common, "methods": ["acgate"]})
        strict = tmp_path / "strict.yaml"  # the smoke profile with another alpha: audit settings the digest leaves out
        strict.write_text((ROOT / SMOKE).read_text() + "\naudit:\n  alpha: 0.01\n")
        with pytest.raises(RuntimeError, match=r"audit.alpha 0.05 there, 0.01 here"):
            execute_notebook(ROOT / "notebooks" / "04_audit.py", tmp_path / "strict.ipynb",
                             {**common, "profile_file": str(strict)})
        assert verdicts.read_bytes() == before
        execute_notebook(ROOT / "notebooks" / "04_audit.py", tmp_path / "same.ipynb", common)
        assert json.loads(verdicts.read_text())["request"] == json.loads(before)["request"]
        execute_notebook(ROOT / "notebooks" / "04_audit.py", tmp_path / "told.ipynb",
                         {**common, "methods": ["acgate"], "overwrite": True})
        assert json.loads(verdicts.read_text())["request"]["methods"] == ["acgate"]
    finally:
        execute_notebook(ROOT / "notebooks" / "04_audit.py", tmp_path / "back.ipynb", {**common, "overwrite": True})


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


def test_a_jobs_seeds_train_as_one_stacked_model_where_stacking_is_on(tmp_path):
    """Where train.stacked stacks (on: here too; auto: on a GPU), a job's first notebook trains the neural runs of all
    its seeds (stack_seeds) as one stacked model and the later ones keep them, retrain or not; a closed-form fit is
    each seed's own."""
    profile = yaml.safe_load((ROOT / SMOKE).read_text())
    profile["train"]["stacked"] = "on"
    (tmp_path / "stacked.yaml").write_text(yaml.safe_dump(profile))
    runs = tmp_path / "runs"
    common = {"domain": "synthetic_linear", "profile_file": str(tmp_path / "stacked.yaml"),
              "methods": ["acgate", "grouped_ardl"], "runs_dir": str(runs), "data_dir": str(tmp_path / "data"),
              "stack_seeds": [0, 1], "retrain": True}
    execute_notebooks(ROOT / "notebooks" / "03_train.py",
                      [(runs / "synthetic_linear" / f"seed{s:02d}" / "03_train.ipynb", {**common, "seed": s})
                       for s in (0, 1)])
    for seed in (0, 1):
        folder = runs / "synthetic_linear" / f"seed{seed:02d}"
        assert json.loads((folder / "acgate" / "metrics.json").read_text())["stacked_seeds"] == 2, seed
        manifest = json.loads((folder / "grouped_ardl" / "manifest.json").read_text())
        assert manifest["seed"] == seed and "copied_from" not in manifest  # fitted on this seed's own panel
    log = (runs / "synthetic_linear" / "seed01" / "03_train.log").read_text()
    assert "[acgate seed 1] kept" in log and "retrain: seed 0's notebook trains the neural runs" in log, log[-2000:]


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
    """A cell's printed text as a terminal leaves it (however its streams were split; of a progress bar redrawn with
    carriage returns only its last state, since how many states it shows depends on the machine's speed), with times
    and rates masked, and its other outputs' types."""
    text = "".join(o.text for o in cell.outputs if o.output_type == "stream")
    text = "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))
    text = re.sub(r"\d\d:\d\d|(?:[\d.]+|\?)(?=epoch/s| s\b)", "#", text)
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
