"""PPOModule: PPO with a learned value function and GAE (Schulman et al. 2017; Ziegler et al. 2019).

Shapes: B prompts per rank, K samples per prompt, N = B*K sequences, R response length, V vocab.
"""

from __future__ import annotations

import torch

from lit_rlhf.algos.base import RLHFModule
from lit_rlhf.algos.step_stats import objective_stats
from lit_rlhf.config import PPOConfig
from lit_rlhf.distributed.ranks import sum_over_ranks
from lit_rlhf.models.forwards import response_forward, sequence_inputs
from lit_rlhf.models.value import (
    ValueHead,
    add_critic_adapter,
    critic_adapter_active,
    load_reward_model_critic,
    reward_model_values,
)
from lit_rlhf.ops import (
    LossShare,
    aggregate_loss,
    clipped_value_loss,
    entropy_from_logits,
    global_masked_whiten,
    logprobs_and_entropy,
    logprobs_from_logits,
    masked_mean,
    masked_var,
)
from lit_rlhf.step.kl_controller import KLPenalty
from lit_rlhf.step.rollout import Rollout


class PPOModule(RLHFModule):
    """PPO on per-token rewards: -kl_coef * KL_t at every response token, plus the score on the last
    response token (the stop token when there is one). Padding after it carries no reward, no KL and
    no value loss.

    critic: "shared" (a value head on the policy's last hidden state: one forward gives logits and
    values), "adapter" (a second LoRA adapter on the same base weights, with its own head) or
    "reward_model" (backbone and head of critic_model_path, a separate model).
    """

    supports_single_update = False  # the rollout forward also computes the values

    config_class = PPOConfig
    estimator = "gae"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.samples_per_prompt = self.hparams.samples_per_prompt
        self.value_head = self.critic_backbone = None

    def load_models(self) -> None:
        super().load_models()
        hp, spec = self.hparams, self.hparams.model
        if hp.critic == "reward_model":
            self.critic_backbone, self.value_head = load_reward_model_critic(
                hp.critic_model_path, spec.get("dtype"), spec.get("lora"), empty=self.sharding.loads_sharded)
            return
        if hp.critic == "adapter":
            add_critic_adapter(self.policy, spec.get("lora"))
        self.value_head = ValueHead(self.policy.config.get_text_config().hidden_size)  # a multimodal config nests it

    @property
    def warming_up(self) -> bool:
        """During critic warm-up only the critic learns (in shared mode: only the value head)."""
        return self.rl_step < self.hparams.critic_warmup_steps

    def on_after_backward(self) -> None:
        if not self.warming_up:  # the policy's parameters are meant to get no gradient until the critic has warmed up
            super().on_after_backward()

    def trained_router_load(self):
        """The update's collector of a MoE policy's load-balancing loss: not while the critic warms up alone."""
        return self.router_load if torch.is_grad_enabled() and not self.warming_up else None

    def policy_and_values(self, queries, query_mask, responses, response_mask):
        """One forward of the policy (and of the critic when separate). -> logits (N,R,V), values (N,R)"""
        kind, length = self.hparams.critic, responses.shape[1]
        logits, hidden = response_forward(self.policy, queries, query_mask, responses, response_mask,
                                          with_hidden=kind == "shared", router_load=self.trained_router_load())
        if kind == "shared":
            return logits, self.value_head(hidden.detach() if self.warming_up else hidden)
        if kind == "adapter":
            with critic_adapter_active(self.policy) as critic:
                _, hidden = response_forward(critic, queries, query_mask, responses, response_mask, with_hidden=True)
            return logits, self.value_head(hidden)
        inputs = sequence_inputs(queries, query_mask, responses, response_mask)
        return logits, reward_model_values(self.critic_backbone, self.value_head, inputs, length)

    @torch.no_grad()
    def old_logprobs_and_values(self, queries, query_mask, responses, response_mask):
        step = self.hparams.forward_batch_size or len(responses)
        logprobs, values = [], []
        for i in range(0, len(responses), step):
            s = slice(i, i + step)
            logits, chunk_values = self.policy_and_values(queries[s], query_mask[s], responses[s], response_mask[s])
            logprobs.append(logprobs_from_logits(logits, responses[s], self.hparams.temperature))
            values.append(chunk_values.float())
        return torch.cat(logprobs), torch.cat(values)  # N,R ; N,R

    def compute_advantages(self, rollout: Rollout, penalty: KLPenalty) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        hp, mask = self.hparams, rollout.response_mask  # N,R
        estimate = self.estimate(rollout, penalty.non_score_reward)
        advantages, values = estimate.advantages, rollout.values * mask  # N,R
        rollout.returns = estimate.returns  # N,R: the value loss's targets in every minibatch of the update
        stats = objective_stats(rollout, penalty.kl, penalty.non_score_reward, estimate.rlhf_reward)
        stats.update({
            "val/var_explained": 1 - masked_var(rollout.returns - values, mask) / masked_var(rollout.returns, mask),
            "val/mean": masked_mean(values, mask), "val/var": masked_var(values, mask),
            "returns/mean": masked_mean(rollout.returns, mask), "returns/var": masked_var(rollout.returns, mask),
            "policy/advantages_mean": masked_mean(advantages, mask),
        })
        if hp.whiten_advantages:  # over the tokens of every rank, as in one process
            advantages = global_masked_whiten(advantages, mask, sum_over_ranks(self._trainer))
        return advantages, stats

    def minibatch_loss(self, rollout: Rollout, advantages: torch.Tensor, idx: torch.Tensor, share: LossShare):
        hp, mask = self.hparams, rollout.loss_mask(idx)  # M,R
        logits, vpred = self.policy_and_values(*rollout.sequences(idx))  # M,R,V ; M,R
        new_logprobs, entropy = logprobs_and_entropy(logits, rollout.responses[idx], hp.temperature)  # M,R ; M,R
        pg_loss, stats = self.policy_loss(new_logprobs, entropy, rollout, advantages, idx, share)
        vf_loss, vf_stats = clipped_value_loss(vpred.float(), rollout.values[idx], rollout.returns[idx], mask,
                                                  hp.cliprange_value, share)  # aggregated as the policy loss
        loss = hp.vf_coef * vf_loss
        if not self.warming_up:
            loss = loss + pg_loss
            if hp.entropy_coef:
                loss = loss - hp.entropy_coef * aggregate_loss(entropy_from_logits(logits, hp.temperature), mask, share)
        return loss, {**stats, "loss/value_avg": vf_stats["token_mean"], "val/clipfrac_avg": vf_stats["clipfrac"]}
