"""What a reward is: a callable (prompts, completions, **columns) -> scores of shape (N,), and how lit_rlhf calls one.

Any callable with that signature works, e.g. a plain Python function. `columns` are the other fields of each
completion's dataset row (e.g. `answer`); a reward receives those its signature names (all with **kwargs), so a
reward of (prompts, completions) only works unchanged; an `async def` reward is awaited. A reward whose signature
names `completions` (or `completion_ids`) is called by keyword, as TRL calls its reward functions: `def
reward(completions, **kwargs)` works as written for TRL, and one that names `completion_ids` gets each completion's
token ids.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from lit_rlhf.envs.tools import awaited
from lit_rlhf.errors import ConfigError


class Reward(Protocol):
    def __call__(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> torch.Tensor: ...


def signature_of(reward: Callable) -> dict[str, inspect.Parameter] | None:
    try:
        return dict(inspect.signature(reward).parameters)
    except (TypeError, ValueError):  # a builtin without a signature: prompts and completions only
        return None


KEYWORD_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def by_name(parameters: dict[str, inspect.Parameter] | None) -> bool:
    """Whether a reward takes `completions` (or `completion_ids`) by name, as TRL calls its reward functions (`def
    reward(completions, **kwargs)`, with or without `prompts`): it is called with keywords, not (prompts, completions)
    in that order."""
    return parameters is not None and any(
        name in parameters and parameters[name].kind in KEYWORD_KINDS for name in ("completions", "completion_ids"))


def missing_columns(reward: Callable, columns: dict[str, list] | None) -> list[str]:
    """The columns reward's signature requires (parameters besides prompts and completions, without a default)
    that the dataset rows do not have."""
    parameters = signature_of(reward)
    if parameters is None:
        return []
    others = ([p for name, p in parameters.items() if name not in ("prompts", "completions")] if by_name(parameters)
              else list(parameters.values())[2:])
    return [p.name for p in others if p.default is inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in (columns or {})]


def of_this_library(reward: Callable) -> bool:
    """Whether a reward is one of lit_rlhf's own (they read texts), a partial of one included."""
    function = getattr(reward, "func", reward)  # a functools.partial's function
    function = getattr(function, "__func__", function)  # a bound method's
    owner = function if isinstance(function, type) or inspect.isfunction(function) else type(function)  # an instance
    return str(owner.__module__).split(".")[0] == "lit_rlhf"


def call_reward(reward: Callable, prompts: Sequence[str], completions: Sequence[str],
                columns: dict[str, list] | None = None, prompt_messages: Sequence[list] | None = None) -> Any:
    """reward(prompts, completions, **the columns its signature accepts); an `async def` reward is awaited.
    prompt_messages: the prompts as chat messages, where the dataset gave them so; a reward of the user's with TRL's
    signature (it names `completions` and takes **kwargs) then gets them as `prompts`, and each completion as TRL
    passes it, [{"role": "assistant", "content": ...}]; the library's rewards, and any other, get the texts."""
    return awaited(call_reward_with_columns(reward, prompts, completions, columns, prompt_messages))


def call_reward_with_columns(reward: Callable, prompts: Sequence[str], completions: Sequence[str],
                             columns: dict[str, list] | None, prompt_messages: Sequence[list] | None = None) -> Any:
    parameters = signature_of(reward)
    if parameters is None:
        return reward(prompts, completions)
    any_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    passed = {k: v for k, v in (columns or {}).items() if any_keyword or k in parameters}
    if by_name(parameters):
        if prompt_messages is not None and any_keyword and not of_this_library(reward):  # TRL's reward signature
            prompts = list(prompt_messages)
            completions = [[{"role": "assistant", "content": completion}] for completion in completions]
        texts = {name: value for name, value in (("prompts", prompts), ("completions", completions))
                 if any_keyword or name in parameters}
        return reward(**texts, **passed)
    return reward(prompts, completions, **passed)


def load_reward(reward) -> None:
    """Loads a reward's weights now (rewards with a `load()` method), not at its first call."""
    load = getattr(reward, "load", None)
    if callable(load):
        load()


def check_reward(reward: Any, training: bool = False) -> None:
    """A reward is a callable; None is a module's that evaluates or exports and never trains (training: refused too).
    Anything else (a name, a list of rewards) is one line saying what to pass."""
    if reward is None and training:
        raise ConfigError("this module has no reward (reward=None: built or loaded to evaluate or export), and "
                          "training needs one; pass it, e.g. RLOOModule(..., reward=VaderSentiment()) or "
                          "RLOOModule.load_from_checkpoint(path, reward=...).")
    if isinstance(reward, type):  # callable, and a call would build one (the scores: a TypeError, or the object)
        raise ConfigError(f"reward={reward.__name__} is a class; pass an instance: reward={reward.__name__}(...).")
    if reward is None or callable(reward):
        return
    shown = repr(reward[:60]) if isinstance(reward, str) else f"<a {type(reward).__name__}>"
    hint = ("several rewards: lit_rlhf.rewards.WeightedSum({'name': reward, ...}) trains on their weighted sum"
            if isinstance(reward, (list, tuple, dict)) else
            "a function (prompts, completions, **columns) -> N scores, or e.g. lit_rlhf.rewards.VaderSentiment()")
    raise ConfigError(f"reward={shown} is not callable; pass {hint}.")
