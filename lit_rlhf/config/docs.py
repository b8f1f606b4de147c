"""Markdown tables of the settings, from the dataclasses' own field docs (docs/configuration.md embeds them;
`python scripts/settings_tables.py` rewrites them, and a test fails when they drift)."""

from dataclasses import MISSING, fields, is_dataclass
from typing import Any


def render_default(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return "required" if value == "???" else f"`{value}`"
    if is_dataclass(value):
        return ", ".join(f"{f.name}={render_default(getattr(value, f.name)).strip('`')}" for f in fields(value))
    return str(value)


def default_of(f) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else "???"  # no default: required


def settings_docstring(cls: type, prefix: str) -> str:
    """The settings a module takes as keyword arguments (**settings), for its docstring: one line per field of the
    dataclass cls, with its default and meaning (help(RLOOModule) lists them)."""
    lines = [f"Settings (keyword arguments, the fields of {cls.__name__}; on the command line {prefix}.<name>):", ""]
    for f in fields(cls):
        lines.append(f"    {f.name} = {render_default(default_of(f)).strip('`')}: {f.metadata.get('doc', '')}")
    return "\n".join(lines)


def settings_table(cls: type, prefix: str, only: set[str] | None = None) -> str:
    """| key | default | meaning | for the fields of cls (or those in `only`)."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for f in fields(cls):
        if only is None or f.name in only:
            rows.append(f"| `{prefix}.{f.name}` | {render_default(default_of(f))} | {f.metadata.get('doc', '')} |")
    return "\n".join(rows)


def own_fields(cls: type, base: type) -> set[str]:
    """Fields cls adds to base or whose default it changes."""
    inherited = {f.name: default_of(f) for f in fields(base)}
    return {f.name for f in fields(cls) if f.name not in inherited or inherited[f.name] != default_of(f)}
