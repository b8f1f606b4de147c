"""Text from datasets, models, checkpoints and servers, shown on a terminal as text.

Such text is untrusted: an ANSI escape sequence in a prompt could clear the screen or retitle the
window, a bidirectional override could reorder what the reader sees, and `[/]` is Rich markup. Every
place that prints user text goes through `printable` (control characters escaped as `\\x1b`, `\\u202e`)
and a `plain_console` (no markup, no emoji codes, no highlighting); what libraries print of it (log records, warnings,
uncaught exceptions) is escaped by the hooks `escape_what_libraries_print` installs.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import traceback
import warnings
from typing import Any

from rich.console import Console
from rich.text import Text

# C0 controls but tab and newline, DEL, C1 controls, and Unicode's bidirectional and zero-width formatting
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
NEWLINES = re.compile("[\n\t]")
# the password of a URL's userinfo (scheme://user:password@host): kept out of every line, log and saved config;
# Hydra writes a sweep job's overrides with its colons escaped (http\://user\:password@host)
URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*\\?://[^/@\s:'\"\\]*\\?:)[^/@\s'\"]+(?P<at>@)")
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what a shell exports
# the value of a token's setting (reward.auth_env=..., `api_key_env: ...`) as overrides and saved configs write it:
# one that is no variable name is likely the token itself, typed in its variable's place, and is masked as a password
TOKEN_SETTING = re.compile(r"(?P<head>\b(?:auth_env|api_key_env)(?:=|:[ \t]*)['\"]?)(?P<value>(?:\\.|[^\s'\",\\])+)")


def escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def without_passwords(text: str) -> str:
    """`text` with the password of every URL in it shown as *** (http://user:***@host), and so is a token typed
    as the value of an auth_env or api_key_env setting (reward.auth_env=***)."""
    return TOKEN_SETTING.sub(masked_token, URL_PASSWORD.sub(r"\g<head>***\g<at>", text))


def masked_token(match: re.Match) -> str:
    name = match["value"].rstrip(".;:)]}")  # a variable's name at the end of a sentence or in brackets is shown
    if VARIABLE_NAME.fullmatch(name) or name.startswith("<"):  # <...>: a line's placeholder (auth_env=<a variable>)
        return match.group()
    return f"{match['head']}***"


def config_without_passwords(config: Any) -> Any:
    """A plain config tree (dicts, lists, values) with every URL's password masked, for logs and saved configs."""
    if isinstance(config, dict):
        return {key: config_without_passwords(value) for key, value in config.items()}
    if isinstance(config, list):
        return [config_without_passwords(value) for value in config]
    return without_passwords(config) if isinstance(config, str) else config


def printable(text: Any, one_line: bool = False) -> str:
    """str(text) with every control character escaped (with one_line, newlines and tabs too) and URLs' passwords
    masked."""
    escaped = CONTROL_CHARACTERS.sub(escape, without_passwords(str(text)))
    return NEWLINES.sub(escape, escaped) if one_line else escaped


def clipped(text: Any, limit: int = 200) -> str:
    """str(text) on one line (each run of whitespace one space). Past `limit` characters it is cut at the last word
    boundary (inside a word only where that word is most of the text) and ends with " ...", so that a reader of an
    error line sees where a quoted message was cut."""
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit]
    if (space := cut.rfind(" ")) > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + " ..."


def clipped_first_line(text: Any, limit: int = 200, default: str = "") -> str:
    """The first line of str(text) (an error's message: a traceback or log may follow it), clipped at `limit`."""
    lines = str(text).strip().splitlines()
    return clipped(lines[0], limit) if lines else default


def as_text(text: Any) -> Text:
    """A Rich table cell that shows `text` as it is (never parsed as markup), control characters escaped."""
    return Text(printable(text))


FILE_WIDTH = 160  # the columns of tables written to a file (a log), where Rich would wrap them at 80


def plain_console(**kwargs: Any) -> Console:
    """A Rich console that prints strings as they are: no markup, no :emoji: codes, no highlighting. Its width is the
    terminal's; on a file (a log) it is $COLUMNS, else FILE_WIDTH, so that samples and metric names are not cut."""
    console = Console(markup=False, emoji=False, highlight=False, **kwargs)
    if "width" not in kwargs and not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = FILE_WIDTH
    return console


class EscapedLogRecord(logging.LogRecord):
    """A log record whose message is printable, whichever handler formats it (a library's own console, Hydra's)."""

    def getMessage(self) -> str:
        return printable(super().getMessage())


PLAIN_FORMATWARNING = warnings.formatwarning


def escaped_formatwarning(message, category, filename, lineno, line=None) -> str:
    return printable(PLAIN_FORMATWARNING(message, category, filename, lineno, line))


def escaped_excepthook(kind, value, tb) -> None:
    print(printable("".join(traceback.format_exception(kind, value, tb))), file=sys.stderr, end="", flush=True)


def escaped_thread_excepthook(args) -> None:
    if args.exc_type is SystemExit:  # as threading's own hook: a thread's sys.exit() is silent
        return
    name = args.thread.name if args.thread is not None else threading.get_ident()
    lines = traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)
    print(printable(f"Exception in thread {name}:\n{''.join(lines)}"), file=sys.stderr, end="", flush=True)


def escape_what_libraries_print() -> None:
    """Log records (transformers', Lightning's, Hydra's console and train.log), warnings and uncaught exceptions are
    printed with control characters escaped and URLs' passwords masked: their text may quote a model folder's
    config.json, a dataset or a server's reply, which the libraries print as it is. Called where an app starts; a hook
    another program installed (a debugger's, a record factory of its own) is left in place."""
    if logging.getLogRecordFactory() is logging.LogRecord:
        logging.setLogRecordFactory(EscapedLogRecord)
    if warnings.formatwarning is PLAIN_FORMATWARNING:
        warnings.formatwarning = escaped_formatwarning
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = escaped_excepthook
    if threading.excepthook is threading.__excepthook__:
        threading.excepthook = escaped_thread_excepthook
