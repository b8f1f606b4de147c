"""RLOOModule: REINFORCE with a leave-one-out baseline over K samples per prompt (Ahmadian et al. 2024).

Shapes: B prompts per rank, K = rloo_k, N = B*K sequences, R response length.
"""

from __future__ import annotations

import torch

from lit_rlhf.algos.base import RLHFModule
from lit_rlhf.algos.rollout import Rollout
from lit_rlhf.config import RLOOConfig
from lit_rlhf.ops import leave_one_out_baseline, masked_whiten, place_score_on_last_token, reward_to_go


class RLOOModule(RLHFModule):
    """RLOO with a sequence-level KL penalty (default) or a per-token one.

    sequence: rlhf_reward = score - kl_coef * sum_t KL_t, advantage = rlhf_reward - mean of the
              K-1 siblings' rlhf_reward, the same for every token of the response.
    token:    per-token rewards -kl_coef * KL_t, plus the score on the last response token;
              token t's advantage is its reward-to-go G_t minus the siblings' mean return G_0,
              so a token is only charged for the KL of the tokens it leads to.
    """

    config_class = RLOOConfig

    @property
    def samples_per_prompt(self) -> int:
        return self.hparams.rloo_k

    def compute_advantages(self, rollout: Rollout) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        mask = rollout.response_mask  # N,R
        kl, non_score_reward = self.kl_and_non_score_reward(rollout)  # N,R
        if self.hparams.kl_penalty == "sequence":
            rlhf_reward = rollout.scores + non_score_reward.sum(1)  # N
            advantages = (rlhf_reward - leave_one_out_baseline(rlhf_reward, rollout.prompt_index))  # N
            if self.hparams.normalize_advantage:
                advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
            advantages = advantages.unsqueeze(1) * mask  # N,R
        else:
            token_rewards = non_score_reward + place_score_on_last_token(rollout.scores, mask)  # N,R
            returns = reward_to_go(token_rewards, mask)  # N,R
            rlhf_reward = returns[:, 0]  # N  = score - kl_coef * sum_t KL_t
            advantages = (returns - leave_one_out_baseline(rlhf_reward, rollout.prompt_index).unsqueeze(1)) * mask
            if self.hparams.normalize_advantage:
                advantages = masked_whiten(advantages, mask)
        return advantages, self.objective_stats(rollout, kl, non_score_reward, rlhf_reward)
