"""The trainer's side of a rollout: the Sampler draws and scores (rollout/sampler.py), then the module computes old
and reference logprobs (or runs the update's forward, with the single update) and transforms the scores. Mixed into
RLHFModule.

Shapes: N sequences, P prompt length, R response length, V vocab.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from lit_rlhf.config.validation import warn_once
from lit_rlhf.distributed.ranks import ranks_that_flag
from lit_rlhf.distributed.sharding import gathered_weights, resharded_after
from lit_rlhf.errors import ConfigError
from lit_rlhf.interrupts import ranks_in_step
from lit_rlhf.models.forwards import batched_logprobs, response_logprobs_and_entropy
from lit_rlhf.models.router_load import RouterLoad
from lit_rlhf.ops import high_entropy_mask, importance_weights, off_policy_sequences, vespo_weights
from lit_rlhf.rollout.compiled_decoding import model_context
from lit_rlhf.rollout.engine import Samples
from lit_rlhf.rollout.sampler import Drawn
from lit_rlhf.step.rollout import Rollout
from lit_rlhf.step.score_transforms import ScoreContext, apply_score_transform


def off_policy_mask(new_logprobs: torch.Tensor, rollout: Rollout, advantages: torch.Tensor, idx: torch.Tensor,
                    is_weights: torch.Tensor | None, threshold: float | None):
    """With algo.off_policy_mask_threshold: DeepSeek-V3.2's off-policy sequence mask, measured in this micro-batch
    against the policy being updated (new_logprobs, M,R), as TRL; the behaviour policy is the engine's logprobs, or
    pi_old without them. -> the micro-batch's weights (M,R, or None), stats"""
    if threshold is None:
        return is_weights, {}
    behaviour = rollout.logprobs if rollout.sampler_logprobs is None else rollout.sampler_logprobs  # N,R
    drop = off_policy_sequences(new_logprobs, behaviour[idx], rollout.loss_mask(idx), advantages[idx],
                                threshold)  # M
    keep = (~drop).unsqueeze(1).to(new_logprobs.dtype).expand_as(new_logprobs)  # M,R
    weights = keep if is_weights is None else is_weights * keep  # M,R
    return weights, {"rollout/off_policy_masked_frac": drop.float().mean()}


def policy_loss_weights(new_logprobs: torch.Tensor, entropy: torch.Tensor, rollout: Rollout, advantages: torch.Tensor,
                        idx: torch.Tensor, hp, pool) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    """The weights of the micro-batch's per-token policy loss (M,R; None: every token's 1): the rollout engine's
    importance weights (policy_loss=vespo: VESPO's weight phi, into which they fold, as TRL), times the off-policy
    sequence mask (algo.off_policy_mask_threshold), times the high-entropy token mask (algo.top_entropy_quantile, its
    quantile over every rank's tokens of this micro-batch through pool). Neither mask changes the loss's denominator
    or the KL term, as in TRL. -> weights, stats"""
    is_weights = None if rollout.is_weights is None else rollout.is_weights[idx]  # M,R
    vespo = {}
    if hp.policy_loss == "vespo":
        is_weights = vespo_weights(new_logprobs, rollout.logprobs[idx], rollout.loss_mask(idx), advantages[idx],
                                   is_weights, hp.vespo_k_pos, hp.vespo_lambda_pos, hp.vespo_k_neg,
                                   hp.vespo_lambda_neg)  # M,R
        vespo = {"vespo/phi_seq_mean": is_weights[:, 0].mean()}  # TRL's: the mean over sequences
    weights, stats = off_policy_mask(new_logprobs, rollout, advantages, idx, is_weights, hp.off_policy_mask_threshold)
    stats = {**stats, **vespo}
    if hp.top_entropy_quantile < 1:
        keep = high_entropy_mask(entropy, rollout.loss_mask(idx), hp.top_entropy_quantile, pool)  # M,R
        weights = keep.to(new_logprobs.dtype) if weights is None else weights * keep
    return weights, stats


def check_sequence_length(budget: int | None, longest_prompt: int, trajectory_length: int,
                          model: torch.nn.Module | None = None) -> None:
    """algo.max_tokens_per_micro_batch must hold the longest sequence the data can make (prompt + response); one
    longer than the model's context (its config's max_position_embeddings) is said once."""
    longest = longest_prompt + trajectory_length
    if budget is not None and budget < longest:
        raise ConfigError(f"algo.max_tokens_per_micro_batch={budget} is below the longest sequence "
                          f"({longest_prompt} prompt + {trajectory_length} response tokens = {longest}); "
                          f"set it >= {longest}.")
    context = model_context(model) if model is not None else None
    if isinstance(context, int) and longest > context:
        warn_once(f"the longest prompt ({longest_prompt} tokens) and the response ({trajectory_length}: "
                  f"algo.response_length, or env.max_tokens for episodes) make {longest} positions, past the model's "
                  f"context of {context} (its config's max_position_embeddings): it never trained on the positions "
                  f"past it, and a model with learned positions fails on them; lower data.max_prompt_length or the "
                  f"response's length.")


def require_grads(parameters: list[torch.nn.Parameter]) -> None:
    """peft's adapter switches (reference, critic) toggle requires_grad of the trained tensors: on again."""
    for param in parameters:
        param.requires_grad_(True)


class RolloutForwards:
    router_load: RouterLoad | None = None  # a MoE policy's load-balancing loss (algo.router_aux_loss_coef)

    @torch.no_grad()
    def rollout(self, batch: dict[str, torch.Tensor], samples_per_prompt: int | None = None,
                for_training: bool = True, from_reference: bool = False, greedy: bool = False) -> Rollout:
        """K responses per prompt, drawn and scored; then the trainer's side: old and reference logprobs. Everything
        the update needs.

        A training rollout is the rollout queue's draw of the batch: the Sampler's, now (the synchronous run), or, in
        async mode, the one the producer drew ahead. Any other (for_training=False: held-out, samples) is the
        Sampler's, drawn now while the producer waits, and leaves score transforms and their running state alone;
        for those, from_reference=True samples from the reference instead of the policy (evaluation's baseline) and
        greedy=True takes the argmax (a training rollout samples from the policy).
        """
        if for_training and (from_reference or greedy):
            raise ValueError("a training rollout samples from the policy: from_reference and greedy are for "
                             "rollout(..., for_training=False)")
        k = samples_per_prompt or self.samples_per_prompt
        if for_training:
            with self.sampling_weights(self.step_timings), self.ranks_stepping_together():
                drawn = self.rollout_queue.next(batch, self.rl_step, self.step_timings, k)
                return self.finish_rollout(drawn, for_training=True)  # waits for the reward, if it still runs
        with self.rollout_queue.paused(), self.sampling_weights():
            drawn = self.sampler.draw(batch, k, self.rl_step, from_reference, greedy)
            return self.finish_rollout(drawn, for_training=False)

    def ranks_stepping_together(self):
        """Around a rollout every rank draws (training, held-out evaluation; samples where every rank samples): a
        call abandoned on SIGTERM on one rank stops every rank at the call's end (interrupts.ranks_in_step)."""
        trainer = self._trainer
        if trainer is None or trainer.world_size == 1:
            return ranks_in_step(None)
        return ranks_in_step(lambda abandoned: ranks_that_flag(abandoned, trainer.strategy.root_device))

    @contextmanager
    def sampling_weights(self, timings: dict[str, float] | None = None) -> Iterator[None]:
        """trainer=fsdp2: the rollout's sampling and forwards run on the whole weights, gathered once (their seconds
        added to timings' time/gather_weights_s), or, sampling sharded, block by block. Otherwise nothing."""
        if not self.sharding.fsdp2:  # nothing sharded: no walk of the models' modules for FSDP units each step
            yield
            return
        with resharded_after(self) if self.sharding.samples_sharded else gathered_weights(self) as gather_s:
            if gather_s and timings is not None:
                timings["time/gather_weights_s"] = timings.get("time/gather_weights_s", 0.0) + gather_s
            yield

    @property
    def needs_reference(self) -> bool:
        """Whether a training rollout needs the reference's logprobs: for the KL penalty (not with a fixed kl_coef of
        0); an algorithm whose advantage reads them says so too."""
        return self.kl_controller.uses_reference

    def finish_rollout(self, drawn: Drawn, for_training: bool) -> Rollout:
        """The trainer's side: old (or the update's) and reference logprobs, the correction for a sampler that is
        not the trainer's weights, the scores."""
        hp, samples = self.hparams, drawn.samples
        sequences = (samples.queries, samples.query_mask, samples.responses, samples.forward_mask)  # N,P x2 ; N,R x2
        reuse_forward = for_training and self.single_update
        behaviour_as_old = drawn.staleness > 0 and hp.async_correction == "behaviour"
        was_training = self.policy.training
        self.policy.eval()  # no dropout: old logprobs must describe the sampling distribution
        if not reuse_forward:
            logprobs, values = self.old_logprobs_and_values(*sequences)  # N,R
        # the KL needs the reference; a training rollout with kl_coef 0 skips its forward
        needs_reference = self.needs_reference or not for_training
        ref_logprobs = self.reference_logprobs(*sequences) if needs_reference else None
        self.policy.train(was_training)
        policy_outputs = self.policy_forward_with_grad(*sequences) if reuse_forward else None  # (N,R), (N,R)
        if reuse_forward:  # the update's own forward: its logprobs are the old ones, and the ratio is 1
            logprobs, values = policy_outputs[0].detach(), None
        trainer_logprobs = None
        if behaviour_as_old:  # async_correction=behaviour: the clip is around the policy that sampled
            trainer_logprobs, logprobs = logprobs, samples.sampler_logprobs
        if samples.context_mask is not None:  # observation tokens are context: no logprob, value or KL there
            model = samples.response_mask  # N,R
            logprobs, values, ref_logprobs, trainer_logprobs = (
                t if t is None else t * model for t in (logprobs, values, ref_logprobs, trainer_logprobs))
            if policy_outputs is not None:
                with torch.enable_grad():  # the update's graph goes on through the mask
                    policy_outputs = tuple(t * model for t in policy_outputs)
        is_weights = None  # N,R  the correction for an engine whose sampler differs from the trainer
        if samples.sampler_logprobs is not None and hp.rollout_is_cap is not None and not behaviour_as_old:
            is_weights = importance_weights(logprobs, samples.sampler_logprobs, samples.response_mask,
                                            hp.rollout_is_cap, hp.rollout_is_mode, hp.rollout_is_min)  # N,R
        raw_scores, components = drawn.scored()  # N ; {name: N}
        scores = raw_scores
        for transform in self.score_transforms if for_training else ():  # e.g. RewardNormalizer, in order
            scores = apply_score_transform(transform, scores, drawn.prompts, drawn.completions, self.score_context,
                                           self)
        if hp.missing_eos_penalty is not None:
            scores = scores - hp.missing_eos_penalty * (~drawn.has_stop).to(scores.dtype)
        in_loss = loss_masked = None  # N  the sequences the loss trains on (None: all); those it masks (None: none)
        if for_training:
            scores, in_loss = self.training_scores(scores, samples)
            loss_masked = ~drawn.has_stop if self.masks_truncated_completions else None
        return Rollout(queries=samples.queries, query_mask=samples.query_mask, responses=samples.responses,
                       response_mask=samples.response_mask, prompt_index=samples.prompt_index, logprobs=logprobs,
                       ref_logprobs=ref_logprobs, scores=scores, raw_scores=raw_scores, contains_stop=drawn.has_stop,
                       values=values, prompts=drawn.prompts, completions=drawn.completions,
                       policy_outputs=policy_outputs, sampler_logprobs=samples.sampler_logprobs, is_weights=is_weights,
                       in_loss=in_loss, loss_masked=loss_masked,
                       reward_components=components, columns=drawn.columns, context_mask=samples.context_mask,
                       conversations=drawn.conversations, policy_version=drawn.version,
                       trainer_logprobs=trainer_logprobs, gold_scores=drawn.gold,
                       teacher_logprobs=drawn.teacher_logprobs,
                       **({} if drawn.teacher_top is None else dict(zip(("teacher_top_ids", "teacher_top_logprobs"),
                                                                         drawn.teacher_top, strict=True))))

    def training_scores(self, scores: torch.Tensor, samples: Samples) -> tuple[torch.Tensor, torch.Tensor | None]:
        """An algorithm's own shaping of a training rollout's scores (N, after the score transforms and the missing-EOS
        penalty), and the sequences its loss trains on (N bool, None: all). GRPO: DAPO's overlong penalty and the
        zero-std filter."""
        return scores, None

    @property
    def masks_truncated_completions(self) -> bool:
        """Whether the loss leaves out the tokens of responses without the stop token, still counting them as
        sequences (GRPO's mask_truncated_completions, TRL's)."""
        return False

    @property
    def score_context(self) -> ScoreContext:
        """What the score transforms use of the run: the Sampler's reward and the ranks' scores."""
        return ScoreContext(score=self.sampler.score, gather=self.gather_over_ranks)

    def gather_over_ranks(self, values: torch.Tensor) -> torch.Tensor:
        """Every rank's values (N each), flattened."""
        return self.all_gather(values).flatten() if self.trainer.world_size > 1 else values

    def check_entropy_quantile_ranks(self) -> None:
        """algo.top_entropy_quantile takes each micro-batch's quantile over every rank: the ranks must run the same
        number of micro-batches, which token-count micro-batches do not promise."""
        hp, ranks = self.hparams, self.trainer.world_size
        if hp.top_entropy_quantile < 1 and hp.max_tokens_per_micro_batch is not None and ranks > 1:
            raise ConfigError(f"algo.top_entropy_quantile={hp.top_entropy_quantile} takes each micro-batch's "
                              f"quantile over all {ranks} ranks, and algo.max_tokens_per_micro_batch="
                              f"{hp.max_tokens_per_micro_batch} gives ranks different numbers of micro-batches; use "
                              f"algo.gradient_accumulation_steps instead (max_tokens_per_micro_batch=null).")

    def micro_batch_values_over_ranks(self, values: torch.Tensor) -> torch.Tensor:
        """Every rank's values (M,R each, NaN where none), flattened: ranks whose micro-batches differ in shape pad
        theirs with NaN (their sizes read once per micro-batch, with more than one rank only)."""
        if self._trainer is None or self.trainer.world_size == 1:
            return values.flatten()
        rows, cols = self.all_gather(torch.tensor(values.shape, device=values.device)).amax(0).tolist()
        padded = torch.nn.functional.pad(values, (0, cols - values.shape[1], 0, rows - values.shape[0]),
                                         value=float("nan"))  # rows,cols
        return self.all_gather(padded).flatten()

    def reference_logprobs(self, queries, query_mask, responses, response_mask) -> torch.Tensor:
        """No-grad logprobs of the responses under the reference. -> (N,R)"""
        with self.reference.active() as reference:
            return batched_logprobs(reference, queries, query_mask, responses, response_mask,
                                    self.hparams.temperature, self.hparams.forward_batch_size,
                                    self.hparams.logits_chunk_size, self.packing_pad_id)

    def policy_forward_with_grad(self, queries, query_mask, responses, response_mask):
        """The update's forward pass, run inside the rollout when the update is one optimizer step on the
        whole rollout (see single_update): the no-grad old-logprob forward is then unnecessary.
        -> logprobs (N,R) with their graph, entropy (N,R)"""
        require_grads(self._trainable or self.trainable_parameters())
        if self.router_load is not None:
            self.router_load.clear()  # the update takes this forward's routers' loss
        with torch.enable_grad():
            return self.policy_logprobs_and_entropy(queries, query_mask, responses, response_mask)

    def with_router_loss(self, loss: torch.Tensor, stats: dict[str, torch.Tensor], share: float) -> torch.Tensor:
        """A MoE policy's micro-batch loss plus algo.router_aux_loss_coef x the load-balancing loss of its forwards
        since the last call, times the micro-batch's share of the optimizer step's sequences (so a step adds the
        micro-batches' mean); stats gain aux_loss (TRL's name)."""
        aux = self.router_load.take() if self.router_load is not None else None
        if aux is None:
            return loss
        stats["aux_loss"] = aux
        return loss + self.hparams.router_aux_loss_coef * aux * share

    def policy_logprobs_and_entropy(self, queries, query_mask, responses, response_mask):
        """The policy's forward on the sequences. -> logprobs (N,R), entropy (N,R, no grad); zero after the stop"""
        return response_logprobs_and_entropy(self.policy, queries, query_mask, responses, response_mask,
                                             self.hparams.temperature, self.hparams.logits_chunk_size,
                                             self.packing_pad_id, self.hparams.logits_budget_mib,
                                             router_load=self.router_load)

    def old_logprobs_and_values(self, queries, query_mask, responses, response_mask):
        """No-grad logprobs of the sampling policy (N,R); algorithms with a critic add values (N,R)."""
        logprobs = batched_logprobs(self.policy, queries, query_mask, responses, response_mask,
                                    self.hparams.temperature, self.hparams.forward_batch_size,
                                    self.hparams.logits_chunk_size, self.packing_pad_id)
        return logprobs, None
