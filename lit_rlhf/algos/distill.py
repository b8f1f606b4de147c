"""DistillationModule: on-policy distillation (Agarwal et al. 2024, GKD; Thinking Machines 2025). The student samples
as in RL; a teacher with the same tokenizer gives the logprob of every sampled token (the Sampler scores it, beside
the reward); each token's advantage is the sampled-token reverse KL, negated:

    A_t = log p_teacher(y_t | y_<t) - log p_student(y_t | y_<t)        (discount factor 0, no baseline)

optimized with the policy loss every algorithm uses (algo.policy_loss: PPO's clipped ratio by default, whose ratio is
1 at the rollout's weights). Optionally the task reward's group-relative advantage times algo.task_reward_coef is
added to every token, and a per-token KL penalty to the reference with algo.kl_coef > 0.

With algo.divergence=generalized_jsd the teacher's signal is instead the divergence of the two next-token
distributions over the whole vocabulary at every sampled position (TRL GKDTrainer's generalized_jsd_loss, algo.beta),
added to the loss; the policy loss then carries only the task reward's and the KL penalty's advantages. A served
teacher with teacher.top_logprobs K gives its K most likely tokens instead of the whole distribution: the
divergence is then over those K tokens and "any other token" (lit_rlhf.ops.divergence.top_k_generalized_jsd).

Shapes: B prompts per rank, K = samples_per_prompt, N = B*K sequences, R response length.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from lit_rlhf.algos.base import RLHFModule
from lit_rlhf.algos.step_stats import objective_stats
from lit_rlhf.config import DistillationConfig
from lit_rlhf.distributed.ranks import sum_over_ranks
from lit_rlhf.errors import ConfigError
from lit_rlhf.estimators import EstimatorInputs, group_relative
from lit_rlhf.models.forwards import sequence_inputs
from lit_rlhf.models.last_hidden import forward_with_last_hidden
from lit_rlhf.models.output_layer import logits_are_the_output_layers
from lit_rlhf.models.probes import model_type
from lit_rlhf.ops import masked_mean
from lit_rlhf.ops.divergence import chunked_generalized_jsd
from lit_rlhf.ops.losses import aggregate_loss
from lit_rlhf.step.kl_controller import KLPenalty
from lit_rlhf.step.rollout import Rollout

FULL_VOCABULARY_CHUNK = 512  # positions per chunk of the full-vocabulary divergence without algo.logits_chunk_size


def distillation_advantages(teacher_logprobs: torch.Tensor, student_logprobs: torch.Tensor,
                            response_mask: torch.Tensor) -> torch.Tensor:
    """The per-token advantage log p_teacher - log p_student of the sampled tokens (N,R), zero off the model's
    tokens. No gradient flows through it: the student's logprobs are the rollout's (old) ones."""
    return (teacher_logprobs - student_logprobs) * response_mask


def extrapolated_advantages(teacher_logprobs: torch.Tensor, student_logprobs: torch.Tensor,
                            ref_logprobs: torch.Tensor, response_mask: torch.Tensor, lam: float) -> torch.Tensor:
    """G-OPD's per-token advantage lam (log p_teacher - log p_ref) - (log p_student - log p_ref) of the sampled
    tokens (N,R), zero off the model's tokens: the teacher's log-ratio to the reference as a reward scaled by lam,
    the KL to the reference at weight 1. At lam = 1 the reference cancels (distillation_advantages)."""
    reward = lam * (teacher_logprobs - ref_logprobs)  # N,R
    return (reward - (student_logprobs - ref_logprobs)) * response_mask


def iw_opd_weights(advantages: torch.Tensor, response_mask: torch.Tensor, gamma: float,
                   epsilon: float = 1e-8) -> torch.Tensor:
    """TRL IW-OPD's position weights (iw_opd_gamma): 1 + gamma (1 - the share of the sequence's total |advantage|
    on the model tokens before this one), so a sequence's first divergences weigh up to 1 + gamma and its last 1.
    (N,R), (N,R) -> (N,R)"""
    magnitude = advantages.abs() * response_mask  # N,R
    before = magnitude.cumsum(1) - magnitude  # N,R
    total = magnitude.sum(1, keepdim=True).clamp_min(epsilon)  # N,1
    return 1.0 + gamma * (1.0 - before / total)


class DistillationModule(RLHFModule):
    """On-policy distillation from `teacher` (lit_rlhf.teachers: CausalLMTeacher, ServedTeacher, RoutedTeachers, or
    any object with `logprobs(queries, query_mask, responses, response_mask, temperature, columns) -> (N,R)`)."""

    config_class = DistillationConfig

    def __init__(self, *args: Any, teacher: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # scored in every draw, beside the reward; training needs one, evaluating or exporting the policy does not
        self.sampler.teacher = None if isinstance(teacher, dict) and not teacher else teacher

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.sampler.teacher is None:
            raise ConfigError("algo=distill needs a teacher: teacher.name_or_path=<a causal LM folder or hub name "
                              "with the student's tokenizer> (in Python: DistillationModule(..., "
                              "teacher=CausalLMTeacher(name_or_path))); python train.py experiment=calculator_distill "
                              "runs with an embedded one (docs/distillation.md).")
        teacher = self.sampler.teacher
        if stage == "fit" and self.full_vocabulary and not (hasattr(teacher, "model_on")
                                                             or getattr(teacher, "top_logprobs", None)):
            hint = (" or set teacher.top_logprobs (its most likely tokens per position)"
                    if hasattr(teacher, "top_logprobs") else "")
            raise ConfigError(f"algo.divergence=generalized_jsd reads the teacher's next-token distribution, which a "
                              f"{type(teacher).__name__} does not give{' as set' if hint else ''}; use a loaded "
                              f"teacher (teacher=causal_lm){hint}, or algo.divergence=sampled_token.")
        super().setup(stage)

    @property
    def samples_per_prompt(self) -> int:
        return self.hparams.samples_per_prompt

    @property
    def needs_reference(self) -> bool:  # ExOPD's reward is the teacher's log-ratio to the reference
        return super().needs_reference or self.hparams.exopd_lambda != 1.0

    @property
    def full_vocabulary(self) -> bool:
        return self.hparams.divergence == "generalized_jsd"

    @property
    def supports_single_update(self) -> bool:  # the full-vocabulary loss runs its own forwards in the update
        return not self.full_vocabulary

    def compute_advantages(self, rollout: Rollout, penalty: KLPenalty) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        mask = rollout.response_mask  # N,R
        if self.full_vocabulary:  # the loss carries the teacher's signal
            advantages = torch.zeros_like(rollout.logprobs)  # N,R
        else:
            lam = self.hparams.exopd_lambda
            advantages = (distillation_advantages(rollout.teacher_logprobs, rollout.logprobs, mask) if lam == 1.0
                          else extrapolated_advantages(rollout.teacher_logprobs, rollout.logprobs,
                                                       rollout.ref_logprobs, mask, lam))  # N,R
            if self.hparams.iw_opd_gamma:
                advantages = advantages * iw_opd_weights(advantages, mask, self.hparams.iw_opd_gamma)
        advantages = advantages + penalty.non_score_reward
        coef = self.hparams.task_reward_coef
        if coef:  # GRPO's estimator on the task reward alone (scale_rewards=group): N,R, zero off the model's tokens
            task = group_relative(EstimatorInputs(rollout.scores, torch.zeros_like(advantages), mask,
                                                  rollout.prompt_index), SimpleNamespace(scale_rewards="group"))
            advantages = advantages + coef * task.advantages
        stats = objective_stats(rollout, penalty.kl, penalty.non_score_reward,
                                rollout.scores + penalty.non_score_reward.sum(1))
        stats.update(self.distillation_stats(rollout))
        return advantages, stats

    def minibatch_loss(self, rollout: Rollout, advantages: torch.Tensor, idx: torch.Tensor, share):
        if not self.full_vocabulary:
            return super().minibatch_loss(rollout, advantages, idx, share)
        divergence, logprobs, entropy = self.full_vocabulary_divergence(rollout, idx)  # M,R each
        loss, stats = self.policy_loss(logprobs, entropy, rollout, advantages, idx, share)  # task reward, KL penalty
        mask = rollout.loss_mask(idx)  # M,R
        stats["distill/divergence"] = masked_mean(divergence.detach(), mask)
        return loss + aggregate_loss(divergence, mask, share), stats

    def full_vocabulary_divergence(self, rollout: Rollout, idx: torch.Tensor):
        """algo.beta's divergence of the student's next-token distribution from the teacher's at each model token of
        sequences idx, with the student's logprobs of the sampled tokens and its entropy. -> (M,R) x 3"""
        queries, query_mask, responses, forward_mask = rollout.sequences(idx)
        inputs, length = sequence_inputs(queries, query_mask, responses, forward_mask), responses.shape[1]
        real = rollout.response_mask[idx].bool()  # M,R: the model's tokens (an episode's observations are not)

        def predicting_states(model: torch.nn.Module, router_load=None) -> torch.Tensor:  # the states before them: T,H
            routed = router_load.forward_kwargs if router_load is not None else {}
            out, hidden = forward_with_last_hidden(model, **inputs, use_cache=False, logits_to_keep=1, **routed)
            if router_load is not None:
                router_load.add(out, inputs["attention_mask"])
            return hidden[:, -(length + 1):-1][real]

        check_output_layer(self.policy, "student")
        hidden = predicting_states(self.policy, self.router_load)  # T,H
        if rollout.teacher_top_ids is not None:  # a served teacher's most likely tokens, scored in the draw
            top_ids, top_logprobs = rollout.teacher_top_ids[idx][real], rollout.teacher_top_logprobs[idx][real]
            teacher_of = lambda where: (top_ids[where], top_logprobs[where])  # noqa: E731  T,K each
        else:
            teacher = self.sampler.teacher.model_on(queries.device)
            check_output_layer(teacher, "teacher")
            with torch.no_grad():
                teacher_hidden = predicting_states(teacher)  # T,H
            teacher_head = teacher.get_output_embeddings()
            teacher_of = lambda where: teacher_head(teacher_hidden[where])  # noqa: E731
        values = chunked_generalized_jsd(hidden, self.policy.get_output_embeddings(), teacher_of, responses[real],
                                         self.hparams.beta, self.hparams.temperature,
                                         self.hparams.logits_chunk_size or FULL_VOCABULARY_CHUNK,
                                         top_k=rollout.teacher_top_ids is not None)  # T each
        return tuple(value.new_zeros(real.shape).masked_scatter(real, value) for value in values)

    def nonfinite_cause(self, rollout: Rollout) -> str | None:
        if bool(torch.isfinite(rollout.teacher_logprobs[rollout.response_mask.bool()]).all()):
            return None
        return ("the teacher's logprobs of the sampled tokens are not finite (nan or inf): its weights or its "
                "forward at teacher.dtype overflow; check the teacher (teacher.name_or_path, teacher.dtype)")

    def distillation_stats(self, rollout: Rollout) -> dict[str, torch.Tensor]:
        """distill/reverse_kl (the token mean of log p_student - log p_teacher), the two sides' mean logprobs, the
        tokens the teacher scored (distill/teacher_tokens), and
        with routed teachers each teacher's reverse KL over the tokens of every rank (distill/<teacher>/reverse_kl)."""
        mask = rollout.response_mask  # N,R
        reverse_kl = (rollout.logprobs - rollout.teacher_logprobs) * mask  # N,R
        stats = {"distill/reverse_kl": masked_mean(reverse_kl, mask),
                 "distill/teacher_logprob_mean": masked_mean(rollout.teacher_logprobs, mask),
                 "distill/student_logprob_mean": masked_mean(rollout.logprobs, mask),
                 # the tokens the teacher scored this step, over all ranks: what distillation's signal cost
                 "distill/teacher_tokens": sum_over_ranks(self._trainer)(mask.sum().to(torch.float32))}
        teacher = self.sampler.teacher
        if hasattr(teacher, "routes"):  # RoutedTeachers: each teacher's tokens, summed over ranks
            routes = teacher.routes(rollout.columns, len(rollout))
            per_sequence = torch.stack([reverse_kl.sum(1), mask.sum(1).to(reverse_kl.dtype)], dim=1)  # N,2
            for name in sorted(teacher.teachers):
                rows = torch.tensor([route == name for route in routes], device=mask.device)  # N
                total = sum_over_ranks(self._trainer)(per_sequence[rows].sum(0))  # [KL sum, tokens]
                stats[f"distill/{name}/reverse_kl"] = total[0] / total[1].clamp(min=1)
        return stats


def check_output_layer(model: torch.nn.Module, role: str) -> None:
    """The full-vocabulary divergence computes the logits through the output layer, chunk by chunk: a model that
    changes them after it (a softcap, a scale) is refused in one line at its first update."""
    if not logits_are_the_output_layers(model):
        raise ConfigError(f"algo.divergence=generalized_jsd: the {role} ({model_type(model)}) changes its logits "
                          f"after its output layer (e.g. a softcap or a scale), which the chunked full-vocabulary "
                          f"divergence does not apply; use algo.divergence=sampled_token.")
