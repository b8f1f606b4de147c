"""Errors a user can fix: train.py prints them as one line, without a stack trace."""


class ConfigError(ValueError):
    """A bad setting: the message names the value and the fix."""


class UnavailableError(OSError):
    """A model or dataset that cannot be loaded (offline, missing path): the message says what to do."""
