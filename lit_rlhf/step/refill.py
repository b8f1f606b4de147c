"""DAPO's dynamic sampling (Yu et al. 2025): when groups whose K rewards are all equal are filtered, sample more
prompts until the step holds the requested number of informative groups, at most max_refill_rounds extra rollouts.

Refill prompts are drawn from the training prompts by a generator seeded with (data seed, RL step, round), apart
from the prompt stream, so a resumed run draws the same ones (the sampling itself continues the checkpoint's random
state) and the stream's position stays the number of RL steps. Every rank runs the same number of rounds (the
largest any rank needs), so collective operations inside a rollout stay in step.

Shapes: N sequences, P prompt length, R response length; B prompts, K samples per prompt.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import torch
import torch.nn.functional as F

from lit_rlhf.step.rollout import Rollout

# How each per-sequence field of a Rollout is padded to a common width: (side, value); None: not padded.
PADDING = {"queries": ("left", "pad"), "query_mask": ("left", 0), "responses": ("right", "pad"),
           "response_mask": ("right", False), "context_mask": ("right", False), "logprobs": ("right", 0.0),
           "ref_logprobs": ("right", 0.0), "values": ("right", 0.0), "returns": ("right", 0.0),
           "sampler_logprobs": ("right", 0.0), "is_weights": ("right", 0.0), "trainer_logprobs": ("right", 0.0),
           "teacher_logprobs": ("right", 0.0), "teacher_top_ids": ("right", 0),
           "teacher_top_logprobs": ("right", float("-inf"))}


def refill_prompt_indices(num_prompts: int, count: int, seed: int, rl_step: int, round_: int,
                          rank: int) -> list[int]:
    # modulo 2**64, the generator's range, which the product passes from seeds above about 1.4e8 (a run's seed goes
    # up to 2**32 - 1); below them the modulo leaves it as it is
    generator = torch.Generator().manual_seed((((seed * 1_000_003 + rl_step) * 1_009 + round_) * 131 + rank) % 2**64)
    return torch.randperm(num_prompts, generator=generator)[:count].tolist()


def pad_to(tensor: torch.Tensor, width: int, side: str, value: Any) -> torch.Tensor:
    """Pads dimension 1 (the tokens) of an (N,R,...) tensor to width."""
    missing = width - tensor.shape[1]
    if missing == 0:
        return tensor
    trailing = (0, 0) * (tensor.dim() - 2)  # F.pad's pairs run from the last dimension
    return F.pad(tensor, (*trailing, *((missing, 0) if side == "left" else (0, missing))), value=value)


def concat_rollouts(rollouts: list[Rollout], pad_id: int) -> Rollout:
    """One rollout of several (their prompts numbered after each other), tensors padded to common widths."""
    merged: dict[str, Any] = {}
    for f in fields(Rollout):
        parts = [getattr(r, f.name) for r in rollouts]
        if any(p is None for p in parts):
            merged[f.name] = None
        elif f.name == "prompt_index":
            offsets = torch.tensor([0] + [int(r.prompt_index.max()) + 1 for r in rollouts[:-1]]).cumsum(0)
            merged[f.name] = torch.cat([p + int(o) for p, o in zip(parts, offsets, strict=True)])
        elif f.name == "policy_outputs":
            merged[f.name] = tuple(concat_rollouts_tensors([p[i] for p in parts], "right", 0.0) for i in range(2))
        elif isinstance(parts[0], torch.Tensor):
            side, value = PADDING.get(f.name, (None, None))
            value = pad_id if value == "pad" else value
            merged[f.name] = concat_rollouts_tensors(parts, side, value)
        elif isinstance(parts[0], list):
            merged[f.name] = [item for p in parts for item in p]
        else:  # {name: N values or tensor}
            merged[f.name] = {k: torch.cat([p[k] for p in parts]) if isinstance(parts[0][k], torch.Tensor)
                              else [v for p in parts for v in p[k]] for k in parts[0]}
    return Rollout(**merged)


def concat_rollouts_tensors(parts: list[torch.Tensor], side: str | None, value: Any) -> torch.Tensor:
    if side is not None and parts[0].dim() > 1:
        width = max(p.shape[1] for p in parts)
        parts = [pad_to(p, width, side, value) for p in parts]
    return torch.cat(parts)


def select_sequences(rollout: Rollout, keep: torch.Tensor) -> Rollout:
    """The sequences where keep (N,) is True, their prompts renumbered 0..B'-1 in order."""
    idx = keep.nonzero().flatten()
    selected: dict[str, Any] = {}
    for f in fields(Rollout):
        value = getattr(rollout, f.name)
        if isinstance(value, torch.Tensor):
            value = value[idx]
        elif isinstance(value, tuple):
            value = tuple(t[idx] for t in value)
        elif isinstance(value, list) and value:  # an empty list is a field this rollout does not carry
            value = [value[i] for i in idx.tolist()]
        elif isinstance(value, dict):
            value = {k: v[idx] if isinstance(v, torch.Tensor) else [v[i] for i in idx.tolist()]
                     for k, v in value.items()}
        selected[f.name] = value
    selected["prompt_index"] = torch.unique(selected["prompt_index"], return_inverse=True)[1]
    return Rollout(**selected)


def first_groups(informative: torch.Tensor, prompt_index: torch.Tensor, count: int) -> torch.Tensor:
    """(N,) bool: the sequences of `count` groups, informative groups first (in prompt order), then the others."""
    num_groups = int(prompt_index.max()) + 1
    is_informative = torch.zeros(num_groups, dtype=torch.bool, device=prompt_index.device)
    is_informative[prompt_index[informative]] = True
    order = torch.cat([is_informative.nonzero().flatten(), (~is_informative).nonzero().flatten()])[:count]
    chosen = torch.zeros(num_groups, dtype=torch.bool, device=prompt_index.device)
    chosen[order] = True
    return chosen[prompt_index]
