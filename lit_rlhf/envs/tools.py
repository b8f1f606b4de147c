"""Tools: plain Python callables an episode's model may call, their JSON schemas (the form transformers' chat
templates take, from type hints and a Google-style docstring), and calling one without letting it stop the run."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lit_rlhf.errors import ConfigError


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] | list[Any] = field(default_factory=dict)  # keyword or positional arguments


class ToolCallError(ValueError):
    """A tool call the model wrote that cannot be parsed; its text is what the model sees."""


def tool_name(tool: Callable) -> str:
    return getattr(tool, "__name__", type(tool).__name__)


def tool_schema(tool: Callable, owner: str) -> dict[str, Any]:
    """The JSON schema of tool (from its type hints and docstring), or a one-line error naming it."""
    from transformers.utils import get_json_schema

    if not callable(tool):
        raise ConfigError(f"{owner}: the tool {tool!r} is not callable; give tools as functions.")
    try:
        return get_json_schema(tool)
    except Exception as err:  # transformers' TypeHintParsingException / DocstringParsingException
        message = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ConfigError(f"{owner}: the tool {tool_name(tool)!r} has no usable schema ({message}); give it type hints "
                          f"for every argument and a docstring with an Args: section.") from err


def call_with_timeout(function: Callable, timeout_s: float, *args: Any, **kwargs: Any) -> Any:
    """function(*args, **kwargs), raising TimeoutError after timeout_s. The call runs in a daemon thread, so a
    tool that never returns is abandoned (it cannot hold the run or its exit)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = function(*args, **kwargs)
        except BaseException as err:  # handed to the caller, which turns it into an observation
            outcome["error"] = err

    thread = threading.Thread(target=target, daemon=True, name="lit_rlhf-tool")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def run_tool_call(call: ToolCall, tools: dict[str, Callable], timeout_s: float) -> tuple[str, bool]:
    """The result text the model sees for one call, and whether it failed (unknown tool, bad arguments, an
    exception, the timeout): a failure is an observation too, never an error of the run."""
    tool = tools.get(call.name)
    if tool is None:
        return f"error: unknown tool {call.name!r} (tools: {', '.join(sorted(tools)) or 'none'})", True
    try:
        if isinstance(call.arguments, dict):
            result = call_with_timeout(tool, timeout_s, **call.arguments)
        else:
            result = call_with_timeout(tool, timeout_s, *call.arguments)
    except Exception as err:
        message = (str(err).strip().splitlines() or [""])[0][:200]
        return f"error: {type(err).__name__}: {message}", True
    return str(result), False
