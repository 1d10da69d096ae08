# Kernel Workbench. `make lab` opens JupyterLab on notebooks/, `make test` runs the tests.
# Both create .venv on first use. On a machine without an NVIDIA GPU torch is pinned to the
# CPU build (TORCH_SPEC), so the install stays small; with a GPU it takes the CUDA build.
# Machines that already have torch can reuse it: make test VENV_FLAGS=--system-site-packages
PYTHON ?= python3
VENV ?= .venv
VENV_FLAGS ?=
PY := $(VENV)/bin/python
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
TORCH_SPEC ?= $(if $(HAS_GPU),torch>=2.4,torch==2.13.0)
PYTEST_ARGS ?=

.PHONY: lab report test test-notebooks lint bench env env-lab npu-check notebook-filter docs pictures

# Two installs, each with its stamp. The lab's (.installed): torch and the project with the
# `lab` and `distributed` extras, all that the notebooks and `workbench lab` need. The
# developer's (.installed-dev): the same plus the `dev` extra (pytest, ruff, Playwright, MkDocs,
# kaleido, Optuna), which `make test`, `make docs` and `make pictures` need. After `make lab`,
# `make test` adds only the dev extra's packages (pip keeps what is installed); `make test`
# from nothing installs everything in one go and marks the lab's install done too.
LAB_EXTRAS := lab,distributed
DEV_EXTRAS := lab,dev,distributed
define install_venv
	test -x $(PY) || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[$(1)]"
endef

$(VENV)/.installed: pyproject.toml
	$(call install_venv,$(LAB_EXTRAS))
	touch $@

$(VENV)/.installed-dev: pyproject.toml
	$(call install_venv,$(DEV_EXTRAS))
	touch $@ $(VENV)/.installed

env-lab: $(VENV)/.installed
env: $(VENV)/.installed-dev

# Notebooks are versioned by their cells' sources: git reads a notebook through nbstripout
# (.gitattributes), which drops outputs, execution counts and what a run or a save writes into
# the metadata, so running a notebook and saving it leaves `git status` clean; an edited cell
# shows. Configured in this clone's .git/config (a clone without it sees the files as they are).
NB_STRIP = "$(abspath $(PY))" -m nbstripout --keep-id
NB_EXTRA_KEYS = metadata.language_info.codemirror_mode metadata.language_info.file_extension \
  metadata.language_info.mimetype metadata.language_info.nbconvert_exporter \
  metadata.language_info.pygments_lexer metadata.language_info.version metadata.papermill \
  cell.metadata.papermill cell.metadata.trusted cell.metadata.editable cell.metadata.deletable
notebook-filter:
	@if git rev-parse --git-dir >/dev/null 2>&1; then \
	  git config filter.nbstripout.clean '$(NB_STRIP)' && git config filter.nbstripout.smudge cat && \
	  git config filter.nbstripout.extrakeys '$(NB_EXTRA_KEYS)' && \
	  git config diff.ipynb.textconv '$(NB_STRIP) -t'; fi

lab: $(VENV)/.installed notebook-filter
	$(VENV)/bin/workbench lab

report: $(VENV)/.installed
	$(VENV)/bin/workbench report --device auto --quick --out reports/latest

# make test: ruff, the import contracts, then every test but the browser's Run All of each notebook,
# on TEST_WORKERS parallel workers (pytest-xdist). Tests that share a costly fixture or a service
# run on one worker (--dist loadgroup; the groups: tests/conftest.py). make test-notebooks: the
# browser's Run All of every notebook in JupyterLab (.ci/run runs it after make test). Both fail
# on pytest's "no tests collected" (exit 5), as on any failure. Each lists its 25 slowest steps, so
# a CI log says where the test time went.
TEST_WORKERS ?= 2
test: $(VENV)/.installed-dev notebook-filter
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -ra --durations=25 -n $(TEST_WORKERS) --dist loadgroup -m "not notebooks" $(PYTEST_ARGS)

test-notebooks: $(VENV)/.installed-dev notebook-filter
	$(PY) -m pytest -q -ra --durations=25 -m notebooks tests/browser $(PYTEST_ARGS)

bench: $(VENV)/.installed
	$(VENV)/bin/workbench bench rms_norm --device auto --dtype bf16 --hidden 1024,4096,16384 --mode forward,full

# Compile every family's default NPU kernels with the real Ascend front end (triton-ascend +
# BiShengIR) in a separate virtualenv (.npu-venv). A registry outage is a warning; a default
# configuration that does not compile fails.
npu-check: $(VENV)/.installed
	$(VENV)/bin/workbench npu-check --defaults-only --warn-unchecked --out results/npu_check

# The documentation (docs/, MkDocs) and every committed report (reports/, rendered from its records
# by docs/hooks/reports.py) as one site: built offline into results/site, warnings as errors. Open
# results/site/index.html from disk, or publish the folder on any static host.
# NO_MKDOCS_2_WARNING is Material for MkDocs' own switch for the end-of-life notice it prints on
# every build (9.7 and later), which says nothing about this site.
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The picture of the Explorer the README and the docs show, taken by the browser test.
pictures: $(VENV)/.installed-dev notebook-filter
	WORKBENCH_UPDATE_PICTURES=1 $(PY) -m pytest -q tests/browser/test_explorer_in_lab.py -k picture
