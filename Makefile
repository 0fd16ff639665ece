# The two quick-start commands: `make conform` (the main job) and `make test`.
# Both create .venv and install everything on first use.
PYTHON ?= python3
# The CPU build of torch (this pin is what CI installs; override for a GPU runner).
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install conform test lint bench gpu-test

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev,ray]"
	touch $(STAMP)

install: $(STAMP)

## The main job: the conformance suite against the built-in backends, with the clause matrix.
conform: $(STAMP)
	$(BIN)/python -m harness conform --backend uni,mp,ray --world-size 1,2,4

## The tests (simulated tier: CPU workers on gloo).
test: $(STAMP)
	$(BIN)/python -m pytest -m "not gpu"

lint: $(STAMP)
	$(BIN)/ruff check harness tests
	$(BIN)/mypy harness

bench: $(STAMP)
	$(BIN)/python -m harness bench

## The GPU tier; GPUS=N demands N GPUs (missing ones fail instead of skipping).
gpu-test: $(STAMP)
	$(BIN)/python -m pytest -m gpu $(if $(GPUS),--require-gpus $(GPUS))
