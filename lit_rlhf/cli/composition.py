"""Hydra's composition errors (an unknown key, a misspelled option, a value of the wrong type) as one line
that names the key and the nearest valid one."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lit_rlhf.cli.app_arguments import hydra_initialized
from lit_rlhf.cli.hardware_checks import fsdp2_setting_without_fsdp2
from lit_rlhf.cli.override_forms import override_form_line
from lit_rlhf.cli.trainer_arguments import trainer_argument_hint
from lit_rlhf.config.trl_names import command_line_hint
from lit_rlhf.errors import SYNONYMS, empty_value_line, nearest

# Hydra's words for a value of the wrong type
CONVERSION = r"Value '([^']*)' (?:of type '\w+' )?could not be converted to (\w+)"
NOT_A_BOOL = r"Value '([^']*)' is not a valid bool"
# the fits on a fixed dataset, each an app of its own rather than an RL algo= of train.py (and evaluate.py)
FIT_APPS = {"sft": "train_sft.py", "dpo": "train_dpo.py", "kto": "train_kto.py",
            "reward_model": "train_reward_model.py"}


def app_command(config_name: str, flags: str = "") -> str:
    """What follows `python` to run the app whose own config is config_name, with the flags that choose another."""
    return ("-m lit_rlhf.serve" if config_name == "serve" else f"{config_name}.py") + (f" {flags}" if flags else "")


def composed(config_dir: Path, config_name: str, overrides: list[str],
             with_hydra: bool = False) -> DictConfig | BaseException:
    """The config composed with these overrides (and Hydra's node, with_hydra), or the error composing it raised."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with hydra_initialized(config_dir):
            return compose(config_name, overrides=overrides, return_hydra_config=with_hydra)
    except Exception as err:  # the suggestion is a courtesy: never fail while explaining a failure
        return err
    finally:
        GlobalHydra.instance().clear()


def composed_without(config_dir: Path, config_name: str, overrides: list[str]) -> DictConfig | None:
    """The config composed without the offending overrides (None where that fails too)."""
    cfg = composed(config_dir, config_name, overrides)
    return None if isinstance(cfg, BaseException) else cfg


def error_text(err: BaseException) -> str:
    return " ".join(str(e) for e in (err, err.__cause__, err.__context__) if e is not None)


def error_key(err: BaseException) -> str | None:
    """The key a composition error names."""
    key = next((getattr(e, "full_key", None) for e in (err, err.__cause__) if getattr(e, "full_key", None)), None)
    if key is None and (found := re.search(r"Could not override '([^']+)'", error_text(err))):
        key = found.group(1)
    return key


def names_an_unknown_key(err: BaseException) -> bool:
    text = error_text(err)
    return ("not in struct" in text or "Could not override" in text or "not in '" in text) and not re.search(
        CONVERSION, text)


def without_key(overrides: list[str], key: str) -> list[str]:
    """The overrides less those that set key or a key under it."""
    typed = lambda override: override.lstrip("+~").partition("=")[0]  # noqa: E731
    return [o for o in overrides if typed(o) != key and not typed(o).startswith(key + ".")]


def composed_without_unknown_keys(config_dir: Path, config_name: str, overrides: list[str],
                                  limit: int = 8) -> tuple[DictConfig | None, list[str]]:
    """The config composed from the overrides less those that set keys it does not have, and those keys in the order
    Hydra meets them (at most limit): all of them named in one line, each with its hint, where the user typed several.
    An override with another error (a value of the wrong type) is left out unnamed: its own line comes once the keys
    are right. (None, keys) where the composition fails on something no override names."""
    unknown = []
    for _ in range(limit):
        cfg = composed(config_dir, config_name, overrides)
        if not isinstance(cfg, BaseException):
            return cfg, unknown
        key = error_key(cfg)
        rest = without_key(overrides, key) if key else overrides
        if rest == overrides:
            return None, unknown
        if names_an_unknown_key(cfg):
            unknown.append(key)
        overrides = rest
    return None, unknown


def setting_paths(tree: dict, prefix: str = "") -> list[str]:
    """Every key of a nested config as it is typed on the command line (algo.optimizer.lr), parents first."""
    paths = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        paths.append(path)
        if isinstance(value, dict):
            paths += setting_paths(value, path + ".")
    return paths


def setting_hint(key: str, cfg: DictConfig | None, config_dir: Path | None = None) -> str:
    """' (did you mean ...?)' for an unknown key: the nearest key beside it, else keys beside it that it begins, else
    the setting of that name (or nearly) anywhere in the config (`lr` -> algo.optimizer.lr), else the keys beside it
    where they are few. The line stays short: never dozens of keys."""
    if cfg is None:
        return ""
    parent, _, name = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if parent and node is None and OmegaConf.select(cfg, parent, default="absent") is None:  # a null setting
        return f" ({parent} is null, with no keys to set; give it whole: {parent}={{{name}: ...}})"
    if hint := group_left_none(key, cfg, config_dir):
        return hint
    if parent.endswith("_kwargs") and isinstance(node, DictConfig):  # generation_kwargs, engine_kwargs: open mappings
        return f" ({parent} takes keys it does not have yet with a +: +{key}=<value>)"
    if parent == "trainer" and (hint := trainer_argument_hint(name, cfg)):
        return hint
    if hint := command_line_hint(name, cfg):  # an exact TRL name before a near spelling (max_steps: max_staleness)
        return hint
    siblings = [str(k) for k in node.keys()] if isinstance(node, DictConfig) else []
    if difflib.get_close_matches(name, siblings, n=1) or any(s in siblings for s in SYNONYMS.get(name, ())):
        return nearest(name, siblings)
    paths = setting_paths(OmegaConf.to_container(cfg, resolve=False))
    if key == "steps" and "epochs" in paths and "trainer.max_steps" in paths:  # train.py's RL steps, typed to a fit
        return " (this script counts epochs: epochs=N, or optimizer steps: trainer.max_steps=N)"
    # the same name elsewhere, nearest to where it was typed first (under its parent, then the shortest path)
    named = sorted((p for p in paths if p.rpartition(".")[2] == name),
                   key=lambda p: (not p.startswith(parent + "."), p.count("."), p))
    if named:
        return f" (did you mean {named[0]!r}?)"
    started = [s for s in siblings if s.startswith(name)][:3]
    if started:
        return f" (did you mean {' or '.join(repr(s) for s in started)}?)"
    leaves = {p.rpartition(".")[2]: p for p in sorted(paths, key=lambda p: -p.count("."))}
    close = difflib.get_close_matches(name, list(leaves), n=1, cutoff=0.8)
    if close:
        return f" (did you mean {leaves[close[0]]!r}?)"
    listed = ", ".join(siblings)
    where = f"under {parent}" if parent else "at the top level"
    return f" (valid keys: {listed})" if listed and len(listed) <= 100 else f" (no setting of that name {where})"


def group_left_none(key: str, cfg: DictConfig, config_dir: Path | None) -> str:
    """' (env is none in this run; ...)' for a key under a config group whose option is none (env, teacher, gold,
    ...: an empty node), which has no keys until an option is chosen; else ''."""
    group = key.partition(".")[0]
    node = OmegaConf.select(cfg, group, default=None)
    if config_dir is None or "." not in key or not isinstance(node, DictConfig) or len(node):
        return ""
    options = sorted(p.stem for p in (config_dir / group).glob("*.yaml") if p.stem != "none")
    if not options:
        return ""
    if group == "teacher":  # algo=distill's; the other algorithms have none
        return f" (a teacher is algo=distill's, and this run has none: algo=distill {key}=...)"
    return (f" ({group} is none in this run, with no keys to set; choose one first: {group}={'|'.join(options)}, "
            f"then {key}=...)")


def first_of_each_sweep(overrides: list[str]) -> list[str]:
    """The overrides with each sweep (`-m algo.kl_coef=0.01,0.1`, range(...), choice(...)) at its first value, one
    that cannot be listed (interval(...)) left out: compose(), which the hints call, takes no sweep."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, plain = OverridesParser.create(), []
    for line in overrides:
        try:
            (override,) = parser.parse_overrides([line])
            if override.is_sweep_override():
                line = f"{override.get_key_element()}={next(override.sweep_string_iterator())}"
        except Exception:  # a line Hydra cannot parse or list: its own error is the one being explained
            if "(" in line or "," in line:
                continue
        plain.append(line)
    return plain


def composition_error(err: BaseException, config_dir: Path, config_name: str, overrides: list[str],
                      command: str | None = None) -> str:
    """One line for a Hydra composition error; `command` the app's (default: the one whose config is config_name)."""
    text, key = error_text(err), error_key(err)
    command = command or app_command(config_name)  # where --cfg job prints the app's own keys
    compose = lambda typed, **kw: composed(config_dir, config_name, first_of_each_sweep(typed), **kw)  # noqa: E731
    if line := override_form_line(err, text, config_dir, command, overrides, compose):
        return line
    overrides = first_of_each_sweep(overrides)
    option = re.search(r"Could not (?:find|load) '([^']+)/([^']+)'", text)  # load: an option in a list, reward=[a,b]
    if empty := re.search(r"Could not find '([^']+)/'", text):  # `experiment=$EXP` with the variable unset
        options = sorted(p.stem for p in (config_dir / empty.group(1)).glob("*.yaml"))
        listed = f" ({', '.join(options)})" if options else ""
        return empty_value_line(f"{empty.group(1)}=", f"name one of its options{listed}")
    if option:
        group, name = option.groups()
        options = sorted(p.stem for p in (config_dir / group).glob("*.yaml"))
        if group == "algo" and (app := FIT_APPS.get(name.lower())):
            return (f"algo={name} is not an option of algo ({', '.join(options)}): {name} trains with an app of its "
                    f"own, python {app} (its --help lists its settings).")
        return f"{group}={name} is not an option of {group}{nearest(name, options, noun='options')}."
    converted = re.search(CONVERSION, text)
    if converted and key:
        return f"{key}={converted.group(1)!r} must be of type {converted.group(2).lower()}."
    if (not_a_bool := re.search(NOT_A_BOOL, text)) and key:
        return f"{key}={not_a_bool.group(1)!r} must be true or false."
    if key and (line := value_of_another_shape(text, key, config_dir, config_name, overrides)):
        return line
    if key and (line := group_the_app_lacks(text, key, config_dir, config_name, command, overrides)):
        return line
    if key and names_an_unknown_key(err):
        if fsdp2_line := fsdp2_setting_without_fsdp2(key, overrides):
            return fsdp2_line
        if own_line := argument_of_own_class(key, overrides):
            return own_line
        cfg, others = composed_without_unknown_keys(config_dir, config_name, without_key(overrides, key))
        named = "".join(f"; nor is {other}{setting_hint(other, cfg, config_dir)}" for other in others)
        hint = setting_hint(key, cfg, config_dir)
        return f"{key} is not a setting{hint}{named}; see `python {command} --cfg job` for every key."
    if removed := re.search(r"Could not delete from config\. '([^']+)' does not exist", text):
        key = removed.group(1)
        cfg, _ = composed_without_unknown_keys(config_dir, config_name, without_key(overrides, key))
        return f"~{key} removes nothing: it is not a setting{setting_hint(key, cfg, config_dir)}."
    if "Unexpected type for root: NoneType" in text and (line := key_under_null(config_dir, config_name, overrides)):
        return line
    if re.search(r"Config group override must be a string or a list\. Got (NoneType|bool)", text) and (
            line := group_set_to_null(config_dir, overrides)):
        return line
    if re.search(r"Config group override must be a string or a list\. Got (int|float)", text) and (
            line := group_given_a_number(config_dir, overrides)):
        return line
    for override in overrides:  # the Optuna sweeper divides the trials by it: "division by zero"
        key, _, value = override.lstrip("+").partition("=")
        if key == "hydra.sweeper.n_jobs" and not (value.strip().isdigit() and int(value) >= 1):
            return f"hydra.sweeper.n_jobs={value} must be a whole number >= 1 (the trials run at a time)."
    if text.startswith("Only one of --run, --multirun, --cfg, --info"):  # Hydra's flags, not an override
        return (f"{text.splitlines()[0].strip()} in one command (to see a job of a sweep, leave -m out: "
                f"`python {command} --cfg job <one value of each swept setting>`).")
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"{first} (check the command line's overrides)"


def value_of_another_shape(text: str, key: str, config_dir: Path, config_name: str, overrides: list[str]) -> str | None:
    """The line for a plain value where a mapping is read (`model.lora=false`), or a list or a mapping where a string
    is (`data.dataset=[a,b]`): Hydra's own line says only "Error merging override"."""
    typed = next((o.lstrip("+~") for o in overrides if o.lstrip("+~").partition("=")[0] == key), key)
    if found := re.search(r"Cannot convert '(list|dict)' to (\w+)", text):
        shape = {"list": "a list", "dict": "a mapping"}[found.group(1)]
        return f"{typed} must be one {found.group(2).lower()}, not {shape}."
    if not re.search(r"is not a subclass of \w+|Cannot assign \w+ to Dict|Cannot merge DictConfig with ListConfig",
                     text):
        return None
    parent, _, name = key.rpartition(".")
    cfg = composed(config_dir, config_name, without_key(overrides, key))
    holder = OmegaConf.select(cfg, parent) if parent and isinstance(cfg, DictConfig) else cfg
    node = holder._get_node(name) if isinstance(holder, DictConfig) else None
    typed_optional = node is not None and node._is_optional() and node._metadata.ref_type is not Any  # not Any's
    null = f"; or null to switch it off (null, not false or none): {key}=null" if typed_optional else ""
    return (f"{typed}: {key} is a mapping of settings; set them one by one ({key}.<key>=<value>) or give it whole, "
            f"quoted: '{key}={{<key>: <value>}}'{null}.")


def app_groups_of(cfg: DictConfig) -> list[str]:
    """The config groups an app's --help lists (the ${app_groups:...} of its help template)."""
    template = OmegaConf.to_container(cfg.hydra.help, resolve=False).get("template", "")
    listed = re.search(r"\$\{app_groups:([^}]*)\}", str(template))
    return listed.group(1).split(",") if listed else []


def group_the_app_lacks(text: str, key: str, config_dir: Path, config_name: str, command: str,
                        overrides: list[str]) -> str | None:
    """The line for `data=files` typed to train_dpo.py, whose data is set key by key (data.dataset=FILE), or
    `reward=vader` to an app that reads no reward: Hydra says "No match in the defaults list", and advises a +."""
    if not re.search(r"Could not override '[^']+'\. No match in the defaults list", text):
        return None
    cfg = composed(config_dir, config_name, without_key(overrides, key), with_hydra=True)
    if isinstance(cfg, BaseException):
        return None
    typed = next((o for o in overrides if o.lstrip("+~").partition("=")[0] == key), key)
    groups = app_groups_of(cfg)
    own = f"its groups: {', '.join(groups)}" if groups else "it has no config groups"
    if key == "trainer" and "device" in cfg:  # evaluate.py runs no Trainer
        own += "; it samples on device=auto|cpu|cuda"
    if not isinstance(OmegaConf.select(cfg, key, default=None), DictConfig):
        return f"{typed}: `python {command}` has no {key} group and no {key} setting ({own}); see its --help."
    example = f"{key}.dataset=FILE" if OmegaConf.select(cfg, f"{key}.dataset", default=None) else f"{key}.<key>=<value>"
    return (f"{typed}: `python {command}` has no {key} group to choose from ({own}); {key} is set key by key, e.g. "
            f"{example} (`python {command} --cfg job` prints its keys).")


def argument_of_own_class(key: str, overrides: list[str]) -> str | None:
    """The line for `reward.scale=0.5` typed without its + beside `reward._target_=mymodule.Name`: Hydra adds a key
    its config does not have only with a +, and the group's file, written for the library's class, has no `scale`."""
    parent, _, name = key.rpartition(".")
    typed = {o.partition("=")[0]: o.partition("=")[2] for o in overrides}
    group = parent.removesuffix(".weights")
    if group != parent and f"{group}._target_" in typed:  # reward.weights.format=0.2 beside reward._target_=[...]
        return (f"{key} is not a setting of the {group} group's file; the weight of your own reward {name} is added "
                f"with a +: +{key}={typed.get(key, '<weight>')}")
    target = typed.get(f"{parent}._target_")
    if not parent or target is None or key not in typed:
        return None
    return (f"{key} is not a setting of the {parent} group's file; an argument of your own {target} is added with a "
            f"+: +{key}={typed[key]}")


def key_under_null(config_dir: Path, config_name: str, overrides: list[str]) -> str | None:
    """The line for an override that sets a key inside a setting that is null in this config (model.lora.r=8 where
    model.lora is null: full fine-tuning), else None."""
    for override in overrides:
        key = override.lstrip("+~").partition("=")[0]
        parent = key.rpartition(".")[0]
        if not parent:
            continue
        cfg = composed_without(config_dir, config_name, [o for o in overrides if o != override])
        if cfg is not None and OmegaConf.select(cfg, parent, default="missing") is None:
            last, value = key.rpartition(".")[2], override.partition("=")[2]
            return (f"{key} sets a key of {parent}, which is null in this config (`--cfg job` prints it); give "
                    f"{parent} whole, e.g. '{parent}={{{last}: {value}}}' (its other keys at their defaults), or "
                    f"leave {key} out.")
    return None


def hydra_node_alone_line(command: str) -> str:
    """`--cfg hydra` with --resolve or -p: Hydra's settings without the app's, which its run directories read."""
    return (f"--cfg hydra prints Hydra's settings without the app's, and its run directories read the app's "
            f"(paths.log_dir, task_name): print them resolved with `python {command} --cfg all --resolve -p hydra` "
            f"(or -p hydra.run.dir).")


def raised_in_the_job(err: BaseException) -> bool:
    """Whether err came from inside the app's task (Hydra's run_job called it once the config was composed) and not
    from the composition: the app's own imports (a broken install) were taken for a mistake in its settings."""
    frame = err.__traceback__
    while frame is not None:
        code = frame.tb_frame.f_code
        if code.co_name == "run_job" and Path(code.co_filename).match("hydra/core/utils.py"):
            return True
        frame = frame.tb_next
    return False


def group_given_a_number(config_dir: Path, overrides: list[str]) -> str | None:
    """The line for `algo=5`, which Hydra reads as a number and refuses as a group's option ("Config group override
    must be a string or a list. Got int"): the group's options."""
    for override in overrides:
        group, _, value = override.lstrip("+").partition("=")
        if re.fullmatch(r"[-+]?(\d[\d_]*\.?\d*|\.\d+)(e[-+]?\d+)?", value.strip(), re.IGNORECASE) and (
                config_dir / group).is_dir():
            options = sorted(p.stem for p in (config_dir / group).glob("*.yaml"))
            return f"{group}={value} is not an option of {group}{nearest(value, options, noun='options')}."
    return None


def group_set_to_null(config_dir: Path, overrides: list[str]) -> str | None:
    """The line for `logger=null` (or false): null sets a setting, and Hydra refuses it for a config group, which is
    left out with its `none` option where it has one (env=none), else with ~group (~logger)."""
    for override in overrides:
        group, _, value = override.partition("=")
        if value.strip().lower() in ("null", "none", "false") and (config_dir / group).is_dir():
            way = f"{group}=none" if (config_dir / group / "none.yaml").exists() else f"~{group}"
            return f"{group}={value}: {group} is a config group, whose options are files; leave it out with {way}."
    return None
