"""Errors a user can fix: train.py prints them as one line, without a stack trace."""


class ConfigError(ValueError):
    """A bad setting: the message names the value and the fix."""


class UnavailableError(OSError):
    """A model or dataset that cannot be loaded (offline, missing path): the message says what to do."""


# Exit codes of train.py, evaluate.py, python -m lit_rlhf.export and python -m lit_rlhf.plot.
EXIT_USER_ERROR = 2    # a mistake the user can fix: one line `error: ...` on stderr, no traceback
EXIT_SIGTERM = 143     # stopped by SIGTERM after a complete RL step (a checkpoint was written)


def exit_with_user_error(err: BaseException) -> None:
    import sys

    print(f"error: {err}", file=sys.stderr, flush=True)
    sys.exit(EXIT_USER_ERROR)
