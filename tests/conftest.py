import functools
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no test touches the network
os.environ.setdefault("WANDB_MODE", "offline")

from lit_rlhf.assets import TINY_PYTHIA  # noqa: E402

LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": "all-linear"}


def make_rloo(**overrides):
    from lit_rlhf import RLOOModule
    from lit_rlhf.models import VaderSentiment

    kwargs = dict(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, reward=VaderSentiment(),
                  optimizer=functools.partial(torch.optim.AdamW, lr=1e-3), rloo_k=4, response_length=16,
                  missing_eos_penalty=1.0)
    kwargs.update(overrides)
    return RLOOModule(**kwargs)


def make_datamodule(**overrides):
    from lit_rlhf import PromptDataModule

    return PromptDataModule(**{"tokenizer": TINY_PYTHIA, "batch_size": 4, "num_eval_prompts": 8, **overrides})


@pytest.fixture
def tiny_path():
    return TINY_PYTHIA


def make_ppo(**overrides):
    from lit_rlhf import PPOModule
    from lit_rlhf.models import VaderSentiment

    kwargs = dict(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, reward=VaderSentiment(),
                  optimizer=functools.partial(torch.optim.AdamW, lr=1e-3), samples_per_prompt=4,
                  response_length=16, missing_eos_penalty=1.0)
    kwargs.update(overrides)
    return PPOModule(**kwargs)


@pytest.fixture(autouse=True)
def run_in_tmp_path(tmp_path, monkeypatch):
    """Tests write logs, samples and checkpoints into their own directory, never into the repo."""
    monkeypatch.chdir(tmp_path)
