"""Errors a user can fix: train.py prints them as one line, without a stack trace."""

import difflib
import errno
import os
from contextlib import contextmanager
from pathlib import Path


class ConfigError(ValueError):
    """A bad setting: the message names the value and the fix."""


def empty_value_line(typed: str, fix: str) -> str:
    """The line for a value typed empty (`ckpt_path=$CKPT` with the variable unset); typed: as the user wrote it."""
    return f"{typed} is empty (a shell variable that is not set?); {fix}."


class UnavailableError(OSError):
    """A model or dataset that cannot be loaded (offline, missing path): the message says what to do."""


# Exit codes of train.py, evaluate.py, python -m lit_rlhf.export and python -m lit_rlhf.plot.
EXIT_USER_ERROR = 2    # a mistake the user can fix: one line `error: ...` on stderr, no traceback
EXIT_SIGTERM = 143     # stopped by SIGTERM after a complete RL step (a checkpoint was written)
EXIT_SIGINT = 130      # stopped by Ctrl-C


def said(signal_name: str) -> str:
    """How the apps' lines name a signal: Ctrl-C for SIGINT."""
    return "Ctrl-C" if signal_name == "SIGINT" else signal_name


# HYDRA_FULL_ERROR=1 as the user gave it: the one-line errors follow the traceback that led to them. The Hydra apps set
# HYDRA_FULL_ERROR for Hydra's own use, so they keep the user's choice here (inherited by the ranks they start).
TRACEBACKS_ASKED = "LIT_RLHF_TRACEBACKS"


def remember_traceback_choice() -> None:
    """Called before an app sets HYDRA_FULL_ERROR itself; a rank started by the app finds its parent's answer."""
    import os

    os.environ.setdefault(TRACEBACKS_ASKED, "1" if os.environ.get("HYDRA_FULL_ERROR") == "1" else "0")


def tracebacks_asked() -> bool:
    """Whether the user asked for tracebacks (HYDRA_FULL_ERROR=1 before the app set it)."""
    import os

    return os.environ.get(TRACEBACKS_ASKED, os.environ.get("HYDRA_FULL_ERROR")) == "1"


def exit_with_user_error(err: BaseException | str, cause: BaseException | None = None) -> None:
    """`error: <one line>` on stderr and exit code 2; with HYDRA_FULL_ERROR=1 (the user's), the traceback of `cause`
    (else of `err`) first, every control character in it escaped."""
    import sys
    import traceback

    from lit_rlhf.terminal import printable

    shown = cause if cause is not None else err
    if tracebacks_asked() and isinstance(shown, BaseException) and shown.__traceback__ is not None:
        print(printable("".join(traceback.format_exception(shown))), file=sys.stderr, end="", flush=True)
    print(f"error: {printable(err, one_line=True)}", file=sys.stderr, flush=True)
    sys.exit(EXIT_USER_ERROR)


# One algorithm's name for a setting that another algorithm calls otherwise (samples per prompt, KL coefficient).
SYNONYMS = {
    "num_generations": ("samples_per_prompt", "rloo_k"), "rloo_k": ("num_generations", "samples_per_prompt"),
    "samples_per_prompt": ("num_generations", "rloo_k"), "beta": ("kl_coef",), "num_iterations": ("num_ppo_epochs",),
}


def nearest(key: str, valid: tuple[str, ...] | list[str], otherwise: str | None = None, noun: str = "keys") -> str:
    """' (did you mean X?)' for the closest valid key (or a synonym it has here), else ' (otherwise)' or the list of
    valid keys (options, metrics: noun)."""
    synonym = next((s for s in SYNONYMS.get(key.rpartition(".")[2], ()) if s in valid), None)
    if synonym is not None:
        return f" (did you mean {synonym!r}? this algorithm's name for it)"
    close = difflib.get_close_matches(key, valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" ({otherwise or f'valid {noun}: ' + ', '.join(valid)})"


def os_error_message(err: BaseException) -> str | None:
    """The one-line message for an OS error a user can fix (a full disk, a read-only or forbidden target), else None."""
    if not isinstance(err, OSError):
        return None
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"no space left writing {err.filename or 'a file'} ({err.strerror}); free some space or write to "
                f"another disk (hydra.run.dir=...); the checkpoints already written are complete.")
    if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and err.filename:
        return (f"cannot write {err.filename} ({err.strerror}); point it at a directory you can write to "
                f"(the run's checkpoints so far are complete).")
    return None


# How libraries that write files (torch, safetensors) report an OS error in an exception type of their own.
OS_ERROR_TEXTS = {"No space left on device": errno.ENOSPC, "Read-only file system": errno.EROFS,
                  "Permission denied": errno.EACCES, "Disk quota exceeded": errno.EDQUOT}


@contextmanager
def writing(path: str | Path):
    """Errors of writing into `path` as OSErrors that name it: a full disk, a read-only or forbidden target."""
    try:
        yield
    except OSError as err:
        if err.filename is None and err.errno is not None:
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise
    except Exception as err:
        code = next((code for text, code in OS_ERROR_TEXTS.items() if text in str(err)), None)
        if code is None and disk_full(path):  # torch reports a short write on a full disk as a position mismatch
            code = errno.ENOSPC
        if code is None:
            raise
        raise OSError(code, os.strerror(code), str(path)) from err


def disk_full(path: str | Path, below_bytes: int = 2**20) -> bool:
    """Whether the filesystem holding path (or its nearest existing parent) has less than below_bytes free."""
    existing = next((p for p in (Path(path), *Path(path).absolute().parents) if p.exists()), None)
    if existing is None:
        return False
    stats = os.statvfs(existing)
    return stats.f_bavail * stats.f_frsize < below_bytes
