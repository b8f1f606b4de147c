"""The rollout seam: a RolloutEngine turns a prompt batch into sampled trajectories.

    prompt batch (B prompts) --engine.sample--> Samples (N = B*K episodes: ids, masks, sampler logprobs)

`sample` runs the episodes (rollout/trajectory.py: one model turn for every live episode per engine call, the
environment's answers in between); without an environment an episode is one turn, the single-turn rollout.
An engine implements `generate_turn`: one model turn for a list of token-id contexts.

Everything after sampling is someone else's: the reward (and a teacher) the Sampler's (rollout/sampler.py), the old
and reference logprobs and the advantages the RLHFModule's; an engine is only how tokens are drawn: Hugging Face
`generate` (HFEngine, `rollout=hf`), or another inference engine (VLLMEngine, `rollout=vllm`). A new engine is one
module with a subclass plus one config file in conf/rollout/. Every engine samples purely (temperature only, the
settings of `pure_sampling_config`) and masks responses after the stop token.

Shapes: B prompts, K samples per prompt, N = B*K sequences, P prompt length, R response length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from lit_rlhf.rollout.context import SamplingContext
from lit_rlhf.rollout.trajectory import Episode, episode_tensors, run_episodes


@dataclass
class Samples:
    queries: torch.Tensor  # N,P  left-padded prompts, each repeated K times
    query_mask: torch.Tensor  # N,P
    responses: torch.Tensor  # N,R  padded after the stop token
    response_mask: torch.Tensor  # N,R  True up to and including the stop token
    prompt_index: torch.Tensor  # N    which prompt of the batch each sequence answers
    sampler_logprobs: torch.Tensor | None = None  # N,R  the engine's own logprobs of the sampled tokens, if any
    # multi-turn only: every token after the prompt (model turns and observations); response_mask is then the
    # model's tokens only, with observation tokens in between
    context_mask: torch.Tensor | None = None  # N,R
    episodes: list[Episode] | None = None  # N
    stopped: list[bool] | None = None  # N  each response's last model turn ended with the stop token (on the host)

    @property
    def forward_mask(self) -> torch.Tensor:
        """The tokens after the prompt that a forward attends to: the whole trajectory. -> (N,R)"""
        return self.response_mask if self.context_mask is None else self.context_mask


def repeat_prompts(batch: dict[str, torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K copies of every prompt, adjacent (the K siblings of a prompt stay together and on one rank).
    -> queries (N,P), query_mask (N,P), prompt_index (N)"""
    queries = batch["input_ids"].repeat_interleave(k, dim=0)  # N,P
    query_mask = batch["attention_mask"].repeat_interleave(k, dim=0)  # N,P
    prompt_index = torch.arange(len(batch["input_ids"]), device=queries.device).repeat_interleave(k)  # N
    return queries, query_mask, prompt_index


def episode_rows(batch: dict[str, Any], prompt_index: torch.Tensor) -> list[dict[str, Any]]:
    """The dataset columns of each episode's prompt. -> N dicts"""
    columns = batch.get("columns") or {}
    return [{name: values[i] for name, values in columns.items()} for i in prompt_index.tolist()]


def left_pad(contexts: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id lists as a left-padded batch. -> input_ids (N,L), attention_mask (N,L)"""
    width = max(len(c) for c in contexts)
    # padded as lists, one tensor each: no per-row tensor operations around every generate() call
    ids = torch.tensor([[pad_id] * (width - len(c)) + c for c in contexts], dtype=torch.long)  # N,L
    mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], dtype=torch.long)  # N,L
    return ids.to(device), mask.to(device)


class RolloutEngine:
    """How tokens are sampled. Subclasses implement `generate_turn`; `setup` runs once the module's weights are
    loaded, `after_update` after every RL step's optimizer steps (an engine holding its own copy of the
    weights syncs them there), `begin`/`end` around each rollout's episodes."""

    #: every rank must call `sample` (FSDP2 gathers the weights for a rollout; ZeRO-3 layer by layer)
    lockstep: bool = False
    #: every rank must run each generation step together (ZeRO-3: every forward gathers each layer)
    synced_generation: bool = False
    #: generate_turn returns the engine's logprobs of the sampled tokens (when sampling from the policy)
    reports_logprobs: bool = False
    #: `sample` may run in several threads at once, each with its own context (async mode's algo.async_draws)
    concurrent_draws: bool = True
    #: one engine outside the ranks serves them all (servers): rank zero syncs its weights while the others wait,
    #: so with several ranks every rank samples together (lockstep)
    shared_by_ranks: bool = False

    def setup(self, sampling: SamplingContext) -> None:
        """Called from RLHFModule.configure_model, after the policy, reference and tokenizer loaded (the context's)."""

    def takes_random_stream(self) -> bool:
        """Whether a draw samples from the random stream its context carries (`random_stream`), rather than
        from torch's default generator, which other threads share."""
        return False

    def sample(self, sampling: SamplingContext, batch: dict[str, torch.Tensor], samples_per_prompt: int,
               from_reference: bool = False, greedy: bool = False) -> Samples:
        """K episodes per prompt of batch (input_ids, attention_mask: B,P) from the policy (or the reference);
        greedy=True takes the argmax instead of sampling."""
        queries, query_mask, prompt_index = repeat_prompts(batch, samples_per_prompt)  # N,P ; N,P ; N
        self.begin(sampling, from_reference)
        try:
            episodes = run_episodes(self, sampling, queries, query_mask, episode_rows(batch, prompt_index),
                                    from_reference, greedy)
        finally:
            self.end(sampling, from_reference)
        tensors = episode_tensors(episodes, sampling.trajectory_length, sampling.tokenizer.pad_token_id, queries.device)
        reported = self.reports_logprobs and not greedy and not from_reference
        multi_turn = sampling.environment is not None
        return Samples(queries, query_mask, tensors["responses"], tensors["response_mask"], prompt_index,
                       tensors["sampler_logprobs"] if reported else None,
                       tensors["context_mask"] if multi_turn else None, episodes if multi_turn else None,
                       [e.stopped for e in episodes])

    def generate_turn(self, sampling: SamplingContext, contexts: list[list[int]], max_new_tokens: int,
                      from_reference: bool, greedy: bool) -> list[tuple[list[int], list[float] | None]]:
        """One model turn per context (token ids: prompt and trajectory so far), at most max_new_tokens each:
        (the sampled ids, the engine's logprobs of them or None), in order."""
        raise NotImplementedError

    def begin(self, sampling: SamplingContext, from_reference: bool) -> None:
        """Before a rollout's first turn."""

    def end(self, sampling: SamplingContext, from_reference: bool) -> None:
        """After its last turn (also when it failed)."""

    def after_update(self, sampling: SamplingContext) -> None:
        """Called after every RL step's optimizer steps."""

    def stats(self) -> dict[str, float]:
        """The engine's own per-step statistics (rollout/*), logged with the step's."""
        return {}
