"""PolicyUpdate: the optimizer steps of an RL step (step 4 of RLHFModule.training_step): num_ppo_epochs x
num_mini_batches clipped-ratio steps on the rollout, each accumulating micro-batches whose losses are their share of
the step's (LossShare), with the non-finite guard, gradient clipping and the learning-rate schedule. Mixed into
RLHFModule; an algorithm overrides minibatch_loss (PPO's value loss, distillation's divergence) or policy_loss.

Shapes: N sequences of the rollout, M of a micro-batch, R response length.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from lit_rlhf.algos.forwards import policy_loss_weights, require_grads
from lit_rlhf.distributed.ranks import sum_over_ranks
from lit_rlhf.ops import LossShare, clipped_policy_loss, masked_mean
from lit_rlhf.ops.batching import divide
from lit_rlhf.ops.losses import PolicyLoss
from lit_rlhf.step.rollout import Rollout


class PolicyUpdate:
    """The update of RLHFModule (its hparams, optimizer, policy forwards and non-finite guard)."""

    def loss_share(self, rollout: Rollout, idx: torch.Tensor, micro_batches: int) -> LossShare:
        """What the micro-batches of the optimizer step on sequences idx need for their share of its loss."""
        hp = self.hparams
        step_tokens = None
        if hp.loss_type == "dapo":  # the step's tokens over all ranks; DDP averages the ranks' gradients
            tokens = sum_over_ranks(self._trainer)(rollout.loss_mask(idx).sum().double())  # stays on the device
            step_tokens = tokens / (self.trainer.world_size if self._trainer is not None else 1)
        # sequences the loss trains on: filtered ones (zero-std groups) are out of every loss type's denominator
        in_loss = len(idx) if rollout.in_loss is None else int(rollout.in_loss[idx].sum())
        return LossShare(hp.loss_type, micro_batches, self.sampler.context.trajectory_length, step_tokens,
                         step_sequences=max(in_loss, 1))

    def update(self, rollout: Rollout, advantages: torch.Tensor) -> dict[str, torch.Tensor]:
        """num_ppo_epochs x num_mini_batches clipped-ratio steps, each accumulating micro-batches."""
        hp = self.hparams
        n = len(rollout)
        minibatch = divide(n, hp.num_mini_batches, "num_mini_batches", "sequences per rank")
        micro = divide(minibatch, hp.gradient_accumulation_steps, "gradient_accumulation_steps",
                       "sequences per minibatch")
        trained = self._trainable or self.trainable_parameters()
        require_grads(trained)
        optimizer = self.optimizers()
        stats = defaultdict(list)
        self._ratios = []
        for _ in range(hp.num_ppo_epochs):
            order = torch.randperm(n, device=self.device)  # N
            for minibatch_idx in order.split(minibatch):
                finite = torch.ones((), dtype=torch.bool, device=self.device)  # the losses', read once per step
                micro_batches = rollout.micro_batches(minibatch_idx, micro, hp.max_tokens_per_micro_batch)
                share = self.loss_share(rollout, minibatch_idx, len(micro_batches))
                for micro_idx in micro_batches:
                    loss, micro_stats = self.minibatch_loss(rollout, advantages, micro_idx, share)
                    loss = self.with_router_loss(loss, micro_stats, len(micro_idx) / len(minibatch_idx))
                    finite = finite & torch.isfinite(loss.detach())
                    self.manual_backward(loss)  # the micro-batch's share of the step's loss (LossShare)
                    for key, value in micro_stats.items():
                        stats[key].append(value.detach())
                strategy = self.trainer.strategy if self._trainer is not None else None
                if not self.nonfinite.step_is_finite(finite, trained, strategy, self.rl_step,
                                                     hp.max_consecutive_nonfinite,
                                                     cause=lambda: self.nonfinite_cause(rollout)):
                    optimizer.zero_grad(set_to_none=True)  # no gradients: the step below changes no weight or state
                elif hp.max_grad_norm is not None:
                    self.clip_gradients(optimizer, gradient_clip_val=hp.max_grad_norm, gradient_clip_algorithm="norm")
                optimizer.step()  # also when skipped, so Lightning's step count stays RL steps x updates
                optimizer.zero_grad()
        rollout.policy_outputs = None  # frees the graph of a reused rollout forward
        self.rollout_queue.weights_updated()
        scheduler = self.lr_schedulers()
        if scheduler is not None:
            scheduler.step()
        return {key: torch.stack(values).mean() for key, values in stats.items()}

    def nonfinite_cause(self, rollout: Rollout) -> str | None:
        """What in the rollout made the loss non-finite, when the algorithm's own inputs can say (read only when the
        run stops on it); None: the generic line (the learning rate, the reward)."""
        return None

    def minibatch_loss(self, rollout: Rollout, advantages: torch.Tensor, idx: torch.Tensor, share: LossShare):
        """Clipped policy loss on sequences idx: their share of the optimizer step's loss. -> loss, stats"""
        if rollout.policy_outputs is not None:  # single update: the rollout already ran this forward
            new_logprobs, entropy = (t[idx] for t in rollout.policy_outputs)  # M,R ; M,R
        else:
            new_logprobs, entropy = (rollout.on_model_tokens(t, idx) for t in
                                     self.policy_logprobs_and_entropy(*rollout.sequences(idx)))  # M,R ; M,R
        return self.policy_loss(new_logprobs, entropy, rollout, advantages, idx, share)

    def policy_loss(self, new_logprobs: torch.Tensor, entropy: torch.Tensor, rollout: Rollout,
                    advantages: torch.Tensor, idx: torch.Tensor, share: LossShare):
        """The clipped surrogate for the logprobs (M,R, with grad) of sequences idx (their share of the step's
        loss), and the policy statistics; entropy (M,R) is the policy's per-token entropy, for the statistics."""
        hp, mask = self.hparams, rollout.loss_mask(idx)  # M,R
        low = hp.cliprange if hp.cliprange_low is None else hp.cliprange_low
        high = hp.cliprange if hp.cliprange_high is None else hp.cliprange_high
        if hp.importance_sampling_level == "sequence":  # GSPO's own, much smaller, clip range
            low, high = hp.sequence_cliprange_low, hp.sequence_cliprange_high
        is_weights, off_policy_stats = policy_loss_weights(new_logprobs, entropy, rollout, advantages, idx, hp,
                                                           self.micro_batch_values_over_ranks)  # M,R
        loss = PolicyLoss(hp.policy_loss, hp.importance_sampling_level, hp.cispo_cap, hp.sapo_temperature_pos,
                          hp.sapo_temperature_neg, hp.delta)
        pg_loss, pg_stats = clipped_policy_loss(new_logprobs, rollout.logprobs[idx], advantages[idx], mask,
                                                low, high, share, is_weights, loss)
        self._ratios.append(torch.exp(new_logprobs - rollout.logprobs[idx]).detach()[mask])
        return pg_loss, {
            "policy/approxkl_avg": pg_stats["approxkl"], "policy/clipfrac_avg": pg_stats["clipfrac"],
            "loss/policy_avg": pg_stats["token_mean"], "policy/entropy_avg": masked_mean(entropy, mask),
            "val/ratio": pg_stats["ratio"], "val/ratio_var": pg_stats["ratio_var"],
            "clip_ratio/low_mean": pg_stats["clip_low"], "clip_ratio/high_mean": pg_stats["clip_high"],
            "clip_ratio/region_mean": pg_stats["clip_region"], **off_policy_stats,
        }
