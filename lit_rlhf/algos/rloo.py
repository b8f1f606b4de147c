"""RLOOModule: REINFORCE with a leave-one-out baseline over K samples per prompt (Ahmadian et al. 2024).

Shapes: B prompts per rank, K = rloo_k, N = B*K sequences, R response length.
"""

from __future__ import annotations

import torch

from lit_rlhf.algos.base import RLHFModule
from lit_rlhf.algos.step_stats import objective_stats
from lit_rlhf.config import RLOOConfig
from lit_rlhf.step.kl_controller import KLPenalty
from lit_rlhf.step.rollout import Rollout


class RLOOModule(RLHFModule):
    """RLOO with a sequence-level KL penalty (default) or a per-token one.

    sequence: rlhf_reward = score - kl_coef * sum_t KL_t, advantage = rlhf_reward - mean of the
              K-1 siblings' rlhf_reward, the same for every token of the response.
    token:    per-token rewards -kl_coef * KL_t, plus the score on the last response token;
              token t's advantage is its reward-to-go G_t minus the siblings' mean return G_0,
              so a token is only charged for the KL of the tokens it leads to.
    """

    config_class = RLOOConfig
    estimator = "loo"

    @property
    def samples_per_prompt(self) -> int:
        return self.hparams.rloo_k

    @property
    def masks_truncated_completions(self) -> bool:
        return self.hparams.mask_truncated_completions

    def kl_penalty(self, rollout: Rollout) -> KLPenalty:
        """The controller's penalty; with mask_truncated_completions, none on the truncated responses, whose KL TRL's
        RLOO sums over a mask it zeroed (objective/kl and the adaptive controller count them at 0)."""
        penalty = super().kl_penalty(rollout)
        if rollout.loss_masked is None or penalty.kl is None:
            return penalty
        kept = (~rollout.loss_masked).unsqueeze(1)  # N,1
        return KLPenalty(penalty.kl * kept, penalty.non_score_reward * kept)

    def compute_advantages(self, rollout: Rollout, penalty: KLPenalty) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        estimate = self.estimate(rollout, penalty.non_score_reward)
        return estimate.advantages, objective_stats(rollout, penalty.kl, penalty.non_score_reward, estimate.rlhf_reward)
