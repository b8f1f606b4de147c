"""What a checkpoint may name as code: lit_rlhf's registered classes, matched by name and never imported or
followed attribute by attribute on the checkpoint's say.

A checkpoint is untrusted input. Its saved reward, task-metric and environment configs carry `_target_`s that Hydra
would resolve by importing a module and following attributes (`lit_rlhf.export.shutil.copyfile` reaches
`shutil.copyfile`), so a prefix check is no check. Here a target is accepted only when it is one of the names under
which lit_rlhf exposes a class registered for that group; anything else is one line before anything is created."""

from __future__ import annotations

import sys
from typing import Any

from lit_rlhf.errors import ConfigError
from lit_rlhf.lazy_exports import MOVED


def registered_classes() -> dict[str, tuple[type, ...]]:
    """Per config group, the classes a checkpoint may name (lit_rlhf's own rewards, gold rewards, task metrics,
    environments)."""
    from lit_rlhf.envs import EnvSpec
    from lit_rlhf.envs.reward import EnvironmentReward
    from lit_rlhf.rewards import HTTPReward, LLMJudge, SequenceClassifierReward, VaderSentiment, WeightedSum
    from lit_rlhf.tasks.arithmetic import ArithmeticCorrect, ArithmeticFormat
    from lit_rlhf.tasks.calculator import CalculatorEnvironment, NoToolEnvironment
    from lit_rlhf.tasks.math import MathVerifyMatch, MathVerifyReward
    from lit_rlhf.tasks.metrics import ExactMatch

    rewards = (WeightedSum, VaderSentiment, SequenceClassifierReward, ArithmeticCorrect, ArithmeticFormat,
               MathVerifyReward, EnvironmentReward, HTTPReward, LLMJudge)
    return {
        "reward": rewards,
        "gold": rewards,
        "task_metrics": (ExactMatch, MathVerifyMatch),
        "env": (EnvSpec, CalculatorEnvironment, NoToolEnvironment),
    }


def public_names(classes: tuple[type, ...]) -> dict[str, type]:
    """Every `module.Class` under which an imported lit_rlhf module exposes one of `classes` (the defining module and
    the packages that re-export it), e.g. lit_rlhf.rewards.WeightedSum and lit_rlhf.rewards.weighted_sum.WeightedSum,
    and the old paths of those that moved (lit_rlhf.lazy_exports.MOVED: lit_rlhf.models.WeightedSum, which the
    checkpoints of earlier releases name)."""
    names = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "lit_rlhf" or module_name.startswith("lit_rlhf.")):
            continue
        for cls in classes:
            if vars(module).get(cls.__name__) is cls:
                names[f"{module_name}.{cls.__name__}"] = cls
    for old_module, moved in MOVED.items():
        for name, package in moved.items():
            if f"{package}.{name}" in names:
                names[f"{old_module}.{name}"] = names[f"{package}.{name}"]
    return names


def code_targets(config: Any) -> list[str]:
    """Every `_target_` in a config tree."""
    if isinstance(config, dict):
        own = [str(config["_target_"])] if "_target_" in config else []
        return own + [t for value in config.values() for t in code_targets(value)]
    if isinstance(config, list):
        return [t for value in config for t in code_targets(value)]
    return []


# How a user's own class is given back on the command line, where it is not `<group>._target_`: an environment's
# class is the factory of the EnvSpec an env group builds (docs/environments.md).
OWN_CLASS_ON_THE_COMMAND_LINE = {"env": "env=... (your own class: env=calculator env.factory._target_=<module.Class> "
                                        "with the run's env settings)"}


def only_registered_targets(config: Any, group: str) -> Any:
    """`config` (a checkpoint's `group` settings) when every `_target_` in it names a class registered for the group;
    otherwise one line saying how to choose the code on the command line."""
    allowed = public_names(registered_classes().get(group, ()))
    for target in code_targets(config):
        if target not in allowed:
            raise ConfigError(f"the checkpoint's {group} names {target[:200]!r}, which is not one of lit_rlhf's "
                              f"{group} classes, and a checkpoint never chooses code to run; pass "
                              f"{OWN_CLASS_ON_THE_COMMAND_LINE.get(group, f'{group}=... (or {group}._target_=...)')} "
                              f"on the command line.")
    return config


def rlhf_module_class(qualified_name: Any, base: type) -> type:
    """The subclass of `base` (RLHFModule) a checkpoint's rlhf_state.algo names: one of lit_rlhf's algorithms, or a
    subclass defined in a module the user has already imported (a checkpoint never makes us import, or reach through
    a module's attributes to, anything else)."""
    name = str(qualified_name)
    module_name, _, class_name = name.rpartition(".")
    module = sys.modules.get(module_name)
    cls = vars(module).get(class_name) if module is not None else None
    defined_there = isinstance(cls, type) and cls.__module__ == module_name
    if not (defined_there and issubclass(cls, base)):
        known = public_names(tuple(all_subclasses(base)))
        if name in known:  # lit_rlhf's own algorithms under a package's name (lit_rlhf.algos.GRPOModule)
            return known[name]
        raise ConfigError(f"the checkpoint names algo {name[:200]!r}, which is not an {base.__name__} class "
                          f"lit_rlhf or your program defines; give a checkpoint written by train.py (or import the "
                          f"module that defines its algorithm before loading it).")
    return cls


def all_subclasses(cls: type) -> set[type]:
    return {sub for direct in cls.__subclasses__() for sub in (direct, *all_subclasses(direct))}
