"""The LaTeX the repository writes compiles with pdflatex (Debian's texlive-latex-base and -recommended, which
.ci/run installs; without pdflatex these tests skip) and fits the 6.5-inch text width it is laid out for."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from acgate.panel_audit import PanelAudit

ROOT = Path(__file__).resolve().parents[2]
TABLES = sorted((ROOT / "tables").rglob("*.tex"))
SLACK = 18.0  # points (a quarter inch): how far a table may run past the text width (the widths are estimates)
DOCUMENT = r"""\documentclass{article}
\usepackage[letterpaper,margin=1in]{geometry}
\usepackage[T1]{fontenc}
\usepackage[utf8]{inputenc}
\usepackage{booktabs,longtable}
\begin{document}
%s
\end{document}
"""

needs_pdflatex = pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")


def compile_latex(body: str, folder: Path) -> list[float]:
    """Compile ``body`` in a letter page with 1-inch margins; the widths (pt) by which boxes overflow."""
    (folder / "doc.tex").write_text(DOCUMENT % body)
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=folder,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    log = (folder / "doc.log").read_text(errors="replace")
    return [float(w) for w in re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide\)", log)]


def test_the_repository_has_latex_tables():
    assert len(TABLES) >= 20, TABLES  # a glob that finds nothing would make the test below vacuous


@needs_pdflatex
@pytest.mark.parametrize("table", TABLES, ids=lambda p: str(p.relative_to(ROOT / "tables")))
def test_each_committed_table_compiles_and_fits_the_page(table, tmp_path):
    overflows = compile_latex(rf"\input{{{table}}}", tmp_path)
    assert max(overflows, default=0.0) <= SLACK, overflows


@needs_pdflatex
def test_an_audits_summary_and_numbers_compile(tiny_grid, tmp_path):
    result, params, _, _, html_path, _ = tiny_grid
    audit = PanelAudit(result, params, html_path, html_path.parent)
    overflows = compile_latex(audit.summary().as_latex() + audit.to_latex(), tmp_path)
    assert max(overflows, default=0.0) <= SLACK, overflows
