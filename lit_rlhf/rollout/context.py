"""What an engine samples with: the policy handle and the version of its weights, the tokenizer, the environment
and the sampling settings, as one typed object (a Sampler's `context`). Engines, the episode loop and
environments receive it, never the LightningModule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from lit_rlhf.envs import EnvSpec


@dataclass(frozen=True)
class SamplingSettings:
    """The settings a draw samples with: the algo.* ones of sampling, and the policy's model spec."""

    response_length: int  # new tokens of a single-turn response (each turn's cap in multi-turn episodes)
    temperature: float
    generation_kwargs: Mapping[str, Any]
    allow_biased_sampling: bool
    model: Mapping[str, Any]  # the policy's model spec: an engine with weights of its own loads the same checkpoint

    @classmethod
    def of(cls, hparams: Any) -> SamplingSettings:
        """From an RLHF module's hyper-parameters (the algorithm's settings and `model`)."""
        return cls(hparams.response_length, hparams.temperature, hparams.generation_kwargs,
                   hparams.allow_biased_sampling, hparams.model)


@dataclass
class SamplingContext:
    """A draw's policy, tokenizer, environment and settings. `policy` is the trainer's policy, or the async producer's
    copy of it; `version` counts the RL steps its weights were trained on."""

    settings: SamplingSettings
    environment: EnvSpec | None = None  # multi-turn episodes; None: single-turn
    policy: torch.nn.Module | None = None  # set once the weights are loaded
    reference: Any = None  # the policy with its adapters off: `with reference.active() as model`
    tokenizer: Any = None
    stop_token_id: int | None = None
    version: int = 0
    random_stream: torch.Generator | None = None  # the draw's own (async mode, S >= 1); None: torch's default
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))  # where prompts and samples live
    rank: int = 0  # this process's rank over all nodes
    local_rank: int = 0  # on its node

    @property
    def trajectory_length(self) -> int:
        """R: the tokens after the prompt a draw holds: env.max_tokens, or algo.response_length single-turn."""
        return self.settings.response_length if self.environment is None else self.environment.max_tokens
