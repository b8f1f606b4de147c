"""Run directories: each default one is new, and a run never writes into another run's records.

- `${new_run_dir:BASE}` (the default hydra.run.dir and hydra.sweep.dir) creates BASE, or BASE_1,
  BASE_2, ... when it exists, with an atomic mkdir: two runs started in the same second get two.
- RunDirectoryGuard (a Hydra callback) refuses an explicit hydra.run.dir / hydra.sweep.dir that
  already holds files, unless the run resumes from it (ckpt_path inside it, or ckpt_path=last) or
  overwrite_run_dir=true (its old contents are deleted first). It runs before Hydra writes .hydra/.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf


def new_run_dir(base: str) -> str:
    """Creates and returns a directory that did not exist: base, else base_1, base_2, ..."""
    Path(base).parent.mkdir(parents=True, exist_ok=True)
    for n in range(10_000):
        candidate = base if n == 0 else f"{base}_{n}"
        try:
            os.mkdir(candidate)
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a new run directory next to {base}")


def is_launched_rank() -> bool:
    """Lightning's DDP launcher re-runs train.py on the other ranks with the rank-0 run directory."""
    return any(os.environ.get(name, "0") != "0" for name in ("LOCAL_RANK", "RANK", "NODE_RANK"))


def resumes_from(cfg: DictConfig, run_dir: Path) -> bool:
    ckpt = cfg.get("ckpt_path")
    if ckpt is None:
        return False
    if str(ckpt) == "last":
        return True
    return "://" not in str(ckpt) and run_dir.resolve() in Path(str(ckpt)).resolve().parents


def claim_run_dir(cfg: DictConfig, key: str) -> None:
    """Exit 2 with one line when the directory at `key` holds another run's files (see module doc)."""
    run_dir = Path(str(OmegaConf.select(cfg, key)))
    if is_launched_rank() or not run_dir.is_dir() or not any(run_dir.iterdir()) or resumes_from(cfg, run_dir):
        return
    if cfg.get("overwrite_run_dir"):
        for entry in run_dir.iterdir():
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        return
    print(f"error: {key}={run_dir} already holds another run's files; pick a new directory, resume from it "
          f"(ckpt_path=last or a checkpoint inside it), or pass overwrite_run_dir=true to delete them.",
          file=sys.stderr)
    sys.exit(2)


class RunDirectoryGuard(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        claim_run_dir(config, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        claim_run_dir(config, "hydra.sweep.dir")
