"""Hydra's composition errors (an unknown key, a misspelled option, a value of the wrong type) as one line
that names the key and the nearest valid one."""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lit_rlhf.cli.checks import fsdp2_setting_without_fsdp2
from lit_rlhf.errors import nearest


def valid_keys(config_dir: Path, config_name: str, overrides: list[str], parent: str) -> list[str]:
    """The keys under `parent` of the config composed without the offending overrides."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(config_dir)):
            cfg = compose(config_name, overrides=overrides)
        node = OmegaConf.select(cfg, parent) if parent else cfg
        return [str(k) for k in node.keys()] if isinstance(node, DictConfig) else []
    except Exception:  # the suggestion is a courtesy: never fail while explaining a failure
        return []
    finally:
        GlobalHydra.instance().clear()


def composition_error(err: BaseException, config_dir: Path, config_name: str, overrides: list[str]) -> str:
    """One line for a Hydra composition error."""
    text = " ".join(str(e) for e in (err, err.__cause__, err.__context__) if e is not None)
    key = next((getattr(e, "full_key", None) for e in (err, err.__cause__) if getattr(e, "full_key", None)), None)
    if key is None:
        found = re.search(r"Could not override '([^']+)'", text)
        key = found.group(1) if found else None
    option = re.search(r"Could not find '([^']+)/([^']+)'", text)
    if option:
        group, name = option.groups()
        options = sorted(p.stem for p in (config_dir / group).glob("*.yaml"))
        return f"{group}={name} is not an option of {group}{nearest(name, options)}."
    converted = re.search(r"Value '([^']*)' (?:of type '\w+' )?could not be converted to (\w+)", text)
    if converted and key:
        return f"{key}={converted.group(1)!r} must be of type {converted.group(2).lower()}."
    if key and ("not in struct" in text or "Could not override" in text or "not in '" in text):
        if fsdp2_line := fsdp2_setting_without_fsdp2(key, overrides):
            return fsdp2_line
        parent, _, name = key.rpartition(".")
        remaining = [o for o in overrides if not o.lstrip("+~").startswith(key + "=")]
        keys = valid_keys(config_dir, config_name, remaining, parent)
        hint = nearest(name, keys) if keys else ""
        return f"{key} is not a setting{hint}; see `python train.py --cfg job` for every key."
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"{first} (check the command line's overrides)"
