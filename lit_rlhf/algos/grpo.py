"""GRPOModule: group-relative advantages over K samples per prompt (Shao et al. 2024), with the corrections
users train with: Dr. GRPO (no std scaling, a length-unbiased loss; Liu et al. 2025) and DAPO (clip-higher,
the global token mean, dynamic sampling's zero-std filter, the soft overlong penalty; Yu et al. 2025).

Shapes: B prompts per rank, K = num_generations, N = B*K sequences, R response length.
"""

from __future__ import annotations

import torch

from lit_rlhf.algos.base import RLHFModule
from lit_rlhf.algos.rollout import Rollout
from lit_rlhf.algos.rollout_stats import zero_std_groups
from lit_rlhf.config import GRPOConfig
from lit_rlhf.ops import LossShare, aggregate_loss, bias_corrected_kl, kl_per_token, masked_mean, overlong_penalty


class GRPOModule(RLHFModule):
    """advantage = (r - group mean) / (group std + 1e-4) on every token (scale_rewards), the clipped surrogate
    with cliprange_low / cliprange_high, aggregated by loss_type (`dapo` by default). The KL to the reference is
    a loss term, + kl_coef x k3_t aggregated like the surrogate (kl_in=loss), or a reward penalty as RLOO's
    (kl_in=reward); kl_coef = 0 skips the reference forward."""

    config_class = GRPOConfig
    estimator = "group"

    @property
    def samples_per_prompt(self) -> int:
        return self.hparams.num_generations

    @property
    def kl_in_loss(self) -> bool:
        return self.hparams.kl_in == "loss" and self.uses_reference

    def compute_advantages(self, rollout: Rollout) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        hp = self.hparams
        kl, non_score_reward = self.kl_and_non_score_reward(rollout)  # N,R
        if hp.kl_in == "loss":
            non_score_reward = torch.zeros_like(non_score_reward)
        stats = {}
        if hp.overlong_buffer is not None:
            penalty = overlong_penalty(rollout.response_mask.sum(1), hp.response_length, hp.overlong_buffer,
                                       hp.overlong_penalty_factor)  # N
            rollout.scores = rollout.scores + penalty
            stats["rollout/overlong_penalty"] = penalty.mean()
        if hp.filter_zero_std_groups:  # no signal in them: out of the loss, and out of its token counts
            rollout.in_loss = ~zero_std_groups(rollout.scores, rollout.prompt_index)  # N
        estimate = self.estimate(rollout, non_score_reward)
        stats.update(self.objective_stats(rollout, kl, non_score_reward, estimate.rlhf_reward))
        return estimate.advantages, stats

    def policy_loss(self, new_logprobs: torch.Tensor, entropy: torch.Tensor, rollout: Rollout,
                    advantages: torch.Tensor, idx: torch.Tensor, share: LossShare):
        """The clipped surrogate plus, with kl_in=loss, kl_coef x the per-token KL of the policy being updated
        to the reference (kl_estimator, k3 by default), aggregated the same way."""
        loss, stats = super().policy_loss(new_logprobs, entropy, rollout, advantages, idx, share)
        if self.kl_in_loss:
            kl = kl_per_token(new_logprobs, rollout.ref_logprobs[idx], self.hparams.kl_estimator)  # M,R
            if self.hparams.use_bias_correction_kl:
                kl = bias_corrected_kl(kl, new_logprobs, rollout.logprobs[idx])  # M,R
            kl_loss = aggregate_loss(kl, rollout.loss_mask(idx), share)
            loss = loss + self.kl_coef * kl_loss
            stats["loss/kl_avg"] = masked_mean(kl.detach(), rollout.loss_mask(idx))
        return loss, stats
