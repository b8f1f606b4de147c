"""reward=environment: the score an episode's environment gives it (Environment.reward)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lit_rlhf.errors import ConfigError


class EnvironmentReward:
    """Each finished episode's Environment.reward(); env_reward is the per-episode column the rollout adds."""

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], env_reward: Sequence) -> torch.Tensor:
        missing = [i for i, value in enumerate(env_reward) if value is None]
        if missing:
            raise ConfigError(f"reward=environment, but the environment's reward() returned None for {len(missing)} of "
                              f"{len(env_reward)} episodes (e.g. prompt {prompts[missing[0]][:60]!r}); return a number "
                              f"from reward(), or use another reward (and env=... for the episodes).")
        return torch.tensor([float(value) for value in env_reward])
