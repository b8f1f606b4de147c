"""Where a callback writes its files when it is given no folder: the run's own folder, as Lightning's ModelCheckpoint
finds it (the first logger's <save_dir>/<name>/<version>, e.g. runs/rloo/version_0), else the Trainer's
default_root_dir. Two runs in one default_root_dir then never mix their files. The apps name their run directory
explicitly (dirpath in conf/callbacks/)."""

from __future__ import annotations

from pathlib import Path

import lightning as L


def run_folder(trainer: L.Trainer, dirpath: str | Path | None = None) -> Path:
    if dirpath is not None:
        return Path(dirpath)
    if not trainer.loggers:
        return Path(trainer.default_root_dir)
    logger = trainer.loggers[0]
    version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
    return Path(logger.save_dir or trainer.default_root_dir, str(logger.name), version)
