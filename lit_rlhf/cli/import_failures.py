"""Why a `_target_` cannot be imported, in the one line that names it. A module not on the path is a matter of
spelling or PYTHONPATH; a module that is there but fails as it imports (a syntax error, a dependency not installed,
an exception of its own) or lacks the name is fixed in that file, so the line says which of these it is."""

from __future__ import annotations

import importlib
from pathlib import Path

from hydra.errors import InstantiationException

from lit_rlhf.errors import nearest

PYTHONPATH_HINT = "importable (on PYTHONPATH, e.g. PYTHONPATH=. python train.py ...)"


def import_failure_line(key: str, target: str, err: BaseException, example: str = "") -> str:
    """`<key>=<target> cannot be imported` and why, from the error Hydra's locate raised (err, or its causes)."""
    cause, head = underlying(err), f"{key}={target!r} cannot be imported"
    module = target.rpartition(".")[0]
    if isinstance(cause, SyntaxError):
        where = f"{Path(cause.filename).name}, line {cause.lineno}" if cause.filename else "its module"
        return f"{head}: {where}: {cause.msg} ({type(cause).__name__}); fix that file."
    if isinstance(cause, ModuleNotFoundError) and cause.name == target and (names := names_in(module)) is not None:
        return f"{head}: module {module!r} has no {target.rpartition('.')[2]!r}{nearest_name(target, names)}."
    if isinstance(cause, ModuleNotFoundError) and cause.name and not is_prefix(cause.name, target):
        return (f"{head}: importing it needs the module {cause.name!r}, which is not installed here; install it, or "
                f"fix the import in {module or target!r}.")
    if isinstance(cause, AttributeError):
        return f"{head}: {cause}; check its spelling{example}."
    if cause is not None and not isinstance(cause, ImportError):  # the module's own code raised as it imported
        first = (str(cause).strip().splitlines() or [""])[0]
        return (f"{head}: importing {module or target!r} raised {type(cause).__name__}: {first}; fix that module "
                f"(HYDRA_FULL_ERROR=1 prints its traceback).")
    return f"{head}; check its spelling{example} and that its module is {PYTHONPATH_HINT}."


def underlying(err: BaseException | None) -> BaseException | None:
    """The error beneath Hydra's wrappers (InstantiationException, and the ImportError of `_locate`)."""
    while err is not None and (isinstance(err, InstantiationException) or (
            type(err) is ImportError and str(err).startswith("Error loading"))):
        err = err.__cause__
    return err


def is_prefix(module: str, target: str) -> bool:
    return target == module or target.startswith(module + ".")


def names_in(module: str) -> list[str] | None:
    """The public names of a module that imports (None for one that does not, or no module)."""
    try:
        return [n for n in dir(importlib.import_module(module)) if not n.startswith("_")] if module else None
    except Exception:  # a courtesy: never fail while explaining a failure
        return None


def nearest_name(target: str, names: list[str]) -> str:
    more = ", ..." if len(names) > 12 else ""
    return nearest(target.rpartition(".")[2], names, otherwise="its names: " + ", ".join(names[:12]) + more)
