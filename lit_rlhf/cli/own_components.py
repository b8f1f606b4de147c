"""A component of the user's own named on the command line with `<group>._target_=mymodule.Name` (a reward, a
teacher, a rollout engine): it replaces the group's own class, so the group file's settings, written for that class,
must not all reach it."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from lit_rlhf.errors import ConfigError
from lit_rlhf.lazy_exports import current_path

CONFIG_DIR = Path(__file__).resolve().parents[1] / "conf"  # the package's own config groups
REWARD_MODEL_TARGET = "lit_rlhf.rewards.SequenceClassifierReward"
NAMED_REWARDS = "lit_rlhf.rewards.WeightedSum"  # what the reward group's files build
GROUP_KEYS = ("_target_", "rewards", "weights", "concurrent")
OWN_CLASS_GROUPS = ("teacher", "rollout")  # groups whose files build one object of a class the user may replace


def imported_target(key: str, target: str) -> Any:
    """The object `<key>=<target>` names, or the one-line error for one that cannot be imported."""
    from hydra.utils import get_object

    try:
        return get_object(target)
    except Exception as err:
        raise ConfigError(f"{key}={target!r} cannot be imported; check its spelling and that its module is "
                          f"importable (on PYTHONPATH, e.g. PYTHONPATH=. python train.py ...).") from err


def your_own_reward(cfg: DictConfig) -> None:
    """`reward._target_=mymodule.my_reward` on the command line makes that callable the reward, alone: a function
    is used as it is, a class is built (with the reward's other keys as arguments). Without this the target would
    replace the group's WeightedSum and be called with its `rewards` and `weights`."""
    reward = cfg.get("reward")
    target = reward.get("_target_") if reward is not None else None
    if target is None or current_path(str(target)) in (NAMED_REWARDS, REWARD_MODEL_TARGET) or "rewards" not in reward:
        return
    found = imported_target("reward._target_", target)
    if not callable(found):
        raise ConfigError(f"reward._target_={target!r} is not callable; name a function (prompts, completions, "
                          f"**columns) -> scores, or a class whose instances are.")
    name = target.rsplit(".", 1)[-1]
    arguments = {k: v for k, v in OmegaConf.to_container(reward).items() if k not in GROUP_KEYS}
    own = {"_target_": target, **({"_partial_": True} if not isinstance(found, type) else arguments)}
    with open_dict(cfg):
        cfg.reward = {"_target_": NAMED_REWARDS, "rewards": {name: own}, "weights": {name: 1.0}, "concurrent": False}


def group_files(group: str) -> list[dict[str, Any]]:
    """The group's option files (conf/<group>/*.yaml), unresolved."""
    return [OmegaConf.to_container(OmegaConf.load(path)) or {} for path in sorted((CONFIG_DIR / group).glob("*.yaml"))]


def your_own_class(cfg: DictConfig, group: str) -> None:
    """`teacher._target_=my_teachers.MyTeacher` (or `rollout._target_=...`) on the command line: the class is built
    with the settings its constructor takes. Of the group's settings it does not take, those of the group's own files
    (the causal_lm teacher's name_or_path, the hf engine's compile_mode, ...) are left out, and one typed on the command
    line for it (+teacher.url=...) is a one-line error; a constructor with **kwargs takes them all."""
    node = cfg.get(group)
    target = node.get("_target_") if isinstance(node, DictConfig) else None
    files = group_files(group)
    if target is None or current_path(str(target)) in {current_path(str(f.get("_target_"))) for f in files}:
        return
    found = imported_target(f"{group}._target_", target)
    if not isinstance(found, type):
        raise ConfigError(f"{group}._target_={target!r} is not a class; name the class whose instances are the "
                          f"{group} (docs/extending.md).")
    parameters = inspect.signature(found).parameters.values()
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    group_keys = {key for f in files for key in f}
    settings = OmegaConf.to_container(node, resolve=False)  # interpolations (${algo.x}) stay as they are
    for key in settings:
        if not key.startswith("_") and key not in group_keys and key not in names and not takes_any:
            taken = f"it takes {', '.join(names)}" if names else "it takes no arguments"
            raise ConfigError(f"{group}.{key} is not an argument of {target} ({taken}); remove it, or add it to "
                              f"its constructor.")
    own = {key: value for key, value in settings.items() if key.startswith("_") or key in names or takes_any}
    with open_dict(cfg):
        cfg[group] = own


def your_own_classes(cfg: DictConfig) -> None:
    for group in OWN_CLASS_GROUPS:
        your_own_class(cfg, group)
