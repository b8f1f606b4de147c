"""Tools: plain Python callables an episode's model may call, their JSON schemas (the form transformers' chat
templates take, from type hints and a Google-style docstring), and calling one without letting it stop the run."""

from __future__ import annotations

import asyncio
import inspect
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


MAX_ABANDONED_CALLS = 32  # calls past their timeout still running in the background; no new one starts beyond
_abandoned: list[threading.Thread] = []
_abandoned_lock = threading.Lock()


class ToolFailure(Exception):
    """What a tool (or step()) raised, any BaseException included: SystemExit or KeyboardInterrupt from a tool is the
    tool's failure, shown to the model, never the end of the run."""

    def __init__(self, error: BaseException):
        super().__init__(str_or_type(error))
        self.error = error


def str_or_type(value: Any) -> str:
    """str(value), or a description when its __str__ raises (a tool's result is untrusted)."""
    try:
        return str(value)
    except Exception as err:
        return f"<a {type(value).__name__} whose str() raised {type(err).__name__}>"


def awaited(value: Any) -> Any:
    """value, or what it resolves to when it is awaitable (an `async def` tool or step() is awaited on an event loop
    of the calling thread's own)."""
    if not inspect.isawaitable(value):
        return value

    async def wait() -> Any:
        return await value

    return asyncio.run(wait())


def abandoned_calls() -> int:
    """Tool calls abandoned at their timeout that are still running."""
    with _abandoned_lock:
        _abandoned[:] = [thread for thread in _abandoned if thread.is_alive()]
        return len(_abandoned)


def call_with_timeout(function: Callable, timeout_s: float, *args: Any, **kwargs: Any) -> Any:
    """function(*args, **kwargs), raising TimeoutError after timeout_s and ToolFailure for anything it raised. The
    call runs in a daemon thread, so a tool that never returns is abandoned (it cannot hold the run or its exit);
    at most MAX_ABANDONED_CALLS abandoned calls run at once (beyond, a call is refused, not started)."""
    if abandoned_calls() >= MAX_ABANDONED_CALLS:
        raise TimeoutError(f"not started: {MAX_ABANDONED_CALLS} earlier calls are still running past their timeout")
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
        with _abandoned_lock:
            _abandoned.append(thread)
        raise TimeoutError(f"no answer within {round(timeout_s, 2):g} s")
    if "error" in outcome:
        raise ToolFailure(outcome["error"])
    return outcome.get("value")


def failure_text(err: BaseException) -> str:
    """`error: Type: first line of the message` (the text the model sees for a failed call)."""
    error = err.error if isinstance(err, ToolFailure) else err
    message = (str_or_type(error).strip().splitlines() or [""])[0][:200]
    return f"error: {type(error).__name__}: {message}"


def run_tool_call(call: ToolCall, tools: dict[str, Callable], timeout_s: float) -> tuple[str, bool]:
    """The result text the model sees for one call, and whether it failed (unknown tool, bad arguments, an
    exception, the timeout, a result that cannot be shown): a failure is an observation too, never an error of the
    run."""
    tool = tools.get(call.name)
    if tool is None:
        return f"error: unknown tool {call.name!r} (tools: {', '.join(sorted(tools)) or 'none'})", True
    args, kwargs = ((), call.arguments) if isinstance(call.arguments, dict) else (call.arguments, {})
    try:  # the result is made text in the call's thread too: its __str__ is the tool's code
        return call_with_timeout(lambda: str(awaited(tool(*args, **kwargs))), timeout_s), False
    except Exception as err:
        return failure_text(err), True
