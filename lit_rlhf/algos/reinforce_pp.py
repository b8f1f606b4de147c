"""ReinforcePPModule: REINFORCE++ (Hu et al. 2025): no critic, per-token KL penalties in the reward, the
reward-to-go of each token whitened over the whole batch of every rank, and PPO's clipped surrogate.
baseline=group (REINFORCE++-baseline) subtracts each prompt's mean score first.

Shapes: B prompts per rank, K samples per prompt, N = B*K sequences, R response length.
"""

from __future__ import annotations

import torch

from lit_rlhf.algos.base import RLHFModule
from lit_rlhf.algos.rollout import Rollout
from lit_rlhf.algos.step_stats import objective_stats
from lit_rlhf.config import ReinforcePPConfig


class ReinforcePPModule(RLHFModule):
    config_class = ReinforcePPConfig
    estimator = "reinforce_pp"

    @property
    def samples_per_prompt(self) -> int:
        return self.hparams.samples_per_prompt

    def compute_advantages(self, rollout: Rollout) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        kl, non_score_reward = self.kl_controller.kl_and_non_score_reward(rollout)  # N,R
        if kl is not None and self.hparams.kl_clamp is not None:  # OpenRLHF's per-token KL clamp
            kl = kl.clamp(-self.hparams.kl_clamp, self.hparams.kl_clamp)  # N,R
            non_score_reward = -self.kl_coef * kl  # N,R
        estimate = self.estimate(rollout, non_score_reward)
        return estimate.advantages, objective_stats(rollout, kl, non_score_reward, estimate.rlhf_reward)
