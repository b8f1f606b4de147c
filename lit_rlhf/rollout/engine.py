"""The rollout seam: a RolloutEngine turns a prompt batch into sampled responses.

    prompt batch (B prompts) --engine.sample--> Samples (N = B*K sequences: ids, masks, sampler logprobs)

Everything after sampling (old and reference logprobs, the reward, advantages) is the trainer's and
stays in the RLHFModule, so an engine is only how tokens are drawn: Hugging Face `generate` (HFEngine,
`rollout=hf`), or another inference engine. A new engine is one module with a subclass plus one config
file in conf/rollout/. Every engine samples purely (temperature only, the settings of
`pure_sampling_config`) and masks responses after the stop token.

Shapes: B prompts, K samples per prompt, N = B*K sequences, P prompt length, R response length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Samples:
    queries: torch.Tensor  # N,P  left-padded prompts, each repeated K times
    query_mask: torch.Tensor  # N,P
    responses: torch.Tensor  # N,R  padded after the stop token
    response_mask: torch.Tensor  # N,R  True up to and including the stop token
    prompt_index: torch.Tensor  # N    which prompt of the batch each sequence answers
    sampler_logprobs: torch.Tensor | None = None  # N,R  the engine's own logprobs of the sampled tokens, if any


def repeat_prompts(batch: dict[str, torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K copies of every prompt, adjacent (the K siblings of a prompt stay together and on one rank).
    -> queries (N,P), query_mask (N,P), prompt_index (N)"""
    queries = batch["input_ids"].repeat_interleave(k, dim=0)  # N,P
    query_mask = batch["attention_mask"].repeat_interleave(k, dim=0)  # N,P
    prompt_index = torch.arange(len(batch["input_ids"]), device=queries.device).repeat_interleave(k)  # N
    return queries, query_mask, prompt_index


class RolloutEngine:
    """How responses are sampled. Subclasses implement `sample`; `setup` runs once the module's weights are
    loaded, `after_update` after every RL step's optimizer steps (an engine holding its own copy of the
    weights syncs them there)."""

    #: every rank must call `sample` at the same time (e.g. ZeRO-3 gathers weights layer by layer)
    lockstep: bool = False

    def setup(self, module: Any) -> None:
        """Called from RLHFModule.configure_model, after the policy, reference and tokenizer loaded."""

    def sample(self, module: Any, batch: dict[str, torch.Tensor], samples_per_prompt: int,
               from_reference: bool = False, greedy: bool = False) -> Samples:
        """K responses per prompt of batch (input_ids, attention_mask: B,P) from the policy (or the reference);
        greedy=True takes the argmax instead of sampling."""
        raise NotImplementedError

    def after_update(self, module: Any) -> None:
        """Called after every RL step's optimizer steps."""

    def stats(self) -> dict[str, float]:
        """The engine's own per-step statistics (rollout/*), logged with the step's."""
        return {}
