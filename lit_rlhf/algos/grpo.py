"""GRPOModule: group-relative advantages over K samples per prompt (Shao et al. 2024), with the corrections
users train with: Dr. GRPO (no std scaling, a length-unbiased loss; Liu et al. 2025) and DAPO (clip-higher,
the global token mean, dynamic sampling's zero-std filter, the soft overlong penalty; Yu et al. 2025).

Shapes: B prompts per rank, K = num_generations, N = B*K sequences, R response length.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn

from lit_rlhf.algos.base import RLHFModule
from lit_rlhf.algos.step_stats import objective_stats
from lit_rlhf.config import GRPOConfig
from lit_rlhf.data.datamodule import batch_to
from lit_rlhf.distributed.ranks import sum_over_ranks
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.forwards import response_logits
from lit_rlhf.ops import (
    LossShare,
    aggregate_loss,
    bias_corrected_kl,
    entropy_from_logits,
    high_entropy_mask,
    kl_per_token,
    logprobs_from_logits,
    masked_mean,
    overlong_penalty,
)
from lit_rlhf.rollout.engine import Samples
from lit_rlhf.statistics.rollout import zero_std_groups
from lit_rlhf.step.entropy_controller import EntropyController
from lit_rlhf.step.episodes import estimate_advantages
from lit_rlhf.step.kl_controller import KLPenalty
from lit_rlhf.step.refill import concat_rollouts, first_groups, refill_prompt_indices, select_sequences
from lit_rlhf.step.rollout import Rollout


class GRPOModule(RLHFModule):
    """advantage = (r - group mean) / (group std + 1e-4) on every token (scale_rewards), the clipped surrogate
    with cliprange_low / cliprange_high, aggregated by loss_type (`dapo` by default). The KL to the reference is
    a loss term, + kl_coef x k3_t aggregated like the surrogate (kl_in=loss), or a reward penalty as RLOO's
    (kl_in=reward); kl_coef = 0 skips the reference forward."""

    config_class = GRPOConfig
    estimator = "group"
    _warned_fruitless_refill = False  # a refill round that added no informative group is said once per run

    @property
    def samples_per_prompt(self) -> int:
        return self.hparams.num_generations

    @property
    def kl_in_loss(self) -> bool:
        return self.hparams.kl_in == "loss" and self.kl_controller.uses_reference

    @property
    def masks_truncated_completions(self) -> bool:
        return self.hparams.mask_truncated_completions

    _refill_stats: dict[str, torch.Tensor] = {}

    def overlong_penalty(self, response_mask: torch.Tensor) -> torch.Tensor:
        """DAPO's soft overlong penalty of each response (N) from its tokens (N,R)."""
        hp = self.hparams
        return overlong_penalty(response_mask.sum(1), hp.response_length, hp.overlong_buffer,
                                hp.overlong_penalty_factor)  # N

    def training_scores(self, scores: torch.Tensor, samples: Samples) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The overlong penalty added to the scores (overlong_buffer); with filter_zero_std_groups, the groups whose K
        scores are all equal left out of the loss, and out of its token counts: no signal in them."""
        hp = self.hparams
        if hp.overlong_buffer is not None:
            scores = scores + self.overlong_penalty(samples.response_mask)  # N
        in_loss = ~zero_std_groups(scores, samples.prompt_index) if hp.filter_zero_std_groups else None  # N
        return scores, in_loss

    def training_rollout(self, batch: dict[str, torch.Tensor]) -> Rollout:
        """With filter_zero_std_groups and max_refill_rounds: DAPO's dynamic sampling (step/refill.py). The step
        keeps B groups, informative ones first; rollout/refill_rounds and rollout/refill_episodes count the extra
        rollouts and the sequences they generated."""
        rollout = self.rollout(batch)
        hp = self.hparams
        if not (hp.filter_zero_std_groups and hp.max_refill_rounds):
            return rollout
        groups = int(rollout.prompt_index.max()) + 1  # B
        rounds = generated = 0
        before = needed_before = None  # the zero-std share that triggered the refill; the deficit before a round
        while True:
            informative = rollout.in_loss  # N
            deficit = max(groups - len(torch.unique(rollout.prompt_index[informative])), 0)
            # every rank rounds alike
            needed = sum_over_ranks(self._trainer)(torch.tensor(float(deficit), device=self.device))
            if before is None:
                before = torch.tensor(deficit / groups)
            elif float(needed) == float(needed_before) and not self._warned_fruitless_refill:
                self._warned_fruitless_refill = True
                rank_zero_warn(f"DAPO refill: round {rounds} of RL step {self.rl_step + 1} added no informative "
                               f"group (every new group's K rewards were equal again); a reward that is constant on "
                               f"these prompts makes every round a full rollout for nothing (algo.max_refill_rounds="
                               f"{hp.max_refill_rounds} bounds them). Said once per run.")
            if rounds == hp.max_refill_rounds or float(needed) == 0:
                break
            rounds, needed_before = rounds + 1, needed
            extra = self.rollout(self.refill_batch(groups, rounds))
            generated += len(extra)
            rollout = concat_rollouts([rollout, extra], self.tokenizer.pad_token_id)
        self._refill_stats = {"rollout/refill_rounds": torch.tensor(float(rounds)),
                              "rollout/refill_episodes": torch.tensor(float(generated)),
                              "rollout/zero_std_frac_before_refill": before}
        return select_sequences(rollout, first_groups(informative, rollout.prompt_index, groups))

    def refill_batch(self, count: int, round_: int) -> dict[str, torch.Tensor]:
        """`count` training prompts drawn for refill round `round_` of this RL step (see step/refill.py)."""
        datamodule = self.trainer.datamodule
        rows = datamodule.train_prompts
        idx = refill_prompt_indices(len(rows), count, datamodule.hparams.seed, self.rl_step, round_,
                                    self.global_rank)
        return batch_to(datamodule._collate()([rows[i] for i in idx]), self.device)

    def on_fit_start(self) -> None:
        if self.score_transforms and self.hparams.multi_objective_aggregation == "normalize_then_sum":
            names = ", ".join(type(transform).__name__ for transform in self.score_transforms)
            raise ConfigError(f"score transforms ({names}) change the rewards' weighted sum, which algo."
                              f"multi_objective_aggregation=normalize_then_sum does not train on (it normalizes each "
                              f"reward's own scores); drop them (score_transforms=none) or set "
                              f"multi_objective_aggregation=sum_then_normalize.")
        super().on_fit_start()

    def estimate(self, rollout: Rollout, non_score_reward: torch.Tensor):
        """multi_objective_aggregation=normalize_then_sum: GDPO's estimator (`group_decoupled`) on each reward."""
        if self.hparams.multi_objective_aggregation == "sum_then_normalize":
            return super().estimate(rollout, non_score_reward)
        return estimate_advantages(rollout, non_score_reward, "group_decoupled", self.hparams,
                                   sum_over_ranks(self._trainer), self.reward_scores(rollout))

    def reward_scores(self, rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
        """Each named reward's scores (N,C; NaN where it returned None) and weight (C: a WeightedSum's, else 1), with
        the score terms the settings add, missing_eos_penalty and the overlong penalty, as rewards of weight 1 (TRL's
        overlong penalty is a reward function)."""
        hp, weights = self.hparams, getattr(self.reward, "weights", {})
        scores = dict(rollout.reward_components)  # {name: N}
        if hp.missing_eos_penalty is not None:
            scores["missing_eos_penalty"] = -hp.missing_eos_penalty * (~rollout.contains_stop).float()  # N
        if hp.overlong_buffer is not None:
            scores["overlong_penalty"] = self.overlong_penalty(rollout.response_mask)  # N
        weight = [float(weights.get(name, 1.0)) for name in scores]
        return (torch.stack(list(scores.values()), 1).float(),
                torch.tensor(weight, device=rollout.scores.device))

    def compute_advantages(self, rollout: Rollout, penalty: KLPenalty) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        hp = self.hparams
        kl, non_score_reward = penalty.kl, penalty.non_score_reward  # N,R
        if hp.kl_in == "loss":  # the KL is in the loss, not in the reward
            non_score_reward = torch.zeros_like(non_score_reward)
        stats, self._refill_stats = dict(self._refill_stats), {}
        if hp.overlong_buffer is not None:  # in the scores since the rollout (training_scores)
            stats["rollout/overlong_penalty"] = self.overlong_penalty(rollout.response_mask).mean()
        estimate = self.estimate(rollout, non_score_reward)
        stats.update(objective_stats(rollout, kl, non_score_reward, estimate.rlhf_reward))
        return estimate.advantages, stats

    @property
    def supports_single_update(self) -> bool:  # the entropy bonus runs its own forward in the update
        return not (self.hparams.entropy_coef or self.hparams.use_adaptive_entropy)

    @functools.cached_property
    def entropy_control(self) -> EntropyController:
        """The entropy bonus's coefficient, fixed or adaptive (use_adaptive_entropy), saved in checkpoints."""
        hp = self.hparams
        return EntropyController(hp.entropy_coef, hp.use_adaptive_entropy, hp.entropy_target, hp.entropy_coef_delta,
                                 hp.entropy_coef_min, hp.entropy_coef_max)

    def update(self, rollout: Rollout, advantages: torch.Tensor) -> dict[str, torch.Tensor]:
        """The optimizer steps; with the entropy bonus, `entropy_coef` (TRL's metric) logs the coefficient after
        them, the one the next step starts with."""
        stats = super().update(rollout, advantages)
        if self.entropy_control.enabled:
            stats["entropy_coef"] = torch.tensor(self.entropy_control.coef)
        return stats

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Lightning calls it once per optimizer step, after its micro-batches: the adaptive coefficient's update."""
        self.entropy_control.step(sum_over_ranks(self._trainer))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["rlhf_state"]["entropy_controller"] = self.entropy_control.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        state = checkpoint.get("rlhf_state", {})
        if "entropy_controller" in state:
            self.entropy_control.load_state_dict(state["entropy_controller"])

    def minibatch_loss(self, rollout: Rollout, advantages: torch.Tensor, idx: torch.Tensor, share: LossShare):
        """With entropy_coef (or use_adaptive_entropy), TRL's entropy bonus: the policy loss minus the coefficient x
        the mean entropy (with its gradient) of the response tokens the policy loss trains (those of
        top_entropy_quantile's mask, if set), as TRL normalizes it: each micro-batch's token mean over the step's
        micro-batches, or with loss_type=dapo the token sum over the step's tokens. Its gradient needs the full
        (M,R,V) logits, computed here instead of in chunks."""
        hp, control = self.hparams, self.entropy_control
        if not control.enabled:
            return super().minibatch_loss(rollout, advantages, idx, share)
        mask = rollout.loss_mask(idx)  # M,R
        logits = response_logits(self.policy, *rollout.sequences(idx))  # M,R,V
        responses = rollout.responses[idx]  # M,R
        new_logprobs = rollout.on_model_tokens(logprobs_from_logits(logits, responses, hp.temperature), idx)  # M,R
        entropy = rollout.on_model_tokens(entropy_from_logits(logits, hp.temperature), idx)  # M,R, with its gradient
        loss, stats = self.policy_loss(new_logprobs, entropy.detach(), rollout, advantages, idx, share)
        if hp.top_entropy_quantile < 1:
            mask = high_entropy_mask(entropy, mask, hp.top_entropy_quantile, self.micro_batch_values_over_ranks)
        control.observe(entropy, mask)
        bonus_share = share if share.loss_type == "dapo" else replace(share, loss_type="bnpo")
        return loss - control.applied() * aggregate_loss(entropy, mask, bonus_share), stats

    def policy_loss(self, new_logprobs: torch.Tensor, entropy: torch.Tensor, rollout: Rollout,
                    advantages: torch.Tensor, idx: torch.Tensor, share: LossShare):
        """The clipped surrogate plus, with kl_in=loss, kl_coef x the per-token KL of the policy being updated
        to the reference (kl_estimator, k3 by default), aggregated the same way."""
        loss, stats = super().policy_loss(new_logprobs, entropy, rollout, advantages, idx, share)
        if self.kl_in_loss:
            mask = rollout.loss_mask(idx)  # M,R
            kl = kl_per_token(new_logprobs, rollout.ref_logprobs[idx], self.hparams.kl_estimator)  # M,R
            if self.hparams.use_bias_correction_kl:  # weighted by the loss's own ratio, per token or sequence
                sequence_mask = mask if self.hparams.importance_sampling_level == "sequence" else None
                kl = bias_corrected_kl(kl, new_logprobs, rollout.logprobs[idx], sequence_mask)  # M,R
            kl_loss = aggregate_loss(kl, mask, share)
            loss = loss + self.kl_coef * kl_loss
            stats["loss/kl_avg"] = masked_mean(kl.detach(), mask)
        return loss, stats
