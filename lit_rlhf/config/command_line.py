"""Overrides the apps print for the user to paste (a resume command, the next app to run): each one a single shell
word that Hydra's override grammar reads back as the value it names. A folder's path may hold what that grammar
reads otherwise (`My Drive (2024)`, `a,b`, a non-ASCII letter, `${`), and a checkpoint's or a folder's own text is
no command: such a value is quoted twice, for Hydra, then for the shell."""

from __future__ import annotations

import re
import shlex
from typing import Any


def override(key: str, value: Any) -> str:
    """`key=value` as one shell word that Hydra reads back as str(value): bare where the shell leaves it whole, in
    double quotes where they suffice (`"key='My Drive (2024)'"`, as Hydra's docs write it), else in shlex's quotes."""
    word = f"{key}={hydra_value(str(value))}"
    if shlex.quote(word) == word:
        return word
    if not re.search(r'["\\$`!]', word):  # nothing a double-quoted word expands (! is bash's history)
        return f'"{word}"'
    return shlex.quote(word)


def hydra_value(value: str) -> str:
    """`value` as it stands where Hydra reads it back as this string, else in single quotes with Hydra's escapes."""
    if reads_back_plain(value):
        return value
    # backslashes are literal inside Hydra's quotes except where they run into a quote, the closing quote or `${`
    escaped = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
    escaped = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", escaped)  # a literal ${, not an interpolation
    escaped = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, escaped)
    return f"'{escaped}'"


def reads_back_plain(value: str) -> bool:
    """Whether Hydra reads `key=value`, unquoted, as this very string (not a number, a list, a sweep or an error)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if not value or value != value.strip() or "${" in value or "\\" in value:
        return False
    try:
        parsed = OverridesParser.create().parse_override(f"key={value}").value()
    except HydraException:
        return False
    return isinstance(parsed, str) and parsed == value
