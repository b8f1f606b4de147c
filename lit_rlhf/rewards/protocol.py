"""What a reward is: a callable (prompts, completions, **columns) -> scores of shape (N,), and how lit_rlhf calls one.

Any callable with that signature works, e.g. a plain Python function. `columns` are the other fields of each
completion's dataset row (e.g. `answer`); a reward receives those its signature names (all with **kwargs), so a
reward of (prompts, completions) only works unchanged; an `async def` reward is awaited.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from lit_rlhf.envs.tools import awaited


class Reward(Protocol):
    def __call__(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> torch.Tensor: ...


def missing_columns(reward: Callable, columns: dict[str, list] | None) -> list[str]:
    """The columns reward's signature requires (parameters after prompts and completions, without a default)
    that the dataset rows do not have."""
    try:
        parameters = list(inspect.signature(reward).parameters.values())[2:]
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.default is inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in (columns or {})]


def call_reward(reward: Callable, prompts: Sequence[str], completions: Sequence[str],
                columns: dict[str, list] | None = None) -> Any:
    """reward(prompts, completions, **the columns its signature accepts); an `async def` reward is awaited."""
    return awaited(call_reward_with_columns(reward, prompts, completions, columns))


def call_reward_with_columns(reward: Callable, prompts: Sequence[str], completions: Sequence[str],
                             columns: dict[str, list] | None) -> Any:
    if not columns:
        return reward(prompts, completions)
    try:
        parameters = inspect.signature(reward).parameters
    except (TypeError, ValueError):  # a builtin without a signature: prompts and completions only
        return reward(prompts, completions)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return reward(prompts, completions, **columns)
    return reward(prompts, completions, **{k: v for k, v in columns.items() if k in parameters})


def load_reward(reward) -> None:
    """Loads a reward's weights now (rewards with a `load()` method), not at its first call."""
    load = getattr(reward, "load", None)
    if callable(load):
        load()
