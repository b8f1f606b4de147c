"""Checks of the composed config that no single component can make, run before anything is built."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from lit_rlhf.checkpoints.paths import check_checkpoint_path
from lit_rlhf.cli.hardware_checks import FSDP2_TARGET, check_accelerator, check_fsdp2_settings
from lit_rlhf.cli.own_components import (
    REWARD_MODEL_TARGET,
    your_own_classes,
    your_own_reward,
)
from lit_rlhf.cli.trainer_arguments import check_trainer_arguments, check_trains_something
from lit_rlhf.errors import ConfigError
from lit_rlhf.lazy_exports import current_path

PROMPT_DATA_TARGET = "lit_rlhf.data.PromptDataModule"


def check_reward_group(cfg: DictConfig) -> None:
    """The reward group: at least one reward, and reward_model alone (it is one reward, not a named set)."""
    your_own_reward(cfg)
    reward = cfg.get("reward")
    if reward is None:
        raise ConfigError("reward=[] selects no reward; pick one or more, e.g. reward=vader or "
                          "reward=[arithmetic_correct,arithmetic_format].")
    if "rewards" in reward and "template" in reward:
        raise ConfigError("reward=llm_judge cannot be combined with other rewards on the command line (it is one "
                          "reward, not a named set); use it alone, or combine it in Python with lit_rlhf.rewards."
                          "WeightedSum({'judge': LLMJudge(...), 'vader': VaderSentiment()}).")
    if "rewards" in reward and "url" in reward:
        raise ConfigError("reward=http cannot be combined with other rewards on the command line (it is one reward, "
                          "not a named set); serve the combination instead: python -m lit_rlhf.serve "
                          "reward=[a,b], then reward=http reward.url=...")
    reward_model = current_path(str(reward.get("_target_"))) == REWARD_MODEL_TARGET
    if "rewards" in reward and ("name_or_path" in reward or reward_model):
        raise ConfigError("reward=reward_model cannot be combined with other rewards on the command line (it is one "
                          "reward, not a named set); use it alone, or combine it in Python with lit_rlhf.rewards."
                          "WeightedSum({'rm': SequenceClassifierReward(...), 'vader': VaderSentiment()}).")


def reward_parts(config: Any) -> list[str]:
    """A reward config's scoring parts without their weights: the named rewards of a WeightedSum (or the config
    itself), each as sorted JSON, so that a reward and the same reward scaled compare equal."""
    tree = OmegaConf.to_container(config, resolve=True) if isinstance(config, DictConfig) else config
    parts = tree.get("rewards") if isinstance(tree, dict) and isinstance(tree.get("rewards"), dict) else {"": tree}
    return sorted(json.dumps(part, sort_keys=True, default=str) for part in parts.values())


OPTIMIZER_FACTORIES = {"algo.optimizer": ("the optimizer", "the model's parameters"),
                       "algo.lr_scheduler": ("the lr scheduler", "the optimizer")}
FACTORY_EXAMPLES = {"algo.optimizer": "algo.optimizer._target_=torch.optim.SGD (null: the module's AdamW)",
                    "algo.lr_scheduler": "+algo.lr_scheduler._target_=torch.optim.lr_scheduler.CosineAnnealingLR "
                                         "+algo.lr_scheduler.T_max=150 (null: none)"}


def built_by_the_module(cfg: DictConfig) -> None:
    """algo.optimizer and algo.lr_scheduler are functions the module calls with its parameters and its optimizer:
    one typed without `_partial_` (`'algo.lr_scheduler={_target_: ..., T_max: 10}'`, or `+` keys on the null
    scheduler) is made partial, where Hydra would call the class at once without them; `_partial_=false` is one line,
    and so is a name (`algo.lr_scheduler=cosine`, TRL's lr_scheduler_type) or a mapping without the class."""
    for key, (what, argument) in OPTIMIZER_FACTORIES.items():
        node = OmegaConf.select(cfg, key, default=None)
        if node is None:
            continue
        if not isinstance(node, DictConfig) or "_target_" not in node:
            typed = f"{key}={node!r}" if not isinstance(node, DictConfig) else f"{key} without a _target_"
            raise ConfigError(f"{typed}: {key} names the class of {what}, with its arguments, which the module builds "
                              f"with {argument}; e.g. {FACTORY_EXAMPLES[key]}.")
        partial = node.get("_partial_")
        if partial is None:
            with open_dict(node):
                node._partial_ = True
        elif partial is not True:
            raise ConfigError(f"{key}._partial_={partial!r}: the module builds {what} itself, with {argument}; "
                              f"remove {key}._partial_ (it is true).")


def check_run_settings(cfg: DictConfig) -> None:
    """Top-level keys read before anything is built."""
    check_reward_group(cfg)
    built_by_the_module(cfg)
    check_trainer_arguments(cfg)
    your_own_reward(cfg, "gold")
    your_own_classes(cfg)
    check_accelerator(cfg)
    check_fsdp2_settings(cfg)
    if cfg.get("gold") and reward_parts(cfg.gold) == reward_parts(cfg.reward):
        scaled = "" if cfg.gold == cfg.reward else " (scaled: only the weights differ)"
        raise ConfigError(f"gold= names the trained reward{scaled}: the gold score would measure what the run "
                          f"optimizes, not the quality the proxy stands for, and cannot show over-optimization; name "
                          f"another reward as gold (e.g. gold=vader with reward=reward_model).")
    check_seed(cfg)
    check_objective_named(cfg)
    steps = cfg.get("steps")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ConfigError(f"steps={steps!r} must be a whole number >= 1.")
    check_trains_something(cfg)
    check_switched_off(cfg)
    check_output_folders(cfg)
    teacher_without_distillation(cfg)
    if cfg.get("ckpt_path") is not None and str(cfg.ckpt_path) != "last":  # `last`: the run directory's, checked there
        check_checkpoint_path(str(cfg.ckpt_path))
    check_model_locations(cfg)


def teacher_without_distillation(cfg: DictConfig) -> None:
    """Teacher settings (an experiment's, e.g. experiment=calculator_distill, whose algo another algo= replaced) that
    an algorithm without a teacher never reads: said once, as idle settings are."""
    teacher = cfg.get("teacher")
    if not isinstance(teacher, DictConfig) or not len(teacher) or "teacher" in (cfg.get("algo") or {}):
        return
    from lit_rlhf.config.validation import warn_once

    algorithm = str(OmegaConf.select(cfg, "algo._target_", default="this algorithm")).rpartition(".")[2]
    warn_once(f"teacher.{next(iter(teacher))} is set, but {algorithm} trains without a teacher (algo=distill "
              f"distills from one): it is not loaded; use algo=distill, or drop the teacher settings.")


def check_switched_off(cfg: DictConfig) -> None:
    """A callback or logger given a value that is not its config (`callbacks.curves=false`, `=none`, `=off`): null
    switches one off; false stopped the run with a TypeError, and any other word switched it off unsaid."""
    for group, name, value in callbacks_and_loggers(cfg):
        if value is not None and not isinstance(value, DictConfig):
            typed = str(value).lower() if isinstance(value, bool) else repr(value)
            kind = {"callbacks": "callback", "logger": "logger"}[group]
            raise ConfigError(f"{group}.{name}={typed} is not a {kind}'s config; null switches it off: "
                              f"{group}.{name}=null")


def callbacks_and_loggers(cfg: DictConfig):
    """(group, name, config) of each entry of the callbacks and logger groups."""
    for group in ("callbacks", "logger"):
        node = cfg.get(group)
        for name, value in (node.items() if isinstance(node, DictConfig) else ()):
            yield group, name, value


def check_output_folders(cfg: DictConfig) -> None:
    """A callback's dirpath or a logger's save_dir typed empty (an unset shell variable) is the working directory: the
    checkpoints, samples.jsonl and curves.png went there, over another run's files there. One outside the run
    directory that holds files already is another run's (output_folders.check_folder_of_no_other_run)."""
    from lit_rlhf.cli.output_folders import check_folder_of_no_other_run
    from lit_rlhf.config.validation import check_not_empty

    for group, name, value in callbacks_and_loggers(cfg):
        typed = OmegaConf.to_container(value, resolve=False) if isinstance(value, DictConfig) else {}
        for key in ("dirpath", "save_dir"):
            check_not_empty(f"{group}.{name}.{key}", typed.get(key), f"give a directory, or leave {group}.{name}.{key} "
                            f"out (in the run directory)")
            if key in typed:
                check_folder_of_no_other_run(cfg, f"{group}.{name}", key)


MAX_SEED = 2**32 - 1  # numpy's, which Lightning's seed_everything seeds too


def check_seed(cfg: DictConfig) -> None:
    seed = cfg.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"seed={seed!r} must be a whole number from 0 to {MAX_SEED}.")


def check_objective_named(cfg: DictConfig) -> None:
    """optimized_metric= typed empty would read as null: the run (each trial of a sweep) returns no objective. The KL
    budget's settings (train.py): text failed the objective after the last step, a negative penalty rewarded KL."""
    from lit_rlhf.config.validation import check_not_empty, is_number

    check_not_empty("optimized_metric", cfg.get("optimized_metric"), "name a metric the run logs (e.g. "
                    "eval/rlhf_reward), or optimized_metric=null for no objective")
    for key, off in (("kl_budget", " (null: no budget)"), ("kl_budget_penalty", "")):
        value = cfg.get(key)
        if key in cfg and not (off and value is None) and not (is_number(value) and 0 <= value < float("inf")):
            raise ConfigError(f"{key}={value!r} must be a finite number >= 0{off}.")


def check_epochs(cfg: DictConfig) -> None:
    epochs = cfg.get("epochs")
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
        raise ConfigError(f"epochs={epochs!r} must be a whole number >= 1.")


def check_fitting_on_a_file(cfg: DictConfig) -> None:
    """train_sft.py's, train_dpo.py's, train_kto.py's and train_reward_model.py's checks: the epochs, a local data
    file's existence, the model's settings, and the sharding and batch settings these fits refuse."""
    from lit_rlhf.cli.output_folders import check_save_dir
    from lit_rlhf.config import ModelConfig
    from lit_rlhf.config.data import check_dataset_file

    check_epochs(cfg)
    check_seed(cfg)
    check_accelerator(cfg)
    check_objective_named(cfg)
    check_switched_off(cfg)
    check_output_folders(cfg)
    built_by_the_module(cfg)
    check_trainer_arguments(cfg, "training batches, or a fraction of an epoch,")
    sharded = OmegaConf.select(cfg, "trainer.strategy._target_", default=None) == FSDP2_TARGET
    check_fsdp2_settings(cfg)
    if str(OmegaConf.select(cfg, "algo._target_", default="")).endswith(".KTOModule"):
        from lit_rlhf.config.validation import check_kto_batch_size

        check_kto_batch_size(OmegaConf.select(cfg, "algo.loss_type", default=None),
                             OmegaConf.select(cfg, "data.batch_size", default=None))
    if sharded and OmegaConf.select(cfg, "trainer.strategy.sharded_sampling", default=False):
        raise ConfigError(f"trainer.strategy.sharded_sampling=true says how train.py samples its rollouts, and "
                          f"{app_name(cfg)}.py samples none; remove it.")
    dataset = OmegaConf.select(cfg, "data.dataset", default=None, throw_on_resolution_failure=False)
    if isinstance(dataset, str):
        check_dataset_file(dataset, OmegaConf.select(cfg, "data.split", default="train"),
                           OmegaConf.select(cfg, "data.subset", default=None))
    check_settings(ModelConfig, cfg.get("model"), "model", cfg)
    check_model_locations(cfg)
    check_save_dir(cfg)


def app_name(cfg: DictConfig) -> str:
    """The running app's name (train_sft, ...): task_name is the user's to change (it names the run's folder)."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().job.name if HydraConfig.initialized() else str(cfg.task_name)


def settings_in(node: DictConfig, cls: type) -> dict[str, Any]:
    """The values of node's keys that are fields of the settings dataclass cls, resolved."""
    from lit_rlhf.config.settings import field_names

    values = {}
    for name in field_names(cls):
        if name in node:
            value = node[name]
            values[name] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return values


def check_component_settings(cfg: DictConfig) -> None:
    """The settings dataclasses of the prompt data, the algorithm and the model, built from the config as the
    components will build them (in their order), so that a bad value is refused with the components' own line."""
    from lit_rlhf.cli.configs import MODULE_ARGUMENTS
    from lit_rlhf.config import DataConfig, ModelConfig
    from lit_rlhf.config.registry import ALGORITHMS

    algo, data = cfg.get("algo"), cfg.get("data")
    algorithm = next((a for a in ALGORITHMS.values() if algo is not None and a.target == algo.get("_target_")), None)
    if data is not None and data.get("_target_") == PROMPT_DATA_TARGET:
        check_settings(DataConfig, data, "data", cfg)
    if algorithm is not None:
        check_settings(algorithm.settings, algo, "algo", cfg, MODULE_ARGUMENTS + algorithm.arguments)
    check_settings(ModelConfig, cfg.get("model"), "model", cfg)


def check_settings(cls: type, node: Any, prefix: str, cfg: DictConfig, arguments: tuple[str, ...] = ()) -> None:
    """The settings dataclass cls built from node's keys (a config group) as its component will build it, so that a
    bad value is refused with the component's own line, and a key added with a + that is neither a setting nor one of
    the component's other `arguments` with the command line's hint (+algo.learning_rate: algo.optimizer.lr); a node
    that is not a group, or a value that does not resolve, is left to the component."""
    from lit_rlhf.config.settings import build, field_names
    from lit_rlhf.config.trl_names import command_line_hint

    if not isinstance(node, DictConfig):
        return
    try:
        values = settings_in(node, cls)
    except Exception:  # noqa: BLE001 (a value that does not resolve: the component's own path says so)
        return
    unknown = {str(k): None for k in node if k not in (*field_names(cls), "_target_", *arguments)}
    build(cls, {**values, **unknown}, prefix, hint=lambda name: command_line_hint(name, cfg))


def check_model_locations(node: Any, prefix: str = "") -> None:
    """Every model folder or Hub name the config sets itself (not one it repeats from another key by interpolation,
    which is checked where it is set): one line naming the key, before anything loads."""
    from lit_rlhf.config.locations import MODEL_LOCATION_KEYS, WHOLE_MODEL_KEYS, check_model_location

    for key in node.keys() if isinstance(node, DictConfig) else range(len(node)):  # a mapping or a list
        name = f"{prefix}[{key}]" if isinstance(key, int) else f"{prefix}.{key}".lstrip(".")
        if OmegaConf.is_missing(node, key) or OmegaConf.is_interpolation(node, key):
            continue
        value = node[key]
        if OmegaConf.is_config(value):
            check_model_locations(value, name)
        elif key in MODEL_LOCATION_KEYS and isinstance(value, str):
            check_model_location(name, value, whole_model=key in WHOLE_MODEL_KEYS)


def typed_key(cfg: DictConfig, key: str) -> str:
    """The key whose value `key` repeats by interpolation, followed to where it is set (data.tokenizer ->
    model.tokenizer_name_or_path -> model.name_or_path): what a user typed, for an error to name."""
    for _ in range(10):  # interpolations chain a few keys deep; a cycle stops here
        parent, _, name = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        if not isinstance(node, DictConfig) or name not in node or not OmegaConf.is_interpolation(node, name):
            return key
        found = re.fullmatch(r"\$\{(\.*)([\w.]+)\}", str(OmegaConf.to_container(node, resolve=False)[name]))
        if found is None:  # a resolver (${oc.env:...}) or text around the interpolation: the key itself was typed
            return key
        dots, target = found.groups()
        base = parent.split(".") if parent else []
        base = base[:len(base) - max(len(dots) - 1, 0)] if dots else []  # ${.x}: beside it; ${..x}: one level up
        key = ".".join([*base, target])
    return key


def check_train(cfg: DictConfig) -> None:
    """train.py's checks: the run's own settings, then the components' settings dataclasses."""
    check_run_settings(cfg)
    check_component_settings(cfg)


def check_working_directory() -> None:
    """hydra.job.chdir=true starts the task in its run directory, where every relative path the command line gives
    (data.dataset, model.name_or_path, ckpt_path, a reward model's folder, PYTHONPATH=.) would be looked for."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized() and HydraConfig.get().job.chdir:
        raise ConfigError("hydra.job.chdir=true would run the task in its run directory, and the relative paths of the "
                          "command line (data.dataset, model.name_or_path, ckpt_path, ...) would be looked for there; "
                          "remove it: the apps run where they are started and write the run to its run directory "
                          "(hydra.run.dir), printed at the end.")


def check_before_imports(cfg: DictConfig, checks: Callable[[DictConfig], None] = check_train,
                         records_results: bool = True) -> None:
    """An app's checks of the composed config (train.py's by default), run before it imports torch and Lightning
    (about ten seconds): a bad setting is its one line at once (exit code 2). As for any run that fails its checks,
    its new run directory is removed, and, for an app that records its runs' results (records_results), a run
    directory that holds a run (a resume's) records the failure in its result.json; a sweep's trials are checked by
    the trials themselves (a bad trial is recorded, the sweep goes on)."""
    from lit_rlhf.cli.run_dirs import discard_unused_run_dir, discard_unused_sweep_dir
    from lit_rlhf.cli.sweeps import check_search_objective, in_multirun, write_result
    from lit_rlhf.errors import exit_with_user_error

    try:
        check_working_directory()
        check_search_objective(cfg)
    except ConfigError as err:  # a sweep's first trial says it once, and the sweep ends
        discard_unused_run_dir(cfg)
        discard_unused_sweep_dir()
        exit_with_user_error(err)
    if in_multirun():
        return
    try:
        checks(cfg)
    except ConfigError as err:
        discard_unused_run_dir(cfg)
        output_dir = Path(cfg.paths.output_dir)
        if records_results and os.environ.get("RANK", "0") == "0" and output_dir.is_dir():  # torchrun: one rank
            write_result(output_dir, "failed", None, {}, str(err))
        exit_with_user_error(err)
