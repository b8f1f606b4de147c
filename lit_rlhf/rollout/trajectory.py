"""Episodes: the rollout as trajectories. A single-turn rollout is the one-turn case (no environment).

    turn t: the engine samples a model turn for every live episode (its prompt + trajectory so far)
            -> the turn's sampled token ids are appended as sampled (token in, token out)
            -> the environment answers: tool results or step() -> the observation is tokenized on its own and
               appended (never re-tokenizing the conversation), or the episode ends

An episode ends when the model's turn has no tool call and step() says done, when a turn ends without the stop
token (the per-turn budget algo.response_length), after env.max_turns turns, or when the next observation would
pass env.max_tokens (flagged as truncated). Episodes never span RL steps.

Shapes: N episodes (B prompts x K samples), P prompt length, R = env.max_tokens (algo.response_length without
an environment).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from lit_rlhf.envs import Environment, EnvSpec, ToolCallError, call_with_timeout, run_tool_call
from lit_rlhf.envs.tools import awaited, failure_text, str_or_type, tool_name
from lit_rlhf.errors import ConfigError
from lit_rlhf.interrupts import thread_pool
from lit_rlhf.remote.schema import shown
from lit_rlhf.rollout.context import SamplingContext


@dataclass
class Episode:
    prompt: list[int]
    env: Environment | None
    tokens: list[int] = field(default_factory=list)  # everything after the prompt
    model_mask: list[bool] = field(default_factory=list)  # True where the model sampled the token
    sampler_logprobs: list[float] = field(default_factory=list)
    segments: list[tuple[str, int]] = field(default_factory=list)  # (model | env, token count), in order
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    stopped: bool = False  # the last model turn ended with the stop token
    truncated: bool = False  # ended by env.max_tokens or env.max_turns while the environment would go on
    done: bool = False

    def append(self, ids: list[int], by_model: bool, logprobs: list[float] | None = None) -> None:
        self.tokens += ids
        self.model_mask += [by_model] * len(ids)
        self.sampler_logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.segments.append(("model" if by_model else "env", len(ids)))


@functools.lru_cache(maxsize=8)
def max_chars_per_token(tokenizer: Any) -> int:
    """The most characters one token of this tokenizer stands for (its longest vocabulary entry, at least 1): a
    text of more than room * this characters cannot fit in `room` tokens, so it is cut before tokenizing."""
    return max(1, max((len(token) for token in tokenizer.get_vocab()), default=1))


def cut_at_stop(ids: list[int], stop_id: int) -> list[int]:
    """The sampled ids up to and including the first stop token (generate() pads after it)."""
    return ids[:ids.index(stop_id) + 1] if stop_id in ids else ids


def cut_text(text: str, limit: int) -> str:
    """text, or its first `limit` characters and a note saying how much was cut (the model sees the note)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [cut: {len(text)} characters, {limit} shown (env.max_tokens)]"


def environment_answer(spec: EnvSpec, episode: Episode, text: str, room_chars: int) -> tuple[str | None, bool]:
    """The observation after a model turn and whether the episode is done: the results of its tool calls, else
    the environment's step(). A malformed or failing call is an observation (the error text), and counted. At most
    env.max_tool_calls calls run, within env.turn_timeout_s together; each result (or step()'s observation) is cut
    to room_chars characters before anything tokenizes it."""
    tools = {tool_name(tool): tool for tool in getattr(episode.env, "tools", ()) or ()}
    try:
        calls = spec.format.parse(text) if tools else []
    except ToolCallError as err:
        episode.tool_calls += 1
        episode.tool_errors += 1
        return spec.format.observation([f"error: {str(err)[:room_chars]}"]), False
    if calls:
        results, deadline = [], time.monotonic() + spec.turn_timeout_s
        for number, call in enumerate(calls):
            left = deadline - time.monotonic()
            if number >= spec.max_tool_calls:
                result, failed = f"error: not run: at most {spec.max_tool_calls} tool calls a turn", True
            elif left <= 0:
                result, failed = f"error: not run: the turn's {spec.turn_timeout_s:g} s for tool calls are spent", True
            else:
                result, failed = run_tool_call(call, tools, min(spec.tool_timeout_s, left))
            episode.tool_errors += failed
            results.append(cut_text(result, room_chars))
        episode.tool_calls += len(calls)
        return spec.format.observation(results), False
    try:
        answer = call_with_timeout(lambda: awaited(episode.env.step(text)), spec.tool_timeout_s)
    except Exception as err:
        episode.tool_errors += 1
        return failure_text(err), False
    if not (isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[0], (str, type(None)))):
        raise ConfigError(f"the environment {spec.name}'s step() returned {shown(str_or_type(answer))}; step() returns "
                          f"(observation text, done), e.g. (\"try again\", False); fix the environment.")
    observation, done = answer
    return (None if observation is None else cut_text(observation, room_chars)), bool(done) or not observation


def answer_concurrently(spec: EnvSpec | None,
                        answering: list[tuple[Episode, str, int]]) -> list[tuple[str | None, bool]]:
    """environment_answer for every episode that needs one this turn, env.max_concurrency at a time (each its own
    tool calls and step(), with their timeouts), in the episodes' order."""
    if len(answering) <= 1 or spec.max_concurrency == 1:
        return [environment_answer(spec, *work) for work in answering]
    with thread_pool(min(spec.max_concurrency, len(answering)), "episode") as pool:
        return list(pool.map(lambda work: environment_answer(spec, *work), answering))


def run_episodes(engine: Any, sampling: SamplingContext, queries: torch.Tensor, query_mask: torch.Tensor,
                 columns: list[dict[str, Any]], from_reference: bool, greedy: bool) -> list[Episode]:
    """Every episode of the rollout (one per row of queries, N,P), turn by turn; columns: each one's dataset row."""
    spec: EnvSpec | None = sampling.environment
    stop_id, budget = sampling.stop_token_id, sampling.trajectory_length
    rows = torch.stack([queries, query_mask.to(queries.dtype)], 1).tolist()  # N x (P ids, P mask): one transfer
    episodes = [Episode([t for t, keep in zip(ids, mask, strict=True) if keep],
                        spec.create(row) if spec is not None else None)
                for (ids, mask), row in zip(rows, columns, strict=True)]
    max_turns = spec.max_turns if spec is not None else 1
    for turn in range(max_turns):
        live = [e for e in episodes if not e.done]
        if not live:
            break
        room = [budget - len(e.tokens) for e in live]
        outputs = engine.generate_turn(sampling, [e.prompt + e.tokens for e in live],
                                       min(sampling.settings.response_length, max(room)), from_reference, greedy)
        answering = []  # (episode, its turn's text, the characters its observation may take)
        for episode, space, (ids, logprobs) in zip(live, room, outputs, strict=True):
            ids = cut_at_stop(ids, stop_id)[:space]
            episode.append(ids, True, None if logprobs is None else list(logprobs[:len(ids)]))
            episode.turns += 1
            episode.stopped = bool(ids) and ids[-1] == stop_id
            if not episode.stopped or episode.env is None:
                episode.done = True
                episode.truncated = not episode.stopped and len(episode.tokens) >= budget and spec is not None
                continue
            room_chars = (budget - len(episode.tokens)) * max_chars_per_token(sampling.tokenizer)
            answering.append((episode, sampling.tokenizer.decode(ids), room_chars))
        for (episode, _, _), (observation, done) in zip(answering, answer_concurrently(spec, answering), strict=True):
            if done:
                episode.done = True
                continue
            observed = sampling.tokenizer(observation, add_special_tokens=False)["input_ids"]
            if turn == max_turns - 1 or len(episode.tokens) + len(observed) >= budget:
                episode.done = episode.truncated = True  # no room for the answer's turn: ended, flagged
                continue
            episode.append(observed, False)
    return episodes


def episode_tensors(episodes: list[Episode], length: int, pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    """The episodes as padded tensors: responses, response_mask (model tokens), context_mask (every token after
    the prompt), sampler_logprobs. -> each (N,R)"""
    def padded(rows: list[list], fill, dtype: torch.dtype) -> torch.Tensor:  # one tensor from lists padded to R
        return torch.tensor([row + [fill] * (length - len(row)) for row in rows], dtype=dtype).view(len(rows), length)

    tensors = {"responses": padded([e.tokens for e in episodes], pad_id, torch.long),
               "response_mask": padded([e.model_mask for e in episodes], False, torch.bool),
               "context_mask": padded([[True] * len(e.tokens) for e in episodes], False, torch.bool),
               "sampler_logprobs": padded([e.sampler_logprobs for e in episodes], 0.0, torch.get_default_dtype())}
    return {name: t.to(device) for name, t in tensors.items()}


def episode_conversation(episode: Episode, tokenizer: Any) -> list[tuple[str, str]]:
    """The episode as [(model | env, text)] turns, in order, for samples and reports."""
    turns, start = [], 0
    for role, count in episode.segments:
        turns.append((role, tokenizer.decode(episode.tokens[start:start + count], skip_special_tokens=True)))
        start += count
    return turns or [("model", "")]


def transcript(conversation: list[tuple[str, str]]) -> str:
    """A conversation as one text with the environment's turns marked: `model text [env: observation] model text`."""
    return "".join(text if role == "model" else f" [env:{text}]" for role, text in conversation)


EPISODE_COLUMNS = ("env_reward", "turns", "tool_calls", "tool_errors", "truncated", "final_response")
# made by every rollout for the rewards that read it: whether each completion ended with the stop token, and (as TRL
# passes them) the token ids of each completion, its stop token included
ROLLOUT_COLUMNS = ("stopped", "completion_ids")


def completion_ids(responses: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    """Each completion's token ids without padding (an episode's: every token after the prompt). (N,R), (N,R) ->
    N lists"""
    return [row[keep].tolist() for row, keep in zip(responses.cpu(), mask.bool().cpu(), strict=True)]


def episode_columns(spec: EnvSpec, episodes: list[Episode], final_responses: list[str]) -> dict[str, list]:
    """What rewards may read about each episode besides its text: the environment's reward (env_reward), turns,
    tool calls and errors, whether a limit ended it (truncated), the text of the model's last turn (final_response)."""
    return {
        "env_reward": [None if e.env is None else spec.episode_reward(e.env) for e in episodes],
        "turns": [e.turns for e in episodes], "tool_calls": [e.tool_calls for e in episodes],
        "tool_errors": [e.tool_errors for e in episodes], "truncated": [e.truncated for e in episodes],
        "final_response": final_responses,
    }


def episode_stats(columns: dict[str, list], response_mask: torch.Tensor,
                  context_mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """rollout/* of a multi-turn rollout (nothing for a single-turn one): turns, tool calls and tool errors per
    episode, tool errors per call, the share of trajectory tokens that came from the environment, the share of
    episodes a limit ended."""
    if context_mask is None or "turns" not in columns:
        return {}

    def mean(name: str) -> torch.Tensor:
        return torch.tensor([float(v) for v in columns[name]]).mean()

    tokens = context_mask.sum().clamp(min=1)
    calls = sum(columns["tool_calls"])
    return {"rollout/turns_mean": mean("turns"), "rollout/tool_calls_mean": mean("tool_calls"),
            "rollout/tool_errors": mean("tool_errors"), "rollout/truncated_frac": mean("truncated"),
            "rollout/tool_error_rate": torch.tensor(sum(columns["tool_errors"]) / max(calls, 1), dtype=torch.float32),
            "rollout/env_token_frac": ((context_mask & ~response_mask).sum() / tokens).cpu().float()}
