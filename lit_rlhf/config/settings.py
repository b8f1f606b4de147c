"""Settings as typed dataclasses: one source of defaults for Python and the CLI, a one-line doc per field,
and one-line errors for unknown keys (with the nearest valid one)."""

from collections.abc import Callable
from dataclasses import MISSING, asdict, field, fields, is_dataclass
from typing import Any, TypeVar

from lit_rlhf.config.trl_names import python_hint
from lit_rlhf.errors import ConfigError, nearest

S = TypeVar("S")


def setting(default: Any = MISSING, doc: str = "", factory: Any = MISSING) -> Any:
    """A dataclass field with its one-line doc (rendered into docs/configuration.md)."""
    if factory is not MISSING:
        return field(default_factory=factory, metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


def field_names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def build(cls: type[S], values: dict[str, Any] | S | None, prefix: str,
          hint: Callable[[str], str] = python_hint) -> S:
    """cls(**values), refusing a key cls does not have: `{prefix}.{key} is not a setting (did you mean ...)`, where
    hint(key) names where a TRL setting of that name is set (by default, in Python) before the nearest valid key."""
    if values is None:
        values = {}
    if is_dataclass(values):
        values = asdict(values)
    if not isinstance(values, dict):
        raise ConfigError(f"{prefix}={repr(values)[:200]} must be a mapping of settings.")
    names = field_names(cls)
    for key in values:
        if key not in names:
            raise ConfigError(f"{prefix}.{key} is not a setting of {cls.__name__}{hint(key) or nearest(key, names)}.")
    return cls(**values)
