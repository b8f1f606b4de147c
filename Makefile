# Every target creates the virtual environment on first use: a machine needs nothing but Python 3.10+.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Installed before the package so pip does not pull a multi-GB CUDA build where a CPU one is wanted;
# GPU users: make TORCH="torch" (or any torch>=2.3,<2.15 build for your CUDA).
TORCH ?= torch==2.13.0
ARGS ?=

.PHONY: setup train test lint assets clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $@

setup: $(BIN)/.installed

train: setup          ## python train.py on the embedded default (make train ARGS="algo=rloo ...")
	$(BIN)/python train.py $(ARGS)

test: setup           ## the test suite: CPU, offline, a few minutes
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest $(ARGS)

lint: setup
	$(BIN)/ruff check lit_rlhf tests train.py scripts bench

assets: setup         ## rebuild the embedded assets (sentiment and arithmetic: data, tokenizers, tiny models), seed 0
	$(BIN)/python scripts/build_assets.py
	$(BIN)/python scripts/build_arithmetic.py

clean:
	rm -rf $(VENV) logs outputs multirun
