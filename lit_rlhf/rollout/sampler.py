"""The Sampler: everything that draws episodes, and nothing that learns.

    prompt batch (B prompts) --Sampler.draw(batch, k, version)--> Drawn (N = B*K episodes, decoded, scored)

A Sampler owns the policy handle it samples with (the trainer's policy, or the async producer's copy of it) and the
version of those weights, the tokenizer, the rollout engine, the environment of multi-turn episodes, the reward and
the gold reward (scored beside the reward, never trained on) and the teacher of on-policy distillation (the logprob
of every sampled token; lit_rlhf/teachers/).
Engines and the episode loop receive its SamplingContext (rollout/context.py), never the LightningModule; what
follows a draw (old and reference logprobs, advantages, the update) is the module's.

Shapes: B prompts, K samples per prompt, N = B*K sequences.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn

from lit_rlhf.envs import EnvSpec
from lit_rlhf.errors import ConfigError
from lit_rlhf.interrupts import abandonable
from lit_rlhf.ops import contains_stop
from lit_rlhf.rewards import WeightedSum, reward_name
from lit_rlhf.rewards.protocol import Reward, check_reward
from lit_rlhf.rollout.context import SamplingContext, SamplingSettings
from lit_rlhf.rollout.engine import RolloutEngine, Samples
from lit_rlhf.rollout.scoring import (
    call_checked,
    check_not_trainer_state,
    column_needs,
    reads_column,
    reward_counts,
    reward_waits,
    sequence_columns,
    sequence_prompt_messages,
)
from lit_rlhf.rollout.trajectory import (
    EPISODE_COLUMNS,
    ROLLOUT_COLUMNS,
    completion_ids,
    episode_columns,
    episode_conversation,
)
from lit_rlhf.teachers.causal_lm import check_teacher_vocabulary_size, loaded_teachers
from lit_rlhf.teachers.protocol import Teacher, call_hook

Scores = tuple[torch.Tensor, dict[str, torch.Tensor]]  # total scores (N), {each named reward: (N)}


def observed_gold(gold: Any, reward: Any) -> Any:
    """A gold reward as given (None, or an empty config for gold=none: no gold), refused when it is the trained reward.
    """
    if isinstance(gold, dict) and not gold:
        return None
    if gold is not None and gold is reward:
        raise ConfigError("the gold reward is the trained reward: it would measure what the run optimizes, not the "
                          "quality the proxy stands for; name another reward as gold (e.g. gold=vader with a "
                          "learned reward model).")
    return gold


@dataclass
class Drawn:
    """Episodes as the engine and the reward leave them, before the trainer's forwards."""

    samples: Samples
    prompts: list[str]
    completions: list[str]
    columns: dict[str, list]  # {name: N values}
    conversations: list  # N x [(model | env, text)], multi-turn
    has_stop: torch.Tensor  # N
    scored: Callable[[], Scores]  # waits for (scores N, {name: N})
    version: int | None = None  # async mode: the policy version (RL steps trained) whose weights sampled it
    gold: torch.Tensor | None = None  # N  the gold reward's scores (Sampler.gold), never trained on
    teacher_logprobs: torch.Tensor | None = None  # N,R  the teacher's (Sampler.teacher), zero off the model's tokens
    # a served teacher's most likely tokens at each model token (teacher.top_logprobs): ids and logprobs, N,R,K
    teacher_top: tuple[torch.Tensor, torch.Tensor] | None = None
    staleness: int = 0  # async mode: versions between those weights and the ones it is trained at


class Sampler:
    """Draws K episodes per prompt with the policy (or its reference), decodes them and starts the reward on them.

    Built with what does not change over a run (engine, reward, environment, settings); `attach` gives it the
    loaded policy, its reference and the tokenizer. `for_worker` is a Sampler that draws with another copy of the
    policy (the async producer's, one per concurrent draw) and a random stream of its own."""

    def __init__(self, engine: RolloutEngine, reward: Reward | None, settings: SamplingSettings,
                 environment: EnvSpec | None = None):
        check_reward(reward)
        self.engine, self.reward = engine, reward
        # a reward scored on every draw and never trained on, to measure over-optimization (callbacks.GoldReward)
        self.gold: Reward | None = None
        self.teacher: Teacher | None = None  # on-policy distillation: scores every token the policy samples
        self.context = SamplingContext(settings, environment)
        self.warned_of_unscored = False

    def attach(self, policy: torch.nn.Module, reference: Any, tokenizer: Any, stop_token_id: int,
               device: torch.device, rank: int = 0, local_rank: int = 0) -> None:
        """The loaded models: called once the module's weights are loaded, before the engine's setup."""
        self.context = replace(self.context, policy=policy, reference=reference, tokenizer=tokenizer,
                               stop_token_id=stop_token_id, device=device, rank=rank, local_rank=local_rank)
        if self.teacher is not None:
            call_hook(self.teacher, "check_temperature", self.context.settings.temperature)  # a served teacher: 1
            call_hook(self.teacher, "load", tokenizer)  # frozen, with the student's tokenizer
            check_teacher_vocabulary_size(self.teacher, policy)

    def for_worker(self, policy: torch.nn.Module) -> Sampler:
        """This Sampler drawing with `policy` (another copy of the policy's weights) and a random stream of its own."""
        worker = copy.copy(self)
        worker.context = replace(self.context, policy=policy, random_stream=None)
        return worker

    def use_gold(self, gold: Reward | None) -> None:
        """A reward to score on every draw beside the trained one, never trained on (callbacks.GoldReward, evaluate.py);
        None (or gold=none's empty config): no gold. The trained reward itself is refused."""
        self.gold = observed_gold(gold, self.reward)

    @property
    def environment(self) -> EnvSpec | None:
        return self.context.environment

    @environment.setter
    def environment(self, spec: EnvSpec | None) -> None:
        self.context.environment = spec

    def check_rows(self, rows: list, dataset: str, task_metrics: Sequence[Any] = ()) -> None:
        """Before any training step: every row has every column the reward, the gold reward and the task metrics
        read, the columns the environment is built from, and the routing column of routed teachers."""
        from lit_rlhf.data.datamodule import missing_in_rows

        environment = self.context.environment
        for who, column in column_needs(self.reward, task_metrics, self.gold):
            if column in ROLLOUT_COLUMNS:
                continue
            check_not_trainer_state(who, column)
            if column in EPISODE_COLUMNS:  # made by each episode, not read from the rows
                if environment is None:
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
        if self.teacher is not None:  # routed teachers: every row names one
            call_hook(self.teacher, "check_rows", rows, dataset)
        for column in environment.required_columns() if environment is not None else []:
            row = missing_in_rows(rows, column)
            if row is not None:
                raise ConfigError(f"the environment needs the dataset column {column!r}, which data.dataset="
                                  f"{dataset!r} row {row} does not have; use data with that column or another env.")

    # ---- drawing ------------------------------------------------------------------------------
    def draw(self, batch: dict[str, Any], k: int, version: int, from_reference: bool = False, greedy: bool = False,
             timings: dict[str, float] | None = None) -> Drawn:
        """K episodes per prompt of `batch` sampled with the weights of `version`, decoded, and the reward started
        on them (a reward that waits may still run when this returns: Drawn.scored waits for it). timings: where
        time/reward_s, time/reward_wait_s and the rewards' counts of a training draw add up (None: not recorded)."""
        sampling, tokenizer = self.context, self.context.tokenizer
        sampling.version, sampling.device = version, batch["input_ids"].device
        samples = self.engine.sample(sampling, batch, k, from_reference=from_reference, greedy=greedy)
        prompts = tokenizer.batch_decode(samples.queries, skip_special_tokens=True)
        completions = tokenizer.batch_decode(samples.responses, skip_special_tokens=True)
        columns = sequence_columns(batch, samples.prompt_index)  # {name: N values}
        conversations = []
        if samples.stopped is None:  # an engine that builds its samples itself
            has_stop = contains_stop(samples.responses, sampling.stop_token_id)  # N
        else:
            has_stop = torch.tensor(samples.stopped, device=samples.responses.device)  # N
            columns["stopped"] = list(samples.stopped)  # a reward model scores such a completion with its EOS
        if samples.episodes is not None:
            conversations = [episode_conversation(e, tokenizer) for e in samples.episodes]
            final_turns = [turns[-1][1] for turns in conversations]
            columns.update(episode_columns(self.environment, samples.episodes, final_turns))
        scoring_columns = columns  # and the completions' token ids, made for the rewards that may read them
        if any(reward is not None and reads_column(reward, "completion_ids") for reward in (self.reward, self.gold)):
            scoring_columns = {**columns, "completion_ids": completion_ids(samples.responses, samples.forward_mask)}
        # a conversational dataset's prompts, for the rewards called as TRL calls them (an episode's turns are not)
        messages = sequence_prompt_messages(batch, samples.prompt_index) if samples.episodes is None else None
        scored = self.start_scoring(prompts, completions, scoring_columns, timings, messages)  # a waiting one overlaps
        gold = None if self.gold is None else call_checked("gold", self.gold, prompts, completions, scoring_columns,
                                                           prompt_messages=messages)  # N
        teacher_logprobs, teacher_top = self.teacher_logprobs(samples, columns)
        return Drawn(samples, prompts, completions, columns, conversations, has_stop, scored, gold=gold,
                     teacher_logprobs=teacher_logprobs, teacher_top=teacher_top)

    @torch.no_grad()
    def teacher_logprobs(self, samples: Samples, columns: dict[str, list]
                         ) -> tuple[torch.Tensor | None, tuple[torch.Tensor, torch.Tensor] | None]:
        """The teacher's logprob of every token the model sampled (observation tokens of an episode are context:
        read, never scored), at the sampling temperature, and a teacher's most likely tokens there where it gives
        them (teacher.top_logprobs). -> (N,R) or None without a teacher; (ids, logprobs) (N,R,K) or None"""
        if self.teacher is None:
            return None, None
        arguments = (samples.queries, samples.query_mask, samples.responses, samples.forward_mask,
                     self.context.settings.temperature, columns)
        # a served teacher that never answers must not outlast SIGTERM; a loaded one's forward always ends
        with abandonable("the teacher", runs_collectives=bool(loaded_teachers(self.teacher))):
            if getattr(self.teacher, "top_logprobs", None):
                logprobs, top_ids, top_logprobs = self.teacher.scores(*arguments)  # N,R ; N,R,K ; N,R,K
            else:
                logprobs, top_ids = self.teacher.logprobs(*arguments), None  # N,R
        device, model_tokens = samples.responses.device, samples.response_mask
        top = None
        if top_ids is not None:  # observation tokens of an episode: padding (id 0, -inf)
            off = ~model_tokens.bool()[..., None].to(device)
            top = (top_ids.to(device).masked_fill(off, 0), top_logprobs.to(device).masked_fill(off, float("-inf")))
        return logprobs.to(device) * model_tokens, top

    # ---- scoring ------------------------------------------------------------------------------
    def start_scoring(self, prompts: list[str], completions: list[str], columns: dict[str, list],
                      timings: dict[str, float] | None = None,
                      prompt_messages: list[list] | None = None) -> Callable[[], Scores]:
        """Starts the reward on the sequences; the function returned waits for (scores (N), {name: (N)}). A reward
        that waits on something (`waits = True`: a reward server, a judge endpoint) runs in a thread while the
        step's reference and old-logprob forwards go on. timings (if given) adds time/reward_s (the reward call),
        time/reward_wait_s (how long the step waited for it) and the rewards' counts."""
        def timed() -> tuple[Scores, float]:
            start = time.perf_counter()
            scores = self.score_components(prompts, completions, columns, prompt_messages)
            return scores, time.perf_counter() - start

        def record(took: float, waited: float) -> None:
            counts = reward_counts(self.reward)  # read (and reset) even when not recorded
            if timings is not None:
                for key, value in {"time/reward_s": took, "time/reward_wait_s": waited, **counts}.items():
                    timings[key] = timings.get(key, 0.0) + value

        if not reward_waits(self.reward):
            result, took = timed()
            record(took, took)
            return lambda: result
        pool = ThreadPoolExecutor(1, thread_name_prefix="lit_rlhf-reward")
        future = pool.submit(timed)
        pool.shutdown(wait=False)

        def wait() -> Scores:
            start = time.perf_counter()
            with abandonable("the reward"):
                result, took = future.result()
            record(took, time.perf_counter() - start)
            return result

        return wait

    def warn_of_unscored(self, unscored: torch.Tensor, prompts: list[str]) -> None:
        """Once per run: completions to which no reward applied (each returned None) score 0, as TRL scores them."""
        if unscored.any() and not self.warned_of_unscored:
            self.warned_of_unscored = True
            first = prompts[int(unscored.nonzero()[0])]
            rank_zero_warn(f"{int(unscored.sum())} of {len(unscored)} completions were scored by no reward (every "
                           f"reward returned None for them, e.g. on prompt {first[:60]!r}) and score 0; give every "
                           f"prompt a reward that applies to it. Said once per run.")

    def score(self, prompts: list[str], completions: list[str], columns: dict[str, list] | None = None) -> torch.Tensor:
        """The reward's total scores. -> (N)"""
        return self.score_components(prompts, completions, columns)[0]

    def score_components(self, prompts: list[str], completions: list[str], columns: dict[str, list] | None = None,
                         prompt_messages: list[list] | None = None) -> Scores:
        """The reward's total scores (N) and each named reward's (N): a WeightedSum's parts, or the one reward.
        prompt_messages: the prompts as chat messages (a conversational dataset), for the rewards called by keyword."""
        call = functools.partial(call_checked, allow_none=True, prompt_messages=prompt_messages)
        if isinstance(self.reward, WeightedSum):
            parts = self.reward.components(prompts, completions, columns, call=call)
            total = self.reward.combine(parts)
        else:
            name = reward_name(self.reward)
            parts = {name: call(name, self.reward, prompts, completions, columns)}
            total = parts[name].nan_to_num(nan=0.0)
        self.warn_of_unscored(torch.stack(list(parts.values())).isnan().all(0), prompts)
        device = self.context.device
        return total.to(device), {name: part.to(device) for name, part in parts.items()}


def sampler_attribute(name: str, doc: str) -> property:
    """An attribute of the module holding a Sampler that is its Sampler's (read and set there)."""
    return property(lambda self: getattr(self.sampler, name), lambda self, value: setattr(self.sampler, name, value),
                    doc=doc)
