"""The environment seam: what a multi-turn episode talks to.

An Environment is created per episode from its prompt's dataset row (the columns its constructor names), offers
`tools` (plain functions: the model calls them in its tool format and sees their results) and/or a `step` hook
(the model's turn text -> an observation, or the end), and may score the finished episode with `reward`.
EnvSpec says how episodes run: which environment, at most how many turns and tokens, the tool timeout and format.

    class Calculator(Environment):
        tools = [calculator]             # def calculator(expression: str) -> str, with a docstring

    GRPOModule(model=..., reward=..., environment=EnvSpec(Calculator, max_turns=3, max_tokens=48))
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lit_rlhf.envs.formats import TOOL_FORMATS, ToolFormat
from lit_rlhf.envs.tools import tool_name, tool_schema
from lit_rlhf.errors import ConfigError, nearest
from lit_rlhf.terminal import clipped_first_line


class Environment:
    """One episode's world. Subclasses name the dataset columns they need as constructor parameters."""

    tools: Sequence[Callable] = ()

    def __init__(self, **columns: Any):
        self.columns = columns

    def step(self, text: str) -> tuple[str | None, bool]:
        """After a model turn with no tool call: (observation text to append, done). Default: the episode ends."""
        return None, True

    def reward(self) -> float | None:
        """The finished episode's reward (read by `reward=environment`), or None."""
        return None


def factory_class(factory: Callable) -> Any:
    """The class a factory builds (a class, or a functools.partial of one), else the factory itself."""
    while isinstance(factory, functools.partial):
        factory = factory.func
    return factory


MAX_TIMEOUT_S = 86400.0  # a finite wait (threading cannot wait for inf or 1e12 s: every call would fail)


@dataclass
class EnvSpec:
    factory: Callable[..., Environment] = field(metadata={
        "doc": "the Environment class (or factory), called per episode with the row's columns it names"})
    max_turns: int = field(default=4, metadata={"doc": "model turns per episode (each up to algo.response_length "
                                                       "tokens)"})
    max_tokens: int = field(default=256, metadata={"doc": "trajectory tokens after the prompt, model turns and "
                                                          "observations (R); an episode that would pass it is ended"})
    tool_timeout_s: float = field(default=10.0, metadata={"doc": "per tool call and per step(); past it the model "
                                                                  "sees the timeout as the answer"})
    max_tool_calls: int = field(default=8, metadata={"doc": "tool calls run per model turn; further calls in the "
                                                            "turn are answered with an error, not run"})
    turn_timeout_s: float = field(default=30.0, metadata={"doc": "all tool calls of one model turn together; a call "
                                                                 "gets what is left of it (at most tool_timeout_s)"})
    max_concurrency: int = field(default=8, metadata={"doc": "live episodes whose tool calls and step() run at "
                                                             "once in a turn (1: one after another)"})
    tool_format: str = field(default="compact", metadata={"doc": "how calls are written: compact "
                                                                 "(`<call>f(x)</call>`) or hermes (Qwen2.5 "
                                                                 "`<tool_call>` JSON)"})

    def __post_init__(self) -> None:
        name = self.name
        if not callable(self.factory):
            raise ConfigError(f"env.factory={self.factory!r} is not callable; give an Environment class "
                              f"(env.factory._target_=mymodule.MyEnvironment, env.factory._partial_=true).")
        for key, minimum in (("max_turns", 1), ("max_tokens", 2), ("max_tool_calls", 1), ("max_concurrency", 1)):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ConfigError(f"env.{key}={value!r} must be a whole number >= {minimum}.")
        for key in ("tool_timeout_s", "turn_timeout_s"):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= MAX_TIMEOUT_S:
                raise ConfigError(f"env.{key}={value!r} must be a number of seconds > 0 and at most {MAX_TIMEOUT_S:g} "
                                  f"(a day); a tool that may take longer is a job, not a tool call.")
        if self.tool_format not in TOOL_FORMATS:
            raise ConfigError(f"env.tool_format={self.tool_format!r} is not a tool format"
                              f"{nearest(self.tool_format, list(TOOL_FORMATS), noun='formats')}.")
        for hook in [*self.tools, getattr(factory_class(self.factory), "step", None)]:
            if inspect.isasyncgenfunction(hook):
                raise ConfigError(f"the environment {name}'s {getattr(hook, '__name__', hook)} is an async generator "
                                  f"(async def with yield), which cannot be awaited to one answer; return the answer "
                                  f"instead of yielding it.")
        self.schemas = [tool_schema(tool, f"the environment {name}") for tool in self.tools]

    @property
    def tools(self) -> list[Callable]:
        """The environment class's tools (declared on the class, so their schemas are known before episodes)."""
        return list(getattr(factory_class(self.factory), "tools", ()) or ())

    @property
    def format(self) -> ToolFormat:
        return TOOL_FORMATS[self.tool_format]

    @property
    def tool_names(self) -> list[str]:
        return [tool_name(tool) for tool in self.tools]

    def required_columns(self) -> list[str]:
        """The dataset columns the factory needs (parameters without a default)."""
        try:
            parameters = inspect.signature(self.factory).parameters.values()
        except (TypeError, ValueError):
            return []
        return [p.name for p in parameters if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]

    @property
    def name(self) -> str:
        return getattr(factory_class(self.factory), "__name__", repr(self.factory))

    def create(self, columns: dict[str, Any]) -> Environment:
        """The environment of one episode, from its prompt's columns; one line if the factory raises."""
        try:
            parameters = inspect.signature(self.factory).parameters
        except (TypeError, ValueError):
            parameters = {}
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            arguments = columns
        else:
            arguments = {k: v for k, v in columns.items() if k in parameters}
        try:
            return self.factory(**arguments)
        except Exception as err:
            message = clipped_first_line(err)
            raise ConfigError(f"the environment {self.name} raised {type(err).__name__}: {message} when built from a "
                              f"row with {sorted(arguments) or 'no columns'}; fix the environment (the traceback: "
                              f"HYDRA_FULL_ERROR=1).") from err

    def episode_reward(self, env: Environment) -> float | None:
        """env.reward(), or one line naming the environment if it raises."""
        try:
            return env.reward()
        except Exception as err:
            message = clipped_first_line(err)
            raise ConfigError(f"the environment {self.name}'s reward() raised {type(err).__name__}: {message}; fix "
                              f"the environment (the traceback: HYDRA_FULL_ERROR=1).") from err


def as_env_spec(environment: EnvSpec | Callable | None) -> EnvSpec | None:
    """A module's `environment` argument: an EnvSpec, an Environment class (default limits), or None."""
    if environment is None or isinstance(environment, EnvSpec):
        return environment
    if isinstance(environment, dict) and not environment:  # the CLI's env=none
        return None
    return EnvSpec(environment)
