# Front door of the repository. `make paper` runs the main job, `make test` the tests; both set up
# the virtual environment in .venv on first use (CPU PyTorch 2.13.0 plus this package and its extras).
#   make paper            20-seed synthetic suite (linear, nonlinear: AC-GATE + ablations; the null scenario:
#                         AC-GATE), the audit of each domain (04_audit), then the summary tables
#   make quick            the same with 3 seeds, a few minutes
#   make test             ruff + pytest (unit, notebook and nbval tests; about 2 minutes on 2 cores)
#   make notebooks        pair notebooks/*.py with .ipynb files for JupyterLab (the .py files stay the source)
# Variables: JOBS (parallel notebook runs, default: number of cores), SEEDS (override the seed count).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
DOMAINS := synthetic_linear synthetic_nonlinear synthetic_null
SEEDS ?=
SEED_ARG := $(if $(SEEDS),--seeds $(SEEDS),)

.PHONY: setup paper quick test lint notebooks clean-runs

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

setup: $(VENV)/.installed

paper: setup
	$(PY) -m acgate.suite run --domains $(DOMAINS) --jobs $(JOBS) $(SEED_ARG)
	$(PY) -m acgate.suite audit --domains $(DOMAINS)
	$(PY) -m acgate.suite table --domains $(DOMAINS)

quick: setup
	$(PY) -m acgate.suite run --domains $(DOMAINS) --jobs $(JOBS) --seeds 3 --runs-dir runs/quick
	$(PY) -m acgate.suite audit --domains $(DOMAINS) --runs-dir runs/quick
	$(PY) -m acgate.suite table --domains $(DOMAINS) --runs-dir runs/quick --tables-dir runs/quick/tables

lint: setup
	$(VENV)/bin/ruff check lib tests notebooks

test: lint
	$(PY) -m pytest

notebooks: setup
	$(VENV)/bin/jupytext --set-formats ipynb,py:percent notebooks/*.py

clean-runs:
	rm -rf runs/
