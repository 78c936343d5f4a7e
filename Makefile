# Two commands: `make demo` (the main job: a smoke-preset policy search) and `make test`.
# Both create .venv when missing and (re)install the project into it when pyproject.toml changed,
# with the `search` extra (Ray, Optuna, DALI: the light `pip install autoaug` leaves them out).
# --no-cache-dir: the downloaded wheels (DALI, Ray, ... about 1 GB) are not kept a second time in pip's
# cache; a CI machine once ran out of disk while installing.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# The real CIFAR-10 Parquet: an environment variable, or the shared copy next to this checkout.
DATA    ?= $(or $(AUTOAUG_CIFAR10),$(abspath ../shared/data/cifar10-jpeg))
DEMO_DIR ?= $(abspath runs/demo)
PYTEST_ARGS ?=
# Test processes (pytest-xdist), whole test files per process, the costliest files first
# (tests/conftest.py orders them; --no-loadscope-reorder keeps that order). Two, for 2 cores: three
# were slower there. Suite times: benchmarks/results/suite-time/README.md.
# TEST_WORKERS=1: one process, for debugging.
TEST_WORKERS ?= 2

# `make wheelhouse`: every wheel a node without network needs, for its Python and platform
# (launch/wheelhouse.py; docs/cluster.md, "Nodes without network"). DALI=cuda130 for CUDA 13 drivers
# (580+); TORCH=0 leaves torch and torchvision out (GPU images carry them).
WHEELHOUSE     ?= wheelhouse
PYTHON_VERSION ?= $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
PLATFORM       ?= manylinux_2_28_x86_64
DALI           ?= cuda120
TORCH          ?= 1

.PHONY: install demo lint test bench wheelhouse clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --disable-pip-version-check --no-cache-dir -q -e '.[search,dev]'
	$(PY) -c "import torch, torchvision, ray, optuna, pyarrow, nvidia.dali; print('installed: torch', torch.__version__, 'torchvision', torchvision.__version__, 'ray', ray.__version__, 'optuna', optuna.__version__, 'dali', nvidia.dali.__version__)"
	touch $(STAMP)

install: $(STAMP)

# The search's progress on the terminal (its result as JSON in $(DEMO_DIR)/search.json), then the
# stored policy as `autoaug policies show` prints it: the table, its provenance summarised, the next steps.
demo: install
	@mkdir -p "$(DEMO_DIR)"
	$(VENV)/bin/autoaug search --preset smoke --data "$(DATA)" --name demo --overwrite \
	    --storage "$(DEMO_DIR)/runs" --store "$(DEMO_DIR)/store" --json > "$(DEMO_DIR)/search.json"
	$(VENV)/bin/autoaug policies show demo@latest --store "$(DEMO_DIR)/store"

# ruff (pyproject.toml's [tool.ruff]): lint, and the layout its formatter gives (`ruff format` fixes it).
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: install lint
	AUTOAUG_CIFAR10="$(DATA)" $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: install
	AUTOAUG_CIFAR10="$(DATA)" $(PY) benchmarks/input_pipeline.py

wheelhouse:
	$(PYTHON) launch/wheelhouse.py --dest "$(WHEELHOUSE)" --python-version "$(PYTHON_VERSION)" \
	    --platform "$(PLATFORM)" --dali "$(DALI)" $(if $(filter 0,$(TORCH)),--no-torch)

clean:
	rm -rf $(VENV) runs .pytest_cache
