# Front door of the repository. `make paper` runs the main job, `make test` the tests; both set up
# the virtual environment in .venv on first use (CPU PyTorch 2.13.0 plus this package and its extras).
#   make paper            the main job: 01_data_prep for the real domains whose input files are present, the
#                         20-seed suite of every available domain (03_train), its audit (04_audit), the tables
#   make quick            the same with 3 seeds
#   make data             download the official input files into data/raw (or $ACGATE_RAW_DIR)
#   make example          generate the example panel data/raw/example_panel.csv (params/example_panel.yaml)
#   make test             ruff + pytest (unit, notebook and nbval tests; about 2 minutes on 2 cores)
#   make notebooks        pair notebooks/*.py with .ipynb files for JupyterLab (the .py files stay the source)
# Variables: JOBS (parallel notebook runs, default: number of cores), SEEDS (override the seed count).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
SEEDS ?=
SEED_ARG := $(if $(SEEDS),--seeds $(SEEDS),)

.PHONY: setup paper quick data example test lint notebooks clean-runs

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

setup: $(VENV)/.installed

paper: setup
	$(PY) -m acgate.suite paper --jobs $(JOBS) $(SEED_ARG)

quick: setup
	$(PY) -m acgate.suite paper --jobs $(JOBS) --seeds 3 --runs-dir runs/quick --tables-dir runs/quick/tables

data: setup
	$(PY) -m acgate.sources download

example: setup
	$(PY) -m acgate.example

lint: setup
	$(VENV)/bin/ruff check lib tests notebooks

test: lint
	$(PY) -m pytest

notebooks: setup
	$(VENV)/bin/jupytext --set-formats ipynb,py:percent notebooks/*.py

clean-runs:
	rm -rf runs/
