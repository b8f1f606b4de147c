"""Checks of the composed config that no single component can make, run before anything is built."""

from __future__ import annotations

import torch
from omegaconf import DictConfig

from lit_rlhf.errors import ConfigError

REWARD_MODEL_TARGET = "lit_rlhf.models.SequenceClassifierReward"


def check_reward_group(cfg: DictConfig) -> None:
    """The reward group: at least one reward, and reward_model alone (it is one reward, not a named set)."""
    reward = cfg.get("reward")
    if reward is None:
        raise ConfigError("reward=[] selects no reward; pick one or more, e.g. reward=vader or "
                          "reward=[arithmetic_correct,arithmetic_format].")
    if "rewards" in reward and ("name_or_path" in reward or reward.get("_target_") == REWARD_MODEL_TARGET):
        raise ConfigError("reward=reward_model cannot be combined with other rewards on the command line (it is one "
                          "reward, not a named set); use it alone, or combine it in Python with lit_rlhf.models."
                          "WeightedSum({'rm': SequenceClassifierReward(...), 'vader': VaderSentiment()}).")


def check_accelerator(cfg: DictConfig) -> None:
    accelerator = str(cfg.get("trainer", {}).get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(f"trainer.accelerator={accelerator} (trainer=gpu) needs a CUDA GPU, and this machine has "
                          f"none; use trainer=cpu, or trainer=default, which picks what is there.")
    interval = cfg.get("trainer", {}).get("val_check_interval")
    if isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval <= 0:
        raise ConfigError(f"trainer.val_check_interval={interval} must be > 0 (RL steps between held-out "
                          f"evaluations); to switch them off use trainer.limit_val_batches=0.")
