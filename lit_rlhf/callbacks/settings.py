"""The callbacks' count, fraction and true-or-false settings, checked when a callback is built (before the fit),
each in one line that names its key under `callbacks.` (the Hydra config's name; in Python, the callback's argument
of that name)."""

from __future__ import annotations

import math
from typing import Any

from lit_rlhf.config.validation import check_flag as check_setting_flag
from lit_rlhf.errors import ConfigError


def check_count(key: str, value: Any, least: int, note: str = "") -> None:
    """callbacks.<key> is a whole number >= least."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ConfigError(f"callbacks.{key}={value!r} must be a whole number >= {least}{' ' + note if note else ''}.")


def check_flag(key: str, value: Any) -> None:
    """callbacks.<key> is true or false (a string such as "false" would read as true)."""
    check_setting_flag(f"callbacks.{key}", value)


def check_fraction(key: str, value: Any, example: str) -> None:
    """callbacks.<key> lies strictly between 0 and 1."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < 1:
        raise ConfigError(f"callbacks.{key}={value!r} must be a number between 0 and 1 (e.g. {example}).")


def check_threshold(key: str, value: Any, least: float, strictly: bool = False, optional: bool = False,
                    note: str = "") -> None:
    """callbacks.<key> is a number (not NaN) at or above least (strictly above with strictly=True); null too where
    optional."""
    if value is None and optional:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value) or (
            value <= least if strictly else value < least):
        bound = f"> {least:g}" if strictly else f">= {least:g}"
        raise ConfigError(f"callbacks.{key}={value!r} must be a number {bound}{' or null' if optional else ''}"
                          f"{' ' + note if note else ''}.")
