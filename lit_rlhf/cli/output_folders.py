"""The folders a run writes outside its run directory, which must be new or empty, as the run directory must be
new (lit_rlhf/cli/run_dirs.py): another run's files there would be written over or added to, silently.

- check_folder_of_no_other_run: a callback's dirpath, or a logger's folder (save_dir/name/version), set outside the
  run directory (callbacks.model_checkpoint.dirpath=/scratch/ckpts).
- check_save_dir: the folder a fit on a file saves its model to.
"""

from __future__ import annotations

import os
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from lit_rlhf.cli.run_dirs import is_launched_rank
from lit_rlhf.config.validation import check_not_empty
from lit_rlhf.errors import ConfigError


def check_folder_of_no_other_run(cfg: DictConfig, node_key: str, key: str) -> None:
    """A callback's dirpath, or a logger's folder (save_dir/name/version), outside the run directory must be new or
    empty: another run's files there were written over (last.ckpt, curves.png) or added to (metrics.csv,
    samples.jsonl), silently, and its resume command then resumed this run. A resume (ckpt_path) writes on into the
    folders of the run it resumes, and a logger whose version is null into a new version_N folder."""
    value = OmegaConf.select(cfg, f"{node_key}.{key}", throw_on_resolution_failure=False)
    run_dir = OmegaConf.select(cfg, "paths.output_dir", throw_on_resolution_failure=False)
    if cfg.get("ckpt_path") is not None or is_launched_rank() or not isinstance(value, str) or run_dir is None:
        return
    folder, version_hint = Path(value), ""
    if key == "save_dir":  # Lightning's loggers write into save_dir/name/version ("": none; an int: version_<int>)
        node = OmegaConf.select(cfg, node_key)
        if "version" not in node or node.version is None:
            return
        name, version = node.get("name"), node.version
        folder = folder / (name or "") / (f"version_{version}" if isinstance(version, int) else str(version))
        version_hint = f", {node_key}.version=null (a new version_N folder for each run)"
    where, here = folder.resolve(), Path(str(run_dir)).resolve()
    if where == here or here in where.parents or not folder.is_dir() or not (held := sorted(os.listdir(folder))):
        return
    more = f" and {len(held) - 1} more" if len(held) > 1 else ""
    named = f"{node_key}.{key}={value!r}" + ("" if folder == Path(value) else f": {folder}")
    swept = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    each_job = f" (in a sweep, a folder for each job: '{node_key}.{key}={value}/${{hydra:job.num}}')" if swept else ""
    raise ConfigError(f"{named} is outside the run directory and holds files already "
                      f"({held[0]!r}{more}), which this run would write over or add to; give a new or empty "
                      f"directory{each_job}, leave {node_key}.{key} out (the run directory){version_hint}, or resume "
                      f"the run that wrote them (ckpt_path=<its checkpoint>).")


def check_save_dir(cfg: DictConfig) -> None:
    """save_dir of train_sft.py, train_dpo.py, train_kto.py and train_reward_model.py: inside the run directory (the
    default, written again when the run is resumed), or a new or empty folder; the fit would write over another
    model's files at its end, and an empty value (an unset shell variable) would save into the working directory."""
    save_dir = cfg.get("save_dir")
    if save_dir is None:
        return
    path = Path(str(save_dir))
    check_not_empty("save_dir", save_dir, "give a new directory to save the trained model into, or leave save_dir "
                                          "out (the run directory's)")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"save_dir={str(save_dir)!r} is a file; give a new directory to save the trained model into.")
    run_dir = Path(cfg.paths.output_dir).resolve()
    if run_dir == path.resolve() or run_dir in path.resolve().parents or not path.is_dir() or not any(path.iterdir()):
        return
    raise ConfigError(f"save_dir={str(save_dir)!r} holds files already, which the trained model would overwrite; give "
                      f"a new or empty directory, or leave save_dir out (the run directory's).")
