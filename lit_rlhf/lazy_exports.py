"""A package's names loaded on first use (PEP 562): a process that imports one of lit_rlhf's modules (a vLLM
engine's worker, a rank started by multiprocessing) does not pay for Lightning and the modules it does not use, and
no import order between the packages matters."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """The package's `__getattr__` and `__dir__` for `exports` ({name: module that defines it})."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
