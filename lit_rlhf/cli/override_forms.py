"""Hydra's override forms beyond key=value, misused, as one line that says which form was meant: a + on a key or
group the config already has, several values without -m, an override Hydra cannot parse, a ~ on a setting that
cannot go; and, once the task runs, a ${...} that resolves to nothing or a ~ that removed what the run reads."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

# the library's own config groups (a ~ that removed one: its options instead)
CONF = Path(__file__).resolve().parents[1] / "conf"

MISSING_KEY = object()

Compose = Callable[..., "DictConfig | BaseException"]  # (overrides, with_hydra=False)


def override_form_line(err: BaseException, text: str, config_dir: Path, app: str, overrides: list[str],
                       compose: Compose) -> str | None:
    """The line for a composition error that a misused override form caused, else None. text: the error's text and
    its causes'; app: how the app is run (`train.py`); compose: the app's config composed from other overrides."""
    from hydra.errors import OverrideParseException

    if isinstance(err, OverrideParseException):
        return unparsable_override_line(overrides)
    if found := re.search(r"Ambiguous value for argument '([^'=]+)=([^']*)'", text):
        key, value = found.groups()
        if (config_dir / key.lstrip("+~").replace(".", "/")).is_dir():  # a group takes one option per run
            return (f"{key}={value} names several options of the group {key}: add -m to run each (python {app} -m "
                    f"{key}={value}).")
        return (f"{key}={value} gives several values: add -m to sweep over them (python {app} -m {key}={value}), "
                f"or write one list, {key}=[{value}], or one string, quoted: {key}='{value}'.")
    if line := group_list_line(overrides, config_dir, app, text):
        return line
    if found := re.search(r"Sweep parameters '([^']+)' requires --multirun", text):
        typed = found.group(1)
        if "interval(" in typed:
            return (f"{typed} is a search space, which a search sweeper samples with -m: python {app} -m "
                    f"hydra/sweeper=optuna '{typed}' ...")
        return f"{typed} is a sweep, which runs with -m: python {app} -m '{typed}' ..."
    if found := re.search(r"BasicSweeper does not support sweep type : (\w+)_SWEEP", text):
        kind = found.group(1).lower()
        typed = next((o for o in overrides if f"{kind}(" in o.partition("=")[2]), f"{kind}(...)")
        return (f"{typed}: {kind}(...) is a search space, which a search sweeper samples (Optuna's: python {app} -m "
                f"hydra/sweeper=optuna '{typed}'); the default sweeper runs listed values: key=a,b,c, choice(a,b) or "
                f"range(start,stop,step).")
    if line := plus_on_present_line(text, config_dir, overrides, compose):
        return line
    if found := re.search(r"Error merging override ~(\S+).*does not support deletion", text, re.S):
        key = found.group(1)
        return (f"~{key} cannot remove {key}: every setting of {key.partition('.')[0]} is read by the run; set it "
                f"instead ({key}=<value>), or see its default with `python {app} --cfg job`.")
    return tilde_on_read_line(overrides, config_dir, compose)


def group_list_line(overrides: list[str], config_dir: Path, app: str, text: str) -> str | None:
    """group=[a,b] where the group's configs failed to merge (algo's schemas refuse each other's keys): Hydra merges
    the options of a list into one config, which a group that takes several (reward, logger) means."""
    for typed in overrides:
        key, _, value = typed.partition("=")
        group = key.lstrip("+~").replace(".", "/")
        if value.startswith("[") and (config_dir / group).is_dir() and f"In '{group}/" in text:
            options = value.strip("[]")
            return (f"{typed}: a list merges the options of the group {key} into one config; choose one "
                    f"({key}={options.split(',')[0].strip()}), or run each: python {app} -m {key}={options}.")
    return None


def unparsable_override_line(overrides: list[str]) -> str | None:
    """The first override Hydra's grammar cannot parse, with its reason and the usual fix."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except Exception as err:  # Hydra's OverrideParseException
            if "=" not in override:
                return f"{override} has no value: an override is key=value ({override}=<value>), ~key removes one."
            key, _, value = override.partition("=")
            reason = parse_reason(str(err), override)
            if reason == "unexpected '~'" and value.startswith("~"):  # a home directory the shell did not expand
                return (f"{override!r}: Hydra does not expand ~ (your shell does, unquoted); write the path out: "
                        f"{key}=$HOME{value[1:]}")
            return (f"{override!r} cannot be parsed ({reason}); a value with brackets, braces, commas, spaces, "
                    f"quotes or ~ is quoted whole: {key}='<value>'.")
    return None


def parse_reason(text: str, override: str) -> str:
    """The grammar's reason in Hydra's error text: its second line after "Error parsing override", the character its
    caret points at after "LexerNoViableAltException: <override>", else its first line."""
    lines = [line for line in text.splitlines() if line.strip() and "hydra.cc" not in line]
    if not lines:
        return "not Hydra's override grammar"
    lexer = "LexerNoViableAltException: "
    if lines[0].startswith(lexer) and len(lines) > 1 and lines[1].strip() == "^":
        column = lines[1].index("^") - len(lexer)
        return f"unexpected {override[column]!r}" if 0 <= column < len(override) else lines[0]
    if lines[0].startswith("Error parsing override") and len(lines) > 1:
        return lines[1]
    return lines[0]


def plus_on_present_line(text: str, config_dir: Path, overrides: list[str], compose: Compose) -> str | None:
    """`+seed=1` where the config has seed, `+algo=rloo` where the defaults already choose an algo: the + adds what
    is not there, and Hydra's own error for a group (an interpolation its second algo config breaks) names neither."""
    if found := re.search(r"An item is already at '([^']+)'", text):
        key = found.group(1)
        typed = next((o for o in overrides if o.startswith(f"+{key}=")), f"+{key}=<value>")
        return (f"{key} is already in the config: set it without the + ({typed[1:]}), or with ++ to set it whether "
                f"or not it is there.")
    for override in overrides:
        key = override[1:].partition("=")[0]
        if not override.startswith("+") or override.startswith("++") or not (config_dir / key).is_dir():
            continue
        # alone, so that another override's mistake (its own line comes next) does not hide this one
        if isinstance(compose([override]), BaseException) and not isinstance(compose([override[1:]]), BaseException):
            return f"{key} is already chosen by the defaults: choose {override[1:]} without the +."
    return None


def removed_line(key: str, config_dir: Path, choices: Any, where: str = "") -> str:
    """`~key` removed what the run reads: choose (a group's options) or set it instead. choices: Hydra's
    {group[@package]: option} of the run (`pairs@data`: train_dpo.py's data is a pairs option)."""
    group = next((name for name in choices or {} if (name.partition("@")[2] or name) == key), key)
    options = sorted(p.stem for p in (config_dir / group).glob("*.yaml")) if group == key else []
    instead = (f"choose one instead: {key}={'|'.join(options)}" if options else f"set it instead: {key}=<value>"
               if group == key else f"drop ~{key} and set the keys under it instead ({key}.<key>=<value>)")
    return f"~{key} removed {key}, which this run reads{where}; {instead}."


def tilde_on_read_line(overrides: list[str], config_dir: Path, compose: Compose) -> str | None:
    """`~model` where the app's own config reads ${model} (train_sft.py): composing fails on the interpolation."""
    for override in overrides:
        key = override[1:].partition("=")[0]
        if not override.startswith("~") or not isinstance(compose([override]), BaseException):
            continue
        cfg = compose([], with_hydra=True)
        if isinstance(cfg, DictConfig) and OmegaConf.select(cfg, key, default=MISSING_KEY) is not MISSING_KEY:
            return removed_line(key, config_dir, cfg.get("hydra", {}).get("runtime", {}).get("choices"))
    return None


def run_choices() -> Any:
    """The running task's {group[@package]: option}, or None outside a Hydra run."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().runtime.choices if HydraConfig.initialized() else None


def removed_or_unresolved_line(err: BaseException) -> str | None:
    """Once the task runs: a setting whose ${...} resolves to nothing, or a key the run reads that `~key` on the
    command line removed, as one line naming both; else None."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, InterpolationResolutionError

    from lit_rlhf.errors import ConfigError, UnavailableError

    if not isinstance(err, (InterpolationResolutionError, ConfigAttributeError, ConfigKeyError)):
        return None
    full_key = getattr(err, "full_key", None) or ""
    message = (str(getattr(err, "msg", "") or err).strip().splitlines() or [""])[0]
    missing = re.search(r"Interpolation key '([^']+)' not found", message)
    read = missing.group(1) if missing else full_key
    removed = [o[1:].partition("=")[0] for o in sys.argv[1:] if o.startswith("~")]
    for key in removed:
        if read == key or read.startswith(key + "."):
            where = f" ({full_key} holds ${{{read}}})" if missing and full_key else ""
            return removed_line(key, CONF, run_choices(), where)
    if not isinstance(err, InterpolationResolutionError) or isinstance(err.__cause__, (ConfigError, UnavailableError)):
        return None  # a resolver's own one-line error is the cause's
    typed_with = [o for o in sys.argv[1:] if "${" in o.partition("=")[2]]  # the overrides that hold a ${...}
    if missing and (typed := next((o for o in typed_with if "${" + read in o.partition("=")[2]), None)):
        return (f"{typed} cannot be resolved: {read} is not a setting of the config; a ${{...}} names one, e.g. "
                f"${{model.name_or_path}} (`--cfg job` prints them).")
    value = getattr(getattr(err, "child_node", None), "_value", lambda: None)()
    where = (full_key + (f"={value}" if isinstance(value, str) else "") if full_key
             else typed_with[0] if len(typed_with) == 1 else "a setting")
    return (f"{where} cannot be resolved: {message}; fix its ${{...}} on the command line or in the config file that "
            f"sets it.")
