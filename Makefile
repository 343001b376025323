# Front door of the repository. `make paper` runs the main job, `make test` the tests; both set up
# the virtual environment in .venv on first use (PyTorch 2.13.0, from pip's index unless TORCH_INDEX names
# another, plus this package and its extras).
#   make paper            the main job (workflow/Snakefile): 01_data_prep for the real domains whose input files are
#                         present, the 20-seed grid of every available domain (02_synthetic_dgp, 03_train), the
#                         audits (04_audit), the report (05_report: tables/, figures/) and the HTML view of every
#                         executed notebook (runs/html/index.html); it names the domains it skipped and why
#   make audit DOMAIN=d   your own panel, params/<d>.yaml (docs/own_panel.md): its preparation, the seeds and methods
#                         it names, the panel-matched study, the audit and the report page, all in runs/panels/ (the
#                         page: runs/panels/<d>/audit/report.html), never touching the paper's folders; CONFIG adds
#                         settings, e.g. CONFIG=panel_matched_replicates=20 for a longer, more precise study
#   make quick            the same grid with 3 seeds into runs/quick/ (its panels, tables and figures too), keeping the
#                         repository's calibration of the current rules; 3 seeds cannot make a verdict "supported"
#                         (about 5 minutes on 2 cores without the real inputs)
#   make scenarios        the paper grid and the three synthetic scenarios a linear-in-proxies moderated distributed lag
#                         cannot represent (interaction, non-monotone lags, a threshold driver), 20 seeds each, with the
#                         tables and figures of all of them (about 8 minutes more than make paper on 2 cores)
#   make calibrate        only the audit calibration, measured again (06_audit_calibration: tables/audit_calibration.*,
#                         its figure; about 70 minutes on 2 cores from scratch; make paper keeps one of the current
#                         rules), of the paper's AC-GATE
#   make calibrate-own    the same for the AC-GATE own panels train (no gate memory; the calibration's panels and
#                         seeds): tables/gate_memory_off/audit_calibration.*, which their audit pages read (about 80
#                         minutes on 2 cores; every core, one process each); its notebook and figure in
#                         runs/gate_memory_off/
#   make panel-matched    the panel-matched error rates of economics and energy (07_panel_matched: 40 surrogates of
#                         each scenario of each panel and 120 of each null one, audited, the AC-GATE family in 20 of
#                         them), with the grid they need (about 4.5 hours on 2 cores, most of it AC-GATE's training;
#                         CONFIG=panel_matched_neural_replicates=5 for a shorter study whose AC-GATE rates bound less;
#                         the committed tables/<domain>_panel_matched.* have 40 of each null); an own panel's grid
#                         runs its study by itself
#   make dry-run          list the jobs `make paper` would run (a count per rule) and why (per rule), running none
#   make unlock           release the workflow's lock after a hard kill or power loss, then rerun `make paper`
#   make bench            speed and memory benchmark (one thread per run; CUDA too when present): prints its figures
#                         and writes runs/bench/latest.json (the synthetic panels it trains on: runs/bench/data, not
#                         data/processed); BENCH="--repeats 5 --domains synthetic_linear" to narrow; BENCH=--scale
#                         times one epoch and the peak memory at N 1,000 / 4,000 / 16,000 (T 40) instead
#   make data             download the official input files into data/raw (or $ACGATE_RAW_DIR)
#   make example          generate the example panel data/raw/example_panel.csv (params/example_panel.yaml);
#                         EXAMPLE=--large: the 20,000 × 60 panel data/raw/example_panel_large.csv
#                         (params/example_panel_large.yaml; about 10 s, 150 MB)
#   make test             ruff, mypy and pytest (unit, notebook, nbval and workflow tests) in TEST_JOBS (2) processes
#   make test-fast        ruff, mypy and the tests not marked slow: no notebook execution, no workflow, no training beyond
#                         smoke runs (about a minute on 2 cores); run make test before handing a change in
#   make lint             ruff (the rules of [tool.ruff] in pyproject.toml) and mypy ([tool.mypy])
#   make lab              JupyterLab on the repository; notebooks/*.py open as notebooks (Jupytext), and saving one
#                         writes a paired .ipynb beside it (git-ignored; the .py file stays the source). LAB="--port
#                         8890 --no-browser" passes options to `jupyter lab`; as root (a container) it adds
#                         --allow-root, which Jupyter otherwise demands
#   make notebooks        pair notebooks/*.py with .ipynb files for other editors (the .py files stay unchanged)
# From a subfolder: make -C <project root> paper (make reads the Makefile of the folder it starts in).
# Variables: JOBS (parallel jobs, 1 or more, default: number of cores; each job uses one thread), CONFIG (overrides
# of the grid's config/config.yaml, whose keys config/README.md describes, e.g. CONFIG="seeds=5
# 'domains=[synthetic_linear]'", or CONFIG="'leave_out={economics: [tft, ganet]}'" to leave methods out of one
# domain), SNAKEMAKE_PROFILE (e.g. workflow/profiles/slurm), TORCH_INDEX (where setup takes PyTorch 2.13.0 from;
# default: pip's index, which on Linux gives the CUDA build of several GB;
# TORCH_INDEX=https://download.pytorch.org/whl/cpu gives the CPU build of about 200 MB).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# JOBS, checked where a target uses it: Snakemake takes --cores 0 and then waits for ever at "Select jobs to execute"
checked_jobs = $(if $(shell echo '$(JOBS)' | grep -xE '0*[1-9][0-9]*|all'),$(JOBS),$(error JOBS=$(JOBS): the number \
	of parallel jobs must be a whole number, 1 or more (or all), e.g. make paper JOBS=2 (left out: the number of cores)))
CONFIG ?=
SNAKEMAKE_PROFILE ?=
TORCH_INDEX ?=
LAB ?=
EXAMPLE ?=
# JupyterLab settings of this environment only: a double click opens a .py notebook as a notebook
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.d/acgate.json
# Snakemake's options for this workflow (--rerun-incomplete, --keep-incomplete, --keep-going, --max-jobs-per-timespan,
# --quiet reason) live in its default profile, workflow/profiles/default/config.yaml, which Snakemake reads by itself;
# SNAKEMAKE_PROFILE adds a profile (Snakemake reads it first, the default profile over it)
SNAKEMAKE = $(VENV)/bin/snakemake --snakefile workflow/Snakefile --cores $(checked_jobs) \
	$(if $(SNAKEMAKE_PROFILE),--profile $(SNAKEMAKE_PROFILE))
# Snakemake keeps a cache in $XDG_CACHE_HOME (else ~/.cache) and stops with a long traceback when it cannot create it
# (a HOME that is read-only or does not exist, as for some service accounts); nothing else needs HOME to be writable,
# so the cache then goes to .snakemake/cache here
CACHE_HOME := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)
ifneq ($(shell mkdir -p '$(CACHE_HOME)' 2>/dev/null && test -w '$(CACHE_HOME)' && echo writable),writable)
export XDG_CACHE_HOME := $(CURDIR)/.snakemake/cache
$(info $(CACHE_HOME) cannot be written: Snakemake's cache goes to $(XDG_CACHE_HOME) (or set XDG_CACHE_HOME))
endif
QUICK := seeds=3 runs_dir=runs/quick
# an own panel's grid (make audit): its own folder beside the paper's, one level a domain; and, for its handful of
# jobs, Snakemake's own scheduling timespan instead of the default profile's 20 s (set for the paper grid's
# thousands of jobs), which a run waits out at its end
PANELS := runs_dir=runs/panels
PANELS_TIMESPAN := --max-jobs-per-timespan 100/1s

.PHONY: setup paper audit scenarios quick calibrate calibrate-own panel-matched dry-run unlock bench data example test test-fast \
	lint lab notebooks clean-runs

# the package's version is written once, in lib/acgate/__init__.py; the installed metadata (which every run's manifest
# records) takes it at install time, so a new version installs again
$(VENV)/.installed: pyproject.toml lib/acgate/__init__.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

setup: $(VENV)/.installed

paper: setup
	$(SNAKEMAKE) $(if $(CONFIG),--config $(CONFIG))

# DOMAIN: one plain name (letters, digits, _): params/<DOMAIN>.yaml, or the file CONFIG="'params={<DOMAIN>: path}'"
# names (the workflow says which params files exist when neither does); checked before anything runs, set-up included
ifneq ($(filter audit,$(MAKECMDGOALS)),)
# in make itself, no shell: what is left of DOMAIN once every allowed character is taken out must be nothing
DOMAIN_CHARACTERS := a b c d e f g h i j k l m n o p q r s t u v w x y z A B C D E F G H I J K L M N O P Q R S T U V \
	W X Y Z 0 1 2 3 4 5 6 7 8 9 _
DOMAIN_LEFT := $(DOMAIN)
$(foreach c,$(DOMAIN_CHARACTERS),$(eval DOMAIN_LEFT := $$(subst $(c),,$$(DOMAIN_LEFT))))
ifneq ($(words $(DOMAIN))$(DOMAIN_LEFT),1)
$(error make audit needs DOMAIN=<your_domain>, the name of params/<your_domain>.yaml (letters, digits, _), e.g. make \
audit DOMAIN=example_panel after make example (given: DOMAIN=$(DOMAIN)))
endif
endif
audit: setup
	$(SNAKEMAKE) $(PANELS_TIMESPAN) --config 'domains=[$(DOMAIN)]' $(PANELS) $(CONFIG)

scenarios: setup
	$(SNAKEMAKE) --config with_scenarios=true $(CONFIG)

quick: setup
	@echo "make quick: 3 seeds a domain, a look at the pipeline and its numbers, not a result: a one-sided Wilcoxon \
	over 3 seeds cannot go below 1/8, so no calibrated verdict can say supported (make paper trains 20)"
	$(SNAKEMAKE) --config $(QUICK) $(CONFIG)

calibrate: setup
	$(SNAKEMAKE) calibrate --forcerun calibrate $(if $(CONFIG),--config $(CONFIG))

# AC-GATE without the gate's memory (params/audit_calibration_gate_memory_off.yaml), outside the workflow: the paper's
# grid does not read it
calibrate-own: setup
	$(PY) -m acgate.notebook run notebooks/06_audit_calibration.py runs/gate_memory_off/06_audit_calibration.ipynb \
		params_file=params/audit_calibration_gate_memory_off.yaml tables_dir=tables/gate_memory_off \
		runs_dir=runs/gate_memory_off figures_dir=runs/gate_memory_off

panel-matched: setup
	$(SNAKEMAKE) --config 'panel_matched_domains=[economics, energy]' panel_matched_replicates=40 \
		panel_matched_null_replicates=120 panel_matched_neural_replicates=20 $(CONFIG)

dry-run: setup
	$(SNAKEMAKE) --dry-run --quiet rules $(if $(CONFIG),--config $(CONFIG))

# --unlock removes every lock of the project, a running grid's too (which then fails): refused while a Snakemake
# process works in this folder ([s]: the pattern does not match this shell's own command line)
unlock: setup
	@running=$$(for pid in $$(pgrep -f '[s]nakemake'); do \
		[ "$$(readlink /proc/$$pid/cwd 2>/dev/null)" = "$(CURDIR)" ] && echo $$pid; done); \
	if [ -n "$$running" ]; then \
		echo "make unlock: a workflow is running in $(CURDIR) (process $$(echo $$running)); its lock is not stale."; \
		echo "Wait for it to end, or stop it first (kill $$(echo $$running)); unlock only after a hard kill or power loss."; \
		exit 1; fi
	$(SNAKEMAKE) --unlock $(if $(CONFIG),--config $(CONFIG))

# BENCH=--scale: the scale table (acgate.tools.scale) with the other options of BENCH
bench: setup
	$(PY) -m acgate.tools.$(if $(filter --scale,$(BENCH)),scale,bench) $(filter-out --scale,$(BENCH))

data: setup
	$(PY) -m acgate.data.sources download

example: setup
	$(PY) -m acgate.data.example $(EXAMPLE)

lint: setup
	$(VENV)/bin/ruff check lib tests notebooks
	$(VENV)/bin/mypy

# the tests run in TEST_JOBS processes (pytest-xdist), each test file in one of them (so a file's module fixtures are
# built once); TEST_JOBS=1 runs them in this process
TEST_JOBS ?= 2
test: lint
	$(PY) -m pytest $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile)

# `slow`: the marker declared in pyproject.toml, set on a test where it is written or, by module and test name, in
# tests/conftest.py
test-fast: lint
	$(PY) -m pytest -m "not slow"

lab: setup
	mkdir -p $(dir $(LAB_OVERRIDES))
	echo '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"python": "Jupytext Notebook"}}}' \
		> $(LAB_OVERRIDES)
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB)

notebooks: setup
	$(VENV)/bin/jupytext --sync notebooks/*.py

clean-runs:
	rm -rf runs/
