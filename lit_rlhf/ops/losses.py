"""The PPO clipped surrogate, per token (Schulman et al. 2017), with its diagnostics, and the loss
types that turn per-token losses into one optimizer step's loss.

Shapes: M sequences in a micro-batch, R response length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lit_rlhf.choices import LOSS_TYPES
from lit_rlhf.ops.masks import masked_mean, masked_var
from lit_rlhf.ops.policy_losses import cispo_loss, clip_loss, sapo_loss, sequence_log_ratio, vespo_loss


@dataclass(frozen=True)
class LossShare:
    """What a micro-batch needs to compute its share of one optimizer step's loss: the shares of the step's
    micro-batches, summed (and averaged over ranks, as DDP averages gradients), give the step's loss.

    loss_type     bnpo     token mean of each micro-batch, averaged over micro-batches
                  grpo     mean over the step's sequences of each sequence's token mean
                  dr_grpo  token sum / (the step's sequences x max_length)
                  dapo     token sum / response tokens of the whole step, over all ranks
                  luspo    token sum / the step's sequences: each sequence's loss (its token mean) times its
                           length, averaged over sequences (LUSPO, arXiv 2602.05261)
    micro_batches   micro-batches of the step on each rank (bnpo)
    step_sequences  sequences of the step on each rank (grpo, dr_grpo, luspo; None: micro_batches equal
                    micro-batches)
    max_length      dr_grpo's constant: the configured response_length, never a batch's padded length
    step_tokens     dapo: response tokens of the step over all ranks, divided by the number of ranks (a number, or
                    a tensor on the loss's device)
    """

    loss_type: str = "bnpo"
    micro_batches: int = 1
    max_length: int | None = None
    step_tokens: float | torch.Tensor | None = None
    step_sequences: int | None = None


def aggregate_loss(per_token: torch.Tensor, response_mask: torch.Tensor, share: LossShare) -> torch.Tensor:
    """The micro-batch's share of the step loss from per-token losses (M,R). bnpo's step loss is the same
    however the step is split only when the micro-batches hold the same number of tokens; the other types' always
    (micro-batches of any sizes, e.g. by token budget)."""
    mask = response_mask.to(per_token.dtype)  # M,R
    sequences = share.step_sequences or per_token.shape[0] * share.micro_batches
    if share.loss_type == "bnpo":
        return masked_mean(per_token, response_mask) / share.micro_batches
    if share.loss_type == "grpo":
        return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).sum() / sequences
    if share.loss_type == "dr_grpo":
        return (per_token * mask).sum() / (sequences * share.max_length)
    if share.loss_type == "luspo":
        return (per_token * mask).sum() / sequences
    if share.loss_type == "dapo":
        tokens = share.step_tokens
        if isinstance(tokens, torch.Tensor):  # on the device: no host read inside the update
            return (per_token * mask).sum() / tokens.to(per_token.dtype).clamp(min=1e-8)
        return (per_token * mask).sum() / max(tokens, 1e-8)
    raise ValueError(f"loss_type={share.loss_type!r} is not one of {LOSS_TYPES}")


@dataclass(frozen=True)
class PolicyLoss:
    """Which per-token policy loss (ops/policy_losses.py) and its settings. kind: clip | cispo | sapo | vespo;
    level: token | sequence (GSPO's ratio); cispo_cap: CISPO's bound on the importance weight; tau_pos,
    tau_neg: SAPO's gate temperatures for positive and negative advantages; delta: the two-sided clip's cap on
    the unclipped ratio (kind clip; None: off)."""

    kind: str = "clip"
    level: str = "token"
    cispo_cap: float = 5.0
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    delta: float | None = None


def sequence_share(per_token: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """The mean over every row of a per-sequence value broadcast over its tokens (each sequence counted once,
    whatever its length; a row without response tokens counts 0), as TRL's GRPO trainer averages its sequence-level
    clip ratios over all rows. (M,R) x2 -> ()"""
    mask = response_mask.to(per_token.dtype)
    per_sequence = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)  # M
    return per_sequence.mean() if per_sequence.numel() else per_token.new_zeros(())


def clipped_policy_loss(
    logprobs: torch.Tensor,  # M,R  under the policy being updated
    old_logprobs: torch.Tensor,  # M,R  under the policy that sampled
    advantages: torch.Tensor,  # M,R  (a sequence advantage broadcast over its tokens, or per token)
    response_mask: torch.Tensor,  # M,R
    cliprange_low: float,
    cliprange_high: float | None = None,
    share: LossShare = LossShare(),
    is_weights: torch.Tensor | None = None,  # M,R  truncated importance weights pi_old / pi_sampler (no grad)
    loss: PolicyLoss = PolicyLoss(),
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """max(-A * ratio, -A * clip(ratio, 1 - eps_low, 1 + eps_high)) (or loss.kind's per-token loss, with the
    ratio at loss.level), each token's times its importance weight when given (a rollout engine's
    sampler/trainer correction), the micro-batch's share of the step loss (aggregate_loss), and its statistics.
    eps_high defaults to eps_low; eps_high > eps_low is DAPO's clip-higher. clip_ratio/*: the share of tokens
    whose gradient the clip removed, below (A < 0) and above (A > 0) the range, as TRL's GRPO trainer logs them
    (CISPO: the tokens whose weight was capped; SAPO and VESPO clip nothing)."""
    cliprange_high = cliprange_low if cliprange_high is None else cliprange_high
    logprobs_diff = logprobs - old_logprobs  # M,R
    log_ratio = sequence_log_ratio(logprobs, old_logprobs, response_mask) if loss.level == "sequence" \
        else logprobs_diff  # M,R
    ratio = torch.exp(log_ratio)  # M,R
    if loss.kind == "cispo":
        pg_loss_max = cispo_loss(ratio, advantages, logprobs, loss.cispo_cap)  # M,R
    elif loss.kind == "sapo":
        pg_loss_max = sapo_loss(ratio, advantages, loss.tau_pos, loss.tau_neg)  # M,R
    elif loss.kind == "vespo":  # its weight phi comes in is_weights (algos/forwards.py: policy_loss_weights)
        pg_loss_max = vespo_loss(advantages, logprobs)  # M,R
    else:
        pg_loss_max = clip_loss(ratio, advantages, cliprange_low, cliprange_high, loss.delta)  # M,R
    if is_weights is not None:
        pg_loss_max = pg_loss_max * is_weights  # M,R
    pg_loss = aggregate_loss(pg_loss_max, response_mask, share)
    with torch.no_grad():
        if loss.kind == "clip":
            clipped_low = (ratio < 1.0 - cliprange_low) & (advantages < 0)  # M,R
            clipped_high = (ratio > 1.0 + cliprange_high) & (advantages > 0)  # M,R
        else:  # CISPO counts, as TRL's cispo_clip_ratio, the capped weights of positive advantages
            clipped_low = torch.zeros_like(ratio, dtype=torch.bool)  # M,R
            clipped_high = (ratio > loss.cispo_cap) & (advantages > 0) if loss.kind == "cispo" else clipped_low
        # the two-sided clip also removes the gradient of A < 0 tokens above delta: clipfrac counts them, clip_ratio/*
        # stays TRL's (the clip range's)
        capped = (ratio > loss.delta) & (advantages < 0) if loss.kind == "clip" and loss.delta is not None \
            else torch.zeros_like(ratio, dtype=torch.bool)  # M,R
        # clip_ratio/*: a share of tokens, or with a sequence ratio (GSPO) a share of sequences, as TRL counts them
        share_of = sequence_share if loss.level == "sequence" else masked_mean
        stats = {
            "approxkl": 0.5 * masked_mean(logprobs_diff**2, response_mask),
            "clipfrac": masked_mean((clipped_low | clipped_high | capped).float(), response_mask),
            "ratio": masked_mean(ratio, response_mask),
            "ratio_var": masked_var(ratio, response_mask),
            "clip_low": share_of(clipped_low.float(), response_mask),
            "clip_high": share_of(clipped_high.float(), response_mask),
            "clip_region": share_of((clipped_low | clipped_high).float(), response_mask),
            "token_mean": masked_mean(pg_loss_max, response_mask),
        }
    return pg_loss, stats


def clipped_value_loss(
    vpred: torch.Tensor,  # M,R  values under the critic being updated
    values: torch.Tensor,  # M,R  values at rollout time
    returns: torch.Tensor,  # M,R
    response_mask: torch.Tensor,  # M,R
    cliprange_value: float,
    share: LossShare = LossShare(),
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """0.5 * max((V - G)^2, (clip(V, V_old +- eps) - G)^2) per token, aggregated as the policy loss (the
    micro-batch's share of the step's loss; a token mean by default), and its statistics: the clipped
    fraction and the token mean."""
    vpredclipped = torch.clamp(vpred, values - cliprange_value, values + cliprange_value)  # M,R
    vf_losses1 = (vpred - returns) ** 2  # M,R
    vf_losses2 = (vpredclipped - returns) ** 2  # M,R
    per_token = 0.5 * torch.max(vf_losses1, vf_losses2)  # M,R
    with torch.no_grad():
        stats = {"clipfrac": masked_mean((vf_losses2 > vf_losses1).float(), response_mask),
                 "token_mean": masked_mean(per_token, response_mask)}
    return aggregate_loss(per_token, response_mask, share), stats
