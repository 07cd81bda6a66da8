# topogang: the two commands are `make demo` and `make test`; everything they need is set up here.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help demo test lint typecheck layers unit bench lock clean controlplane cluster

help:
	@echo "make demo   - simulate a TFJob of 16 workers in 4 rack segments on a 64-node GPU cluster"
	@echo "make test   - ruff, mypy --strict, import layers and every test (builds the control plane once)"
	@echo "make bench  - the planning benchmark (bench/plan_scale.py)"
	@echo "make cluster - a local Kubernetes control plane with fake GPU nodes, until Ctrl-C"

# The virtualenv is rebuilt only when the declared or pinned dependencies change.
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "topogang needs Python >= 3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $@

demo: $(STAMP)
	$(BIN)/topogang simulate -f examples/tfjob-segments

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict extender

layers: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest tests

test: lint typecheck layers controlplane
	$(BIN)/pytest

# etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl and kwok built from Go
# modules into ~/.cache/topogang (once; later runs only check a stamp). See e2e/controlplane.
controlplane:
	e2e/controlplane/build.sh

# The local control plane in the foreground; CLUSTER_ARGS="--help" lists the options.
cluster: $(STAMP) controlplane
	$(BIN)/python -m e2e.controlplane $(CLUSTER_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/plan_scale.py

# Re-pin constraints.txt from a fresh resolve of pyproject.toml.
lock:
	rm -rf .cache/lock && $(PYTHON) -m venv .cache/lock
	.cache/lock/bin/pip install --quiet -e '.[dev]'
	( sed -n '1,2p' constraints.txt; .cache/lock/bin/pip freeze --exclude-editable ) > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
