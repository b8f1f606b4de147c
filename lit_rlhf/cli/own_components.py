"""A component of the user's own named on the command line with `<key>._target_=mymodule.Name` (a reward, a
teacher, a rollout engine, evaluate.py's judge): it replaces the library's class, so the settings the config files
wrote for that class must not all reach it."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from lit_rlhf.cli.import_failures import import_failure_line
from lit_rlhf.cli.overrides import command_line_keys
from lit_rlhf.errors import ConfigError
from lit_rlhf.lazy_exports import current_path

CONFIG_DIR = Path(__file__).resolve().parents[1] / "conf"  # the package's own config groups
REWARD_MODEL_TARGET = "lit_rlhf.rewards.SequenceClassifierReward"
NAMED_REWARDS = "lit_rlhf.rewards.WeightedSum"  # what the reward group's files build
GROUP_KEYS = ("_target_", "rewards", "weights", "concurrent")
OWN_CLASS_GROUPS = ("teacher", "rollout")  # groups whose files build one object of a class the user may replace


def imported_target(key: str, target: str) -> Any:
    """The object `<key>=<target>` names, or the one-line error for one that cannot be imported."""
    import logging

    from hydra.utils import get_object

    hydra_log = logging.getLogger("hydra.utils")  # it logs the failure in lines of its own: ours is the one line
    level = hydra_log.level
    hydra_log.setLevel(logging.CRITICAL)
    try:
        return get_object(target)
    except Exception as err:
        raise ConfigError(import_failure_line(key, target, err)) from err
    finally:
        hydra_log.setLevel(level)


def your_own_reward(cfg: DictConfig, key: str = "reward") -> None:
    """`reward._target_=mymodule.my_reward` (or `gold._target_=...`) on the command line makes that callable the
    reward, alone: a function is used as it is, a class is built (with the reward's other keys as arguments). Without
    this the target would replace the group's WeightedSum and be called with its `rewards` and `weights` (or, from
    gold=none, called with nothing)."""
    reward = cfg.get(key)
    target = reward.get("_target_") if isinstance(reward, DictConfig) else None
    if isinstance(target, ListConfig):
        return your_own_rewards(cfg, key, [str(t) for t in target])
    if target is None or current_path(str(target)) in (NAMED_REWARDS, REWARD_MODEL_TARGET):
        return
    if "rewards" not in reward and str(target).startswith("lit_rlhf."):  # a reward file of its own (http, llm_judge)
        return
    found = imported_target(f"{key}._target_", target)
    if not callable(found):
        raise ConfigError(f"{key}._target_={target!r} is not callable; name a function (prompts, completions, "
                          f"**columns) -> scores, or a class whose instances are.")
    name = target.rsplit(".", 1)[-1]
    arguments = {k: v for k, v in OmegaConf.to_container(reward).items() if k not in GROUP_KEYS}
    own = {"_target_": target, **({"_partial_": True} if not isinstance(found, type) else arguments)}
    with open_dict(cfg):
        cfg[key] = {"_target_": NAMED_REWARDS, "rewards": {name: own}, "weights": {name: 1.0}, "concurrent": False}


def your_own_rewards(cfg: DictConfig, key: str, targets: list[str]) -> None:
    """`reward._target_=[myrewards.format,myrewards.accuracy]` (TRL's reward_funcs): the weighted sum of these rewards,
    each named after its function or class (built without arguments), weighted 1 unless typed
    (`+reward.weights.format=0.5`, TRL's reward_weights); the group file's rewards and weights are left out."""
    reward = cfg[key]
    names = [target.rsplit(".", 1)[-1] for target in targets]
    if not targets or len(set(names)) < len(names):
        raise ConfigError(f"{key}._target_={targets} must name one or more rewards, each once (they are logged by "
                          f"name, as rewards/<name>/mean).")
    arguments = [k for k in reward if k not in GROUP_KEYS]
    if arguments:
        raise ConfigError(f"{key}.{arguments[0]} is an argument, and {key}._target_ names several rewards; give each "
                          f"its arguments in a class's defaults, or name one reward.")
    rewards = {}
    for name, target in zip(names, targets, strict=True):
        found = imported_target(f"{key}._target_", target)
        if not callable(found):
            raise ConfigError(f"{key}._target_ names {target!r}, which is not callable; name functions (prompts, "
                              f"completions, **columns) -> scores, or classes whose instances are.")
        rewards[name] = {"_target_": target, **({} if isinstance(found, type) else {"_partial_": True})}
    keys = command_line_keys()
    typed = {k.split(".")[2] for k in keys if k.startswith(f"{key}.weights.") and k.count(".") == 2}
    if f"{key}.weights" in keys:  # reward.weights={format: 0.2, accuracy: 1}: all of them typed
        typed |= {str(name) for name in reward.weights}
    unknown = sorted(typed - set(names))
    if unknown:
        raise ConfigError(f"{key}.weights.{unknown[0]} weighs no reward of {key}._target_ (its rewards: "
                          f"{', '.join(names)}); weigh one of those.")
    weights = {name: reward.weights[name] if name in typed else 1.0 for name in names}
    with open_dict(cfg):
        cfg[key] = {"_target_": NAMED_REWARDS, "rewards": rewards, "weights": weights,
                    "concurrent": reward.get("concurrent", False)}


def group_files(group: str) -> list[dict[str, Any]]:
    """The group's option files (conf/<group>/*.yaml), unresolved."""
    return [OmegaConf.to_container(OmegaConf.load(path)) or {} for path in sorted((CONFIG_DIR / group).glob("*.yaml"))]


def evaluation_judge() -> list[dict[str, Any]]:
    """evaluate.py's judge setting as its config file writes it (the RewardJudge's)."""
    return [OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "evaluate.yaml").judge)]


def your_own_class(cfg: DictConfig, key: str, written_for: list[dict[str, Any]] | None = None,
                   typed: list[str] | None = None) -> None:
    """`teacher._target_=my_teachers.MyTeacher` (or `rollout._target_=...`, evaluate.py's `judge._target_=...`) on the
    command line: the class is built with the settings its constructor names. Of the others, those the config files
    wrote for the library's classes (`written_for`: by default the group's option files; the causal_lm teacher's
    name_or_path, the hf engine's compile_mode, ...) are left out unless typed (`typed`: the command line's keys), and
    one typed (+teacher.scale=2, rollout.compile_mode=default) reaches a constructor with **kwargs and is a one-line
    error for any other: a setting the user typed is never dropped without a word."""
    node = cfg.get(key)
    if node is not None and not isinstance(node, DictConfig):  # evaluate.py's judge=nope: Hydra's traceback
        raise ConfigError(f"{key}={node!r}: {key} is a mapping of settings, the class to build (_target_) and its "
                          f"arguments; set them one by one ({key}.<key>=<value>) or give it whole, quoted: "
                          f"'{key}={{_target_: <a class>, <key>: <value>}}'; null: the default.")
    target = node.get("_target_") if isinstance(node, DictConfig) else None
    written_for = group_files(key) if written_for is None else written_for
    if target is None or current_path(str(target)) in {current_path(str(c.get("_target_"))) for c in written_for}:
        return
    found = imported_target(f"{key}._target_", target)
    if not isinstance(found, type):
        raise ConfigError(f"{key}._target_={target!r} is not a class; name the class whose instances are the "
                          f"{key} (docs/extending.md).")
    names, takes_any = constructor_arguments(found)
    typed_names = {k.split(".")[1] for k in (command_line_keys() if typed is None else typed)
                   if k.split(".")[0] == key and "." in k}
    written = {name for c in written_for for name in c} - typed_names  # the file's, not the user's
    settings = OmegaConf.to_container(node, resolve=False)  # interpolations (${algo.x}) stay as they are
    for name in settings:
        if not name.startswith("_") and name not in written and name not in names and not takes_any:
            taken = f"it takes {', '.join(names)}" if names else "it takes no arguments"
            raise ConfigError(f"{key}.{name} is not an argument of {target} ({taken}); remove it, or add it to "
                              f"its constructor.")
    own = {name: value for name, value in settings.items()
           if name.startswith("_") or name in names or (takes_any and name not in written)}
    with open_dict(cfg):
        cfg[key] = own


def constructor_arguments(cls: type) -> tuple[list[str], bool]:
    """The argument names cls's constructor takes, and whether it takes any other (**kwargs). A constructor with
    **kwargs may pass them to its base classes' (an HFEngine subclass): their argument names count as its own."""
    names, takes_any = [], False
    for base in cls.__mro__:
        if "__init__" not in vars(base) or base is object:
            continue
        parameters = list(inspect.signature(base.__init__).parameters.values())[1:]  # less self
        named = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        names += [name for name in named if name not in names]
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            return names, takes_any
        takes_any = True
    return names, takes_any


def your_own_classes(cfg: DictConfig) -> None:
    for group in OWN_CLASS_GROUPS:
        your_own_class(cfg, group)
