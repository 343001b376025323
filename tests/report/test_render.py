"""Tests of acgate.report.render: tables as readers see them, in Markdown and LaTeX."""

import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from acgate.report import paper_tables, render
from tests.report.conftest import L2_COLUMNS, l2_frame

ROOT = Path(__file__).resolve().parents[2]


def test_markdown_keeps_each_columns_precision_and_readable_headers():
    frame = pd.DataFrame({"domain": ["economics", "energy"], "test_r2_by_time": [0.64, 0.646],
                          "mean_diff": [-0.0001, 0.25], "fisher_p_min": [9.9e-22, 0.37]})
    text = render.markdown_table(frame, "caption")
    header, _, *rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in text.splitlines()[2:]]
    assert header == ["domain", "test R² (per year)", "mean difference", "Fisher p min"]
    assert [r[1] for r in rows] == ["0.640", "0.646"]  # not "0.64" beside "0.646"
    assert [r[2] for r in rows] == ["0.000", "0.250"]  # never a negative zero


def markdown_rows(text: str) -> list[list[str]]:
    """The cells of each row of a Markdown table (after its caption), split at the "|" that are not escaped."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def test_markdown_cells_escape_bars_counts_are_whole_and_p_keeps_two_digits():
    """The Grouped ARDL's k* kind "diagnostic: ARDL |coefficients|" shifted every later cell of its row; counts read
    as 75815.000 and W as 58.000; p = 0.40 printed as 0.4 beside 0.062."""
    frame = pd.DataFrame({"method": ["grouped_ardl", "acgate"], "kstar_kind": ["diagnostic: ARDL |coefficients|", "s"],
                          "parameters_economics": [75815.0, float("nan")], "W": [58.0, 3.5], "p": [0.4, 0.0625],
                          "domain": ["economics_proxy_shuffle", "synthetic_linear"]})
    header, _, *rows = markdown_rows(render.markdown_table(frame, "caption"))
    assert all(len(row) == len(header) for row in rows)
    assert rows[0][:5] == ["Grouped ARDL", "diagnostic: ARDL \\|coefficients\\|", "75815", "58", "0.40"]
    assert rows[1][3:] == ["3.5", "0.062", "synthetic linear"] and rows[0][5] == "economics (proxy shuffle)"


def test_every_committed_markdown_table_has_as_many_cells_in_each_row_as_its_header():
    for path in sorted((ROOT / "tables").glob("*.md")):
        header, *rows = markdown_rows(path.read_text())
        assert all(len(row) == len(header) for row in rows), path.name


def test_readable_labels_know_the_papers_names_and_fall_back_to_the_id():
    assert render.readable("mean_log_gdp_per_worker") == "mean log GDP per worker"
    assert render.readable("trend_hc") == "trend of human capital"
    assert render.readable("mean_survey_noise") == "mean survey noise"  # a user's own name
    assert render.readable("region_size") == "region size"
    assert render.readable("energy_proxy_shuffle") == "energy (proxy shuffle)"
    assert render.header("parameters_economics") == "parameters, economics"


def test_a_wide_latex_table_is_split_into_parts_that_repeat_the_row_names(tmp_path):
    frame = l2_frame()
    paths = render.write_table(frame, tmp_path, "economics_l2", "Economics L2.")
    assert pd.read_csv(paths[0]).columns.tolist() == L2_COLUMNS  # the CSV keeps the machine names
    latex = paths[2].read_text()
    parts = latex.split(r"\par\medskip")[1:]
    assert len(parts) >= 2 and all("method" in p and "stratifier" in p for p in parts)
    assert "mean $|\\rho|$" in latex and "mean_abs_rho" not in latex and r"$\leq$ 1/2001" in latex


def compiled(folder: Path, names: list[str]) -> str:
    """pdflatex's log of a letter-size document (6.5 in of text width) that inputs the tables ``names`` in
    ``folder``, each on its own page; the run must succeed."""
    body = "\n".join(rf"\input{{{name}.tex}}\clearpage" for name in names)
    (folder / "doc.tex").write_text(
        "\\documentclass{article}\\usepackage[T1]{fontenc}\\usepackage{booktabs,longtable}"
        f"\\usepackage[letterpaper,margin=1in]{{geometry}}\\begin{{document}}\n{body}\n\\end{{document}}\n")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "doc.tex"], cwd=folder, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout[-2000:]
    return (folder / "doc.log").read_text(errors="replace")


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed")
def test_every_latex_table_fits_a_page(tmp_path):
    frames = {"economics_l2": l2_frame(),
              "synthetic_summary": pd.DataFrame({
                  "domain": ["synthetic_nonlinear"] * 3, "method": ["acgate", "shuffled_proxies", "plain_lstm"],
                  "seeds": [20] * 3, "kstar_kind": ["structural", "structural", "diagnostic: occlusion"],
                  **{f"{c}_{s}": [0.0319, 0.7144, 0.9821] for s in ("mean", "sd")
                     for c in ("test_mse", "mae_lag_centre", "spearman_lag_centre", "mae_dgp_mean_lag",
                               "spearman_dgp_mean_lag", "kstar_sd")}, "median_seconds": [6.5, 7.1, 25.9]})}
    for name, frame in frames.items():
        render.write_table(frame, tmp_path, name, f"{name}.", paper_tables.latex_view(name, frame))
    assert "Overfull \\hbox" not in compiled(tmp_path, list(frames))  # 6.5 in of text width


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed")
def test_the_committed_latex_tables_compile_without_a_box_overfull_by_10pt(tmp_path):
    """Every table in tables/ and its subfolders as the paper would \\input it; measured: at most 8.8 pt over
    (audit_calibration)."""
    paths = sorted((ROOT / "tables").rglob("*.tex"))
    names = ["__".join(path.relative_to(ROOT / "tables").with_suffix("").parts) for path in paths]
    assert len(names) >= 20  # a glob that found nothing would pass
    for path, name in zip(paths, names, strict=True):
        shutil.copy(path, tmp_path / f"{name}.tex")
    overfull = [float(points) for points in re.findall(r"Overfull \\hbox \(([\d.]+)pt", compiled(tmp_path, names))]
    assert max(overfull, default=0.0) <= 10.0, f"boxes overfull by {sorted(overfull)[-5:]} pt"


def test_every_part_of_a_split_verdict_matrix_names_its_domain_and_reference(tmp_path):
    """Each domain has a row per reference: a part without the reference column could not tell them apart."""
    layers = {f"{layer} {rule}": ["not certified", "supported"] for layer in ("L0", "L1", "L2", "L3")
              for rule in ("paper", "calibrated")}
    frame = pd.DataFrame({"domain": ["economics"] * 2, "reference": ["acgate", "moderated_dl"], **layers,
                          "lags differ": ["not certified"] * 2})
    latex = render.latex_table(frame, "verdict_matrix", "Verdicts.")
    heads = [block.split(r"\midrule")[0] for block in latex.split(r"\begin{tabular}{")[1:]]
    assert len(heads) >= 2 and all("domain" in h and "reference" in h for h in heads)
