"""ReinforcePPModule: REINFORCE++ (Hu et al. 2025): no critic, per-token KL penalties in the reward, the
reward-to-go of each token whitened over the whole batch of every rank, and PPO's clipped surrogate.
baseline=group (REINFORCE++-baseline) subtracts each prompt's mean score first.

Shapes: B prompts per rank, K samples per prompt, N = B*K sequences, R response length.
"""

from __future__ import annotations

import torch

from lit_rlhf.algos.base import RLHFModule
from lit_rlhf.algos.step_stats import objective_stats
from lit_rlhf.config import ReinforcePPConfig
from lit_rlhf.step.kl_controller import KLPenalty
from lit_rlhf.step.rollout import Rollout


class ReinforcePPModule(RLHFModule):
    config_class = ReinforcePPConfig
    estimator = "reinforce_pp"

    @property
    def samples_per_prompt(self) -> int:
        return self.hparams.samples_per_prompt

    def kl_penalty(self, rollout: Rollout) -> KLPenalty:
        penalty = super().kl_penalty(rollout)
        if penalty.kl is None or self.hparams.kl_clamp is None:
            return penalty
        kl = penalty.kl.clamp(-self.hparams.kl_clamp, self.hparams.kl_clamp)  # N,R: OpenRLHF's per-token KL clamp
        return KLPenalty(kl, -self.kl_coef * kl)

    def compute_advantages(self, rollout: Rollout, penalty: KLPenalty) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        estimate = self.estimate(rollout, penalty.non_score_reward)
        return estimate.advantages, objective_stats(rollout, penalty.kl, penalty.non_score_reward, estimate.rlhf_reward)
