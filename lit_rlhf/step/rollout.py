"""What a rollout holds (the forward passes that score its responses are lit_rlhf.models.forwards).

Shapes: N sequences, P prompt length, R response length, V vocab.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lit_rlhf.ops.batching import split_by_tokens


@dataclass
class Rollout:
    queries: torch.Tensor  # N,P  left-padded prompts
    query_mask: torch.Tensor  # N,P
    responses: torch.Tensor  # N,R  padded after the stop token
    # N,R  the action mask: the model's sampled tokens, up to and including the stop token (on a multi-turn
    # trajectory, its turns' tokens only); every per-token quantity (logprobs, KL, advantages, losses) uses it
    response_mask: torch.Tensor
    prompt_index: torch.Tensor  # N    which prompt of the batch each sequence answers
    logprobs: torch.Tensor  # N,R  policy at sampling time ("old")
    ref_logprobs: torch.Tensor  # N,R
    scores: torch.Tensor  # N    reward after normalization and the missing-EOS penalty
    raw_scores: torch.Tensor  # N    what the reward returned
    contains_stop: torch.Tensor  # N
    values: torch.Tensor | None = None  # N,R  critic's values at rollout time (PPO)
    returns: torch.Tensor | None = None  # N,R  value targets (PPO)
    prompts: list[str] = field(default_factory=list)
    completions: list[str] = field(default_factory=list)
    # (logprobs N,R with their graph, entropy N,R) of the rollout's policy forward, when the update reuses it
    policy_outputs: tuple[torch.Tensor, torch.Tensor] | None = None
    sampler_logprobs: torch.Tensor | None = None  # N,R  the rollout engine's logprobs, when it reports them
    is_weights: torch.Tensor | None = None  # N,R  min(pi_old / pi_sampler, rollout_is_cap), with sampler logprobs
    in_loss: torch.Tensor | None = None  # N  bool: sequences the loss trains on (None: all)
    # N bool: sequences whose tokens the loss leaves out while still counting them among its sequences (TRL's
    # mask_truncated_completions: the responses without the stop token); None: none
    loss_masked: torch.Tensor | None = None
    reward_components: dict[str, torch.Tensor] = field(default_factory=dict)  # {name: N} each named reward's scores
    columns: dict[str, list] = field(default_factory=dict)  # {name: N values} the dataset columns of each prompt
    # multi-turn: every token after the prompt (model turns and observations); response_mask then holds the model's
    # tokens only, the ones logprobs, KL, advantages and losses count. None: single-turn (the response_mask).
    context_mask: torch.Tensor | None = None  # N,R
    conversations: list[list[tuple[str, str]]] = field(default_factory=list)  # N x [(model | env, text)], multi-turn
    policy_version: int | None = None  # async mode: the version (RL steps trained) of the weights that sampled it
    # async_correction=behaviour: the trainer's logprobs of the tokens at the current version (logprobs are then the
    # sampler's), so that rollout/* measure the lag; None: logprobs are the trainer's
    trainer_logprobs: torch.Tensor | None = None  # N,R
    gold_scores: torch.Tensor | None = None  # N  the gold reward's (a Sampler with a gold reward), never trained on
    teacher_logprobs: torch.Tensor | None = None  # N,R  the teacher's, zero off the model's tokens (distillation)
    # a served teacher's most likely tokens at each model token (teacher.top_logprobs): ids, and logprobs (-inf:
    # padding), N,R,K
    teacher_top_ids: torch.Tensor | None = None
    teacher_top_logprobs: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.responses.shape[0]

    @property
    def forward_mask(self) -> torch.Tensor:
        """The tokens after the prompt that a forward attends to: the whole trajectory. -> (N,R)"""
        return self.response_mask if self.context_mask is None else self.context_mask

    def sequences(self, idx: torch.Tensor | slice = slice(None)) -> tuple[torch.Tensor, ...]:
        """(queries, query_mask, responses, forward_mask) of sequences idx: what a forward takes."""
        return self.queries[idx], self.query_mask[idx], self.responses[idx], self.forward_mask[idx]

    def on_model_tokens(self, values: torch.Tensor, idx: torch.Tensor | slice = slice(None)) -> torch.Tensor:
        """Per-token values (M,R) of sequences idx, zero on observation tokens (a forward computes them there too)."""
        return values if self.context_mask is None else values * self.response_mask[idx]

    def micro_batches(self, idx: torch.Tensor, size: int, max_tokens: int | None) -> list[torch.Tensor]:
        """The micro-batches of an optimizer step on sequences idx: max_tokens (prompt and response tokens) at most
        each (algo.max_tokens_per_micro_batch), or else groups of `size` sequences."""
        if max_tokens is None:
            return list(idx.split(size))
        tokens = self.query_mask.sum(1) + self.forward_mask.sum(1)  # N
        return split_by_tokens(idx, tokens, max_tokens)

    def loss_mask(self, idx: torch.Tensor | slice = slice(None)) -> torch.Tensor:
        """The response tokens of sequences idx that the loss trains on. -> (M,R)"""
        mask = self.response_mask[idx]  # M,R
        if self.loss_masked is not None:
            mask = mask & ~self.loss_masked[idx].unsqueeze(1)
        return mask if self.in_loss is None else mask & self.in_loss[idx].unsqueeze(1)
