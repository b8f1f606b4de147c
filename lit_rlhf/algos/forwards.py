"""The trainer's side of a rollout: the engine samples, then the module computes old and reference
logprobs (or runs the update's forward, with the single update) and scores the completions. Mixed into
RLHFModule.

Shapes: N sequences, P prompt length, R response length, V vocab.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from lit_rlhf.algos.rollout import Rollout, batched_logprobs, response_logprobs_and_entropy
from lit_rlhf.distributed.sharding import gathered_weights, resharded_after
from lit_rlhf.errors import ConfigError, UnavailableError
from lit_rlhf.interrupts import abandonable
from lit_rlhf.models import WeightedSum, call_reward, reward_name
from lit_rlhf.models.rewards import missing_columns
from lit_rlhf.ops import contains_stop, importance_weights, off_policy_sequences, sampler_mismatch_stats
from lit_rlhf.rollout.engine import Samples
from lit_rlhf.rollout.trajectory import EPISODE_COLUMNS, ROLLOUT_COLUMNS, episode_columns, episode_conversation


@dataclass
class Drawn:
    """A rollout as the engine and the reward leave it, before the trainer's forwards (RolloutScoring.draw)."""

    samples: Samples
    prompts: list[str]
    completions: list[str]
    columns: dict[str, list]  # {name: N values}
    conversations: list  # N x [(model | env, text)], multi-turn
    has_stop: torch.Tensor  # N
    scored: Callable[[], tuple[torch.Tensor, dict[str, torch.Tensor]]]  # waits for (scores N, {name: N})
    version: int | None = None  # async mode: the policy version (RL steps trained) whose weights sampled it
    staleness: int = 0  # async mode: versions between those weights and the ones it is trained at


def sequence_columns(batch: dict[str, Any], prompt_index: torch.Tensor) -> dict[str, list]:
    """The dataset columns of each sequence's prompt (batch["columns"] holds them per prompt). -> {name: N values}"""
    index = prompt_index.tolist()
    return {name: [values[i] for i in index] for name, values in (batch.get("columns") or {}).items()}


def failing_prompt(reward, prompts: list[str], completions: list[str], columns: dict[str, list]) -> str | None:
    """The first prompt on which the reward raises when called on that completion alone."""
    for i, prompt in enumerate(prompts):
        try:
            call_reward(reward, [prompt], [completions[i]], {k: [v[i]] for k, v in columns.items()})
        except Exception:
            return prompt
    return None


def checked_scores(name: str, returned: Any, prompts: list[str], completions: list[str]) -> torch.Tensor:
    """What a reward returned as finite float32 scores of shape (N,), or a one-line error naming the reward."""
    try:
        scores = torch.as_tensor(returned).to(torch.float32)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ConfigError(f"the reward {name} returned {type(returned).__name__} that is not numbers ({err}); it "
                          f"must return one float per completion.") from err
    if scores.shape != (len(completions),):
        raise ConfigError(f"the reward {name} returned shape {tuple(scores.shape)}; it must return one score per "
                          f"completion, shape ({len(completions)},).")
    bad = (~torch.isfinite(scores)).nonzero().flatten().tolist()
    if bad:
        raise ConfigError(f"the reward {name} returned {scores[bad[0]].item()} for {len(bad)} of {len(scores)} "
                          f"completions (e.g. prompt {prompts[bad[0]][:60]!r}); it must return finite scores.")
    return scores


def call_checked(name: str, reward, prompts: list[str], completions: list[str],
                 columns: dict[str, list] | None) -> torch.Tensor:
    """reward's scores, checked; a reward that raises is a one-line error naming it and the prompt it failed on."""
    missing = missing_columns(reward, columns)
    if missing:
        raise ConfigError(f"the reward {name} needs the dataset column {missing[0]!r}, which the prompts' rows do not "
                          f"have (they have {sorted(columns or {}) or 'no column but the prompt'}); use data with that "
                          f"column (e.g. data=arithmetic) or another reward.")
    try:
        with abandonable(f"the reward {name}"):
            returned = call_reward(reward, prompts, completions, columns)
    except (ConfigError, UnavailableError):  # already one line (a remote reward's, after its retries)
        raise
    except Exception as err:
        prompt = failing_prompt(reward, prompts, completions, columns or {})
        where = f" on prompt {prompt[:80]!r}" if prompt is not None else f" on a batch of {len(prompts)} completions"
        message = (str(err).strip().splitlines() or [""])[0][:200]
        raise ConfigError(f"the reward {name} raised {type(err).__name__}: {message}{where}; fix the reward (the "
                          f"traceback: HYDRA_FULL_ERROR=1).") from err
    return checked_scores(name, returned, prompts, completions)


def reward_waits(reward) -> bool:
    """Whether a reward (or one of a WeightedSum's) waits on something outside the process (`waits = True`)."""
    parts = reward.rewards.values() if isinstance(reward, WeightedSum) else [reward]
    return any(getattr(part, "waits", False) is True for part in parts)


def reward_counts(reward) -> dict[str, float]:
    """{rewards/<name>/<what>: count} that rewards report with pop_stats() (e.g. a judge's unparsable answers)."""
    parts = reward.rewards if isinstance(reward, WeightedSum) else {reward_name(reward): reward}
    return {f"rewards/{name}/{key}": value for name, part in parts.items() if callable(getattr(part, "pop_stats", None))
            for key, value in part.pop_stats().items()}


def column_needs(reward, task_metrics) -> list[tuple[str, str]]:
    """(what needs it, column) for every dataset column a reward component or task metric requires."""
    rewards = reward.rewards if isinstance(reward, WeightedSum) else {reward_name(reward): reward}
    needs = [(f"the reward {name}", column) for name, component in rewards.items()
             for column in missing_columns(component, {})]
    needs += [(f"the reward {name}", component.answer_column) for name, component in rewards.items()
              if isinstance(getattr(component, "answer_column", None), str)]
    needs += [(f"the reward {name}", column) for name, component in rewards.items()
              for column in getattr(component, "required_columns", None) or []]  # e.g. a reward server's
    needs += [(f"task metric {metric.name}", metric.answer_column) for metric in task_metrics
              if getattr(metric, "answer_column", None)]
    return needs


class RolloutScoring:
    def mask_off_policy(self, new_logprobs: torch.Tensor, rollout: Rollout, advantages: torch.Tensor,
                        idx: torch.Tensor, is_weights: torch.Tensor | None):
        """With algo.off_policy_mask_threshold: DeepSeek-V3.2's off-policy sequence mask, measured in this
        micro-batch against the policy being updated (new_logprobs, M,R), as TRL; the behaviour policy is the
        engine's logprobs, or pi_old without them. -> the micro-batch's weights (M,R, or None), stats"""
        threshold = self.hparams.off_policy_mask_threshold
        if threshold is None:
            return is_weights, {}
        behaviour = rollout.logprobs if rollout.sampler_logprobs is None else rollout.sampler_logprobs  # N,R
        drop = off_policy_sequences(new_logprobs, behaviour[idx], rollout.loss_mask(idx), advantages[idx],
                                    threshold)  # M
        keep = (~drop).unsqueeze(1).to(new_logprobs.dtype).expand_as(new_logprobs)  # M,R
        weights = keep if is_weights is None else is_weights * keep  # M,R
        return weights, {"rollout/off_policy_masked_frac": drop.float().mean()}

    def sampler_stats(self, rollout: Rollout) -> dict[str, torch.Tensor]:
        """rollout/*: how far the engine's logprobs of the sampled tokens are from the trainer's (under
        async_correction=behaviour too, where the sampler's are the old logprobs: the lag); nothing when the engine
        reports none, as `rollout=hf`, whose sampler is the trainer's own model."""
        if rollout.sampler_logprobs is None:
            return {}
        trainer = rollout.logprobs if rollout.trainer_logprobs is None else rollout.trainer_logprobs  # N,R
        return sampler_mismatch_stats(trainer, rollout.sampler_logprobs, rollout.response_mask,
                                      self.hparams.rollout_is_cap, self.hparams.rollout_is_mode,
                                      self.hparams.rollout_is_min)

    def check_token_budget(self, longest_prompt: int) -> None:
        """max_tokens_per_micro_batch must hold the longest sequence the data can make (prompt + response)."""
        budget, longest = self.hparams.max_tokens_per_micro_batch, longest_prompt + self.trajectory_length
        if budget is not None and budget < longest:
            raise ConfigError(f"algo.max_tokens_per_micro_batch={budget} is below the longest sequence "
                              f"({longest_prompt} prompt + {self.trajectory_length} response tokens = "
                              f"{longest}); set it >= {longest}.")

    def check_columns(self, rows: list, dataset: str) -> None:
        """Before any training step: every row has every column the reward and the task metrics read."""
        from lit_rlhf.data.datamodule import missing_in_rows

        for who, column in column_needs(self.reward, self.task_metrics) if self.reward is not None else []:
            if column in ROLLOUT_COLUMNS:
                continue
            if column in EPISODE_COLUMNS:  # made by each episode, not read from the rows
                if self.environment is None:
                    raise ConfigError(f"{who} reads {column!r}, a column the episodes of an environment add; set "
                                      f"env=<an environment> (e.g. env=calculator) or pick another reward.")
                continue
            row = missing_in_rows(rows, column)
            if row is None:
                continue
            have = sorted({name for r in rows for name in r.columns})
            if all(r.columns.get(column) is None for r in rows):
                raise ConfigError(f"{who} needs the dataset column {column!r}, which the prompts' rows do not have "
                                  f"(they have {have or 'no column but the prompt'}); use data with that column "
                                  f"(e.g. data=arithmetic) or another reward or task metric.")
            raise ConfigError(f"data.dataset={dataset!r}, row {row}: no {column!r}, which {who} needs; give every row "
                              f"one, or remove the rows without it.")
    @torch.no_grad()
    def rollout(self, batch: dict[str, torch.Tensor], samples_per_prompt: int | None = None,
                for_training: bool = True, from_reference: bool = False, greedy: bool = False) -> Rollout:
        """The rollout engine samples K responses per prompt; then the trainer's side: old and reference
        logprobs, the reward. Everything the update needs.

        for_training=False (evaluation, samples) leaves score transforms and their running state alone.
        from_reference=True samples from the reference instead of the policy (evaluation's baseline).
        """
        # trainer=fsdp2: the rollout runs on whole weights, no collective; or, sampling sharded, block by block
        with resharded_after(self) if self.samples_sharded else gathered_weights(self) as gather_s:
            if gather_s and for_training:
                self.step_timings["time/gather_weights_s"] = self.step_timings.get("time/gather_weights_s", 0.0) \
                    + gather_s
            return self.rollout_on_whole_weights(batch, samples_per_prompt, for_training, from_reference, greedy)

    def rollout_on_whole_weights(self, batch: dict[str, torch.Tensor], samples_per_prompt: int | None,
                                 for_training: bool, from_reference: bool, greedy: bool) -> Rollout:
        drawn = self.draw(self, batch, samples_per_prompt or self.samples_per_prompt, for_training, from_reference,
                          greedy)
        return self.finish_rollout(drawn, for_training)

    def draw(self, sampler: Any, batch: dict[str, torch.Tensor], k: int, for_training: bool = True,
             from_reference: bool = False, greedy: bool = False, timings: dict[str, float] | None = None) -> Drawn:
        """The engine's side of a rollout: K episodes per prompt sampled by `sampler` (the module, or the async
        producer's view of it), decoded, and the reward started on them (it may still run when this returns)."""
        samples = self.rollout_engine.sample(sampler, batch, k, from_reference=from_reference, greedy=greedy)
        prompts = self.tokenizer.batch_decode(samples.queries, skip_special_tokens=True)
        completions = self.tokenizer.batch_decode(samples.responses, skip_special_tokens=True)
        columns = sequence_columns(batch, samples.prompt_index)  # {name: N values}
        conversations = []
        if samples.stopped is None:  # an engine that builds its samples itself
            has_stop = contains_stop(samples.responses, self.stop_token_id)  # N
        else:
            has_stop = torch.tensor(samples.stopped, device=samples.responses.device)  # N
            columns["stopped"] = list(samples.stopped)  # a reward model scores such a completion with its EOS
        if samples.episodes is not None:
            conversations = [episode_conversation(e, self.tokenizer) for e in samples.episodes]
            final_turns = [turns[-1][1] for turns in conversations]
            columns.update(episode_columns(self.environment, samples.episodes, final_turns))
        scored = self.start_scoring(prompts, completions, columns, for_training, timings)  # a waiting reward overlaps
        return Drawn(samples, prompts, completions, columns, conversations, has_stop, scored)

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
        ref_logprobs = self.reference_logprobs(*sequences) if self.uses_reference or not for_training else None
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
        scores = self.transform_scores(raw_scores, drawn.prompts, drawn.completions) if for_training else raw_scores
        if hp.missing_eos_penalty is not None:
            scores = scores - hp.missing_eos_penalty * (~drawn.has_stop).to(scores.dtype)
        return Rollout(queries=samples.queries, query_mask=samples.query_mask, responses=samples.responses,
                       response_mask=samples.response_mask, prompt_index=samples.prompt_index, logprobs=logprobs,
                       ref_logprobs=ref_logprobs, scores=scores, raw_scores=raw_scores, contains_stop=drawn.has_stop,
                       values=values, prompts=drawn.prompts, completions=drawn.completions,
                       policy_outputs=policy_outputs, sampler_logprobs=samples.sampler_logprobs, is_weights=is_weights,
                       reward_components=components, columns=drawn.columns, context_mask=samples.context_mask,
                       conversations=drawn.conversations, policy_version=drawn.version,
                       trainer_logprobs=trainer_logprobs)

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
        self.enable_trainable_grads()
        with torch.enable_grad():
            return self.policy_logprobs_and_entropy(queries, query_mask, responses, response_mask)

    def policy_logprobs_and_entropy(self, queries, query_mask, responses, response_mask):
        """The policy's forward on the sequences. -> logprobs (N,R), entropy (N,R, no grad); zero after the stop"""
        return response_logprobs_and_entropy(self.policy, queries, query_mask, responses, response_mask,
                                             self.hparams.temperature, self.hparams.logits_chunk_size,
                                             self.packing_pad_id, self.hparams.logits_budget_mib)

    @property
    def packing_pad_id(self) -> int | None:
        """The pad token of padding-free forwards (algo.padding_free), or None for padded ones."""
        return self.tokenizer.pad_token_id if self.hparams.padding_free else None

    def enable_trainable_grads(self) -> None:
        """peft's adapter switches (reference, critic) toggle requires_grad of the trained tensors."""
        for param in getattr(self, "_trainable", None) or self.trainable_parameters():
            param.requires_grad_(True)

    def old_logprobs_and_values(self, queries, query_mask, responses, response_mask):
        """No-grad logprobs of the sampling policy (N,R); algorithms with a critic add values (N,R)."""
        logprobs = batched_logprobs(self.policy, queries, query_mask, responses, response_mask,
                                    self.hparams.temperature, self.hparams.forward_batch_size,
                                    self.hparams.logits_chunk_size, self.packing_pad_id)
        return logprobs, None

    def start_scoring(self, prompts: list[str], completions: list[str], columns: dict[str, list],
                      for_training: bool, timings: dict[str, float] | None = None
                      ) -> Callable[[], tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        """Starts the reward on the sequences; the function returned waits for (scores (N), {name: (N)}). A reward
        that waits on something (`waits = True`: a reward server, a judge endpoint) runs in a thread while the
        step's reference and old-logprob forwards go on. A training rollout adds time/reward_s (the reward call)
        and time/reward_wait_s (how long the step waited for it) to the step's timings (or to `timings`: the async
        producer's own)."""
        def timed() -> tuple[tuple[torch.Tensor, dict[str, torch.Tensor]], float]:
            start = time.perf_counter()
            return self.score_components(prompts, completions, columns), time.perf_counter() - start

        def record(took: float, waited: float) -> None:
            counts = reward_counts(self.reward)  # read (and reset) even when not logged
            if for_training:
                into = self.step_timings if timings is None else timings
                for key, value in {"time/reward_s": took, "time/reward_wait_s": waited, **counts}.items():
                    into[key] = into.get(key, 0.0) + value

        if not reward_waits(self.reward):
            result, took = timed()
            record(took, took)
            return lambda: result
        pool = ThreadPoolExecutor(1, thread_name_prefix="lit_rlhf-reward")
        future = pool.submit(timed)
        pool.shutdown(wait=False)

        def wait() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            start = time.perf_counter()
            with abandonable("the reward"):
                result, took = future.result()
            record(took, time.perf_counter() - start)
            return result

        return wait

    @property
    def step_timings(self) -> dict[str, float]:
        """{time/<what>: seconds, rewards/<name>/<what>: count} of the current RL step, summed over its rollouts
        (reset when the step's metrics are logged)."""
        if getattr(self, "_step_timings", None) is None:
            self._step_timings = {}
        return self._step_timings

    def score(self, prompts: list[str], completions: list[str], columns: dict[str, list] | None = None) -> torch.Tensor:
        return self.score_components(prompts, completions, columns)[0]

    def score_components(self, prompts: list[str], completions: list[str],
                         columns: dict[str, list] | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The reward's total scores (N) and each named reward's (N): a WeightedSum's parts, or the one reward."""
        if isinstance(self.reward, WeightedSum):
            parts = self.reward.components(prompts, completions, columns, call=call_checked)
            total = self.reward.combine(parts)
        else:
            name = reward_name(self.reward)
            parts = {name: call_checked(name, self.reward, prompts, completions, columns)}
            total = parts[name]
        return total.to(self.device), {name: part.to(self.device) for name, part in parts.items()}

    def transform_scores(self, scores: torch.Tensor, prompts: list[str], completions: list[str]) -> torch.Tensor:
        """The module's score transforms (e.g. RewardNormalizer), in order, before advantages."""
        for transform in self.score_transforms:
            scores = transform.transform_scores(self, scores, prompts, completions)
        return scores
