"""A package's names loaded on first use (PEP 562): a process that imports one of lit_rlhf's modules (a vLLM
engine's worker, a rank started by multiprocessing) does not pay for Lightning and the modules it does not use, and
no import order between the packages matters.

MOVED lists the names that left a package, each still reachable at its old path (with a FutureWarning) for one
release, so that code and saved configs (a run directory's `_target_`s) written against the previous layout work."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable

# {old module: {name: the package it lives in now}}; the old paths go in the next release.
REWARDS = ("Reward", "SequenceClassifierReward", "VaderSentiment", "WeightedSum", "call_reward", "load_reward",
           "reward_name")
MOVED: dict[str, dict[str, str]] = {
    "lit_rlhf.models": dict.fromkeys(REWARDS, "lit_rlhf.rewards"),
    "lit_rlhf.models.teacher": dict.fromkeys(("CausalLMTeacher", "RoutedTeachers", "Teacher"), "lit_rlhf.teachers"),
    "lit_rlhf.remote": {**dict.fromkeys(("HTTPReward", "LLMJudge", "LLMPairwiseJudge", "parse_judgement",
                                         "parse_verdict"), "lit_rlhf.rewards"),
                        **dict.fromkeys(("ServedTeacher", "TeacherServiceError"), "lit_rlhf.teachers")},
    "lit_rlhf.remote.teacher": dict.fromkeys(("ServedTeacher", "TeacherServiceError"), "lit_rlhf.teachers"),
    "lit_rlhf.algos": dict.fromkeys(("KLController", "RewardNormalizer", "Rollout", "ScoreContext", "ScoreTransform",
                                     "adaptive_kl_update"), "lit_rlhf.step"),
}


def current_path(qualified_name: str) -> str:
    """Where `module.Name` lives now: its new path when MOVED lists it, else itself."""
    module, _, name = qualified_name.rpartition(".")
    package = MOVED.get(module, {}).get(name)
    return f"{package}.{name}" if package else qualified_name


def lazy_exports(package: str, exports: dict[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """The package's `__getattr__` and `__dir__` for `exports` ({name: module that defines it}) and for the names
    MOVED lists as having left it."""
    moved = MOVED.get(package, {})

    def __getattr__(name: str):
        if name in moved:  # warned once: the value is then kept in the namespace, as an export's is
            warnings.warn(f"{package}.{name} moved to {moved[name]}.{name}; import it from there (the old path goes "
                          f"in the next release).", FutureWarning, stacklevel=2)
        elif name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(moved.get(name) or exports[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports, *moved})

    return __getattr__, __dir__
