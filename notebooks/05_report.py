# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: -jupytext.text_representation
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 Report: every table and figure of the paper, and how our numbers compare
#
# Reads the finished runs and the audits of every domain and regenerates the paper's tables and figures (those the
# domains support: a panel of your own gets its own tables and no paper-only ones), then sets every number the paper
# reports about these domains next to ours.
#
# - **Inputs**: `runs/<domain>/seed<NN>/<method>/metrics.json` (03_train), `runs/<domain>/audit/` (04_audit),
#   `data/processed/<domain>/stratifiers.csv` (01_data_prep), `lib/acgate/report/paper_numbers.yaml` (the paper's
#   numbers).
# - **Outputs**: `tables/<name>.{csv,tex,md}` (numbers in the CSV; "mean (sd)" cells in LaTeX and Markdown),
#   `figures/<name>.{png,pdf}`, and `tables/run_manifest.json`: the code version, machine, packages and
#   timing of the runs behind them.

# %% tags=["parameters"]
domains: list = ["synthetic_linear", "synthetic_nonlinear"]  # the domains to report (each needs its 04_audit)
runs_dir: str = "runs"  # runs and audits are read from <runs_dir>/<domain>/
data_dir: str = "data"  # stratifiers are read from <data_dir>/processed/<domain>/
tables_dir: str = "tables"  # tables are written here
figures_dir: str = "figures"  # figures are written here
# %%
import json

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display

from acgate.layout import project_root, shown
from acgate.report import diagrams, figures, paper_tables, render
from acgate.runs import write_json

root = project_root()
runs_root, data_root = root / runs_dir, root / data_dir
tables_root, figures_root = root / tables_dir, root / figures_dir
pd.set_option("display.width", 200, "display.max_columns", 30, "display.max_colwidth", 60)

# %% [markdown]
# ## Tables
# Each table is built from the runs and audits, written as CSV, Markdown and LaTeX (the per-domain L2 tables with
# their main columns on the page; the reproduction table, a lookup, without LaTeX), and shown here in the readers'
# form. A table whose inputs are absent (say, the real panels without their data) is skipped.

# %%
tables, results = paper_tables.build_tables(runs_root, domains)
for name, frame in tables.items():
    render.write_table(frame, tables_root, name, paper_tables.caption(name), paper_tables.latex_view(name, frame))
print(f"{len(tables)} tables written to {shown(tables_root)}: {', '.join(tables)}")
skipped = [name for name in paper_tables.TABLES if name not in tables]
print("not supported by these runs:", ", ".join(skipped) or "none")

# %%
for name in ("synthetic_summary", "verdict_matrix", "neural_vs_classical", "proxy_shuffle",
             "controlled_comparison"):
    if name in tables:
        display(Markdown(f"**{name}**: {paper_tables.caption(name)}"), render.display(tables[name]))

# %% [markdown]
# ## Figures
# The case study (stratifier against seed-mean k*), the three-panel evidence figure, the forecast R2 of
# the real panels, and the two diagrams, each as PNG and PDF.

# %%
drawn = {
    "case_study": figures.case_study_figure(results, data_root),
    "evidence": figures.evidence_figure(tables, results),
    "forecast_r2": figures.forecast_r2_figure(runs_root, results),
    "use_case": diagrams.use_case(),
    "architecture": diagrams.architecture(),
}
for name, fig in drawn.items():
    if fig is None:
        print(f"{name}: nothing to show for these domains, skipped")
        continue
    figures.save_figure(fig, figures_root, name)
    plt.show()
    plt.close(fig)

# %% [markdown]
# ## Our numbers next to the paper's
# One row per number the paper reports about the domains reported here (none for a panel of your own).
# `difference` is ours minus the paper's; verdicts compare as text. docs/results.md ("Reproduction") explains where
# and why they differ.

# %%
if "reproduction" in tables:
    reproduction = tables["reproduction"]
    numeric = reproduction[pd.to_numeric(reproduction.difference, errors="coerce").notna()]
    print(f"{len(reproduction)} numbers from the paper; {len(numeric)} with a counterpart here")
    display(numeric.assign(abs_diff=numeric.difference.astype(float).abs())
            .groupby("paper_table").abs_diff.agg(["count", "median", "max"]).round(3))
    display(reproduction[reproduction.paper_table == "verdict_matrix"])
else:
    print("no domain of the paper among these domains: no reproduction table")

# %% [markdown]
# ## Run manifest
# What produced these tables: the report's code version and machine, and the training runs the audits took (their
# code versions and when they were made; runs an audit left out are in the `excluded_runs` table), and the workflow
# invocation that ended here: its start, wall time to this report, and how many of the runs it made (0 when only
# the report was redone). When that invocation made every run (a whole `make paper`), its wall time is also kept in
# `tables/suite_times.json`, one entry per device and machine, so the CPU and GPU suite times stand side by side.
# Every run records a digest of the code it ran (`code_digest`: the package and the notebooks, committed or not); runs
# made by different code are named here.

# %%
record = paper_tables.run_manifest(runs_root, results, list(tables), [n for n, f in drawn.items() if f is not None])
write_json(tables_root / "run_manifest.json", record)
times_file = tables_root / "suite_times.json"
earlier_times = json.loads(times_file.read_text()) if times_file.is_file() else {}
write_json(times_file, paper_tables.suite_times(record, earlier_times))
if record["code_versions"]:
    print(f"WARNING: {record['code_versions']}\n")
print(json.dumps({k: v for k, v in record.items() if k != "packages"}, indent=1))
