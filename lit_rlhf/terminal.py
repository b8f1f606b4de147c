"""Text from datasets, models, checkpoints and servers, shown on a terminal as text.

Such text is untrusted: an ANSI escape sequence in a prompt could clear the screen or retitle the
window, a bidirectional override could reorder what the reader sees, and `[/]` is Rich markup. Every
place that prints user text goes through `printable` (control characters escaped as `\\x1b`, `\\u202e`)
and a `plain_console` (no markup, no emoji codes, no highlighting).
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.text import Text

# C0 controls but tab and newline, DEL, C1 controls, and Unicode's bidirectional and zero-width formatting
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
NEWLINES = re.compile("[\n\t]")


def escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: Any, one_line: bool = False) -> str:
    """str(text) with every control character escaped; with one_line, newlines and tabs too."""
    escaped = CONTROL_CHARACTERS.sub(escape, str(text))
    return NEWLINES.sub(escape, escaped) if one_line else escaped


def as_text(text: Any) -> Text:
    """A Rich table cell that shows `text` as it is (never parsed as markup), control characters escaped."""
    return Text(printable(text))


def plain_console(**kwargs: Any) -> Console:
    """A Rich console that prints strings as they are: no markup, no :emoji: codes, no highlighting."""
    return Console(markup=False, emoji=False, highlight=False, **kwargs)
