"""Run directories: each default one is new, and a run never writes into another run's records.

- `${new_run_dir:BASE}` (the default hydra.run.dir and hydra.sweep.dir) creates BASE, or BASE_1,
  BASE_2, ... when it exists, with an atomic mkdir: two runs started in the same second get two. An app that
  only prints its config (`--cfg all`) is told the name and creates nothing.
- RunDirectoryGuard (a Hydra callback) refuses an explicit hydra.run.dir / hydra.sweep.dir that
  already holds files, unless the run resumes from it (ckpt_path inside it, or ckpt_path=last) or
  overwrite_run_dir=true on a directory a previous run wrote (its .hydra/ or multirun.yaml) and that holds nothing
  a run does not write (RUN_ENTRIES): its old contents are deleted first. A directory no run wrote, or files no run
  writes, are never deleted. It runs before Hydra writes .hydra/.
- Then it locks the directory (`.run.lock`, an flock held until the process ends): a second process on
  the same run directory, e.g. `ckpt_path=last` while the run is still going, is refused in one line.
- run_location_line: a run location typed empty, or paths.output_dir typed, is one line before Hydra creates it.
- The folders a run writes outside its run directory: lit_rlhf/cli/output_folders.py.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from lit_rlhf.cli.sweep_stops import STOP_MARKER
from lit_rlhf.errors import EXIT_SIGINT, EXIT_SIGTERM, empty_value_line, said
from lit_rlhf.output_streams import HUNG_UP, hung_up
from lit_rlhf.terminal import printable

# True while an app only prints its config (--cfg, --info): nothing runs, so nothing is created
_printing_config: list[bool] = [False]
# the folders above the new run directory that new_run_dir created (logs/train/runs/, ...), deepest first
_created_parents: list[Path] = []


@contextlib.contextmanager
def run_dirs_named_not_created(printing_config: bool) -> Iterator[None]:
    """Within it, if printing_config, ${new_run_dir:...} names the directory a run would get and creates none, so
    that printing the config (`--cfg all --resolve`) leaves no empty run directory to be taken for a run."""
    _printing_config[0] = printing_config
    try:
        yield
    finally:
        _printing_config[0] = False


def new_run_dir(base: str) -> str:
    """Creates and returns a directory that did not exist: base, else base_1, base_2, ... (while the config is only
    printed, run_dirs_named_not_created, returns the first that does not exist and creates nothing)."""
    if not _printing_config[0]:
        _created_parents[:] = [parent for parent in Path(os.path.abspath(base)).parents if not parent.exists()]
        Path(base).parent.mkdir(parents=True, exist_ok=True)
    for n in range(10_000):
        candidate = base if n == 0 else f"{base}_{n}"
        if _printing_config[0]:
            if not os.path.lexists(candidate):
                return candidate
            continue
        try:
            os.mkdir(candidate)
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a new run directory next to {base}")


# the keys that place the run directory, read as Hydra creates it (before the app's checks)
RUN_LOCATION_KEYS = ("paths.root_dir", "paths.log_dir", "hydra.run.dir", "hydra.sweep.dir")


def run_location_line(overrides: list[str]) -> str | None:
    """The line for a run location typed empty (`paths.log_dir=$LOGS` with the variable unset), which put the run at
    the filesystem's root (/train/runs/...) or in the working directory, for an empty task_name (logs/runs/), or for
    paths.output_dir, which follows hydra.run.dir: typed, it wrote the run's files where the run directory's guard
    does not look; else None."""
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key == "paths.output_dir":
            return (f"{override.lstrip('+~')}: paths.output_dir follows hydra.run.dir; set hydra.run.dir=<a new or "
                    f"empty directory> instead (or the run's own directory, with ckpt_path=last, to resume it).")
        typed = value.strip().strip("'\"")
        if key in RUN_LOCATION_KEYS and not typed:
            return empty_value_line(f"{key}={typed!r}", f"give a directory, or leave {key} out")
        if key == "task_name" and not typed:  # the runs went to logs/runs/, beside the apps' folders
            return empty_value_line("task_name=''", "give the runs' folder a name (logs/<task_name>/runs/), or leave "
                                                    "task_name out")
    return None


def is_launched_rank() -> bool:
    """Lightning's DDP launcher re-runs train.py on the other ranks with the rank-0 run directory."""
    return any(os.environ.get(name, "0") != "0" for name in ("LOCAL_RANK", "RANK", "NODE_RANK"))


def in_multi_process_launch() -> bool:
    """Started by a launcher of several processes that share the run directory (torchrun on several nodes, SLURM):
    their Hydra start files may land there before rank zero's guard looks."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 or int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1


def resumes_from(cfg: DictConfig, run_dir: Path) -> bool:
    """Whether the run resumes from a checkpoint that is there in run_dir (ckpt_path=last: checkpoints/last.ckpt): one
    that is not is no reason to write into a directory holding files (the task's own line says it is missing)."""
    ckpt = cfg.get("ckpt_path")
    if ckpt is None:
        return False
    if str(ckpt) == "last":
        return (run_dir / "checkpoints" / "last.ckpt").exists()  # a file, or a sharded directory (trainer=fsdp2)
    path = Path(str(ckpt))
    return "://" not in str(ckpt) and path.exists() and run_dir.resolve() in path.resolve().parents


LOCK_FILE = ".run.lock"
RUN_MARKERS = (".hydra", "multirun.yaml")  # what Hydra writes into every run and sweep directory
# what the apps, their callbacks, loggers and sweeps write at the top of a run or sweep directory (and <task>.log,
# and a sweep's numbered job directories): overwrite_run_dir=true deletes a directory that holds nothing else
RUN_ENTRIES = {*RUN_MARKERS, LOCK_FILE, STOP_MARKER, "csv", "tensorboard", "wandb", "lightning_logs", "checkpoints",
               "evaluation", "policy", "reward_model", "result.json", "samples.jsonl", "curves.png", "gold.json",
               "evaluation.json", "generations.jsonl", "scores.png", "summary.csv", "optimization_results.yaml",
               ".submitit"}
_held_locks: list[Any] = []  # open lock files: their flocks last as long as the process


def refuse(message: str) -> None:
    print(f"error: {printable(message, one_line=True)}", file=sys.stderr, flush=True)
    sys.exit(2)


def claim_run_dir(cfg: DictConfig, key: str) -> None:
    """Exit 2 with one line when the directory at `key` holds another run's files or is in use by another
    process (see module doc); otherwise lock it for this process."""
    run_dir = Path(str(OmegaConf.select(cfg, key)))
    if is_launched_rank():
        return
    lock_was_there = (run_dir / LOCK_FILE).exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock_run_dir(run_dir, key)
    except OSError as err:  # a full, read-only or missing disk: nothing of the run can be written
        fix = "free some space or point" if err.errno in (errno.ENOSPC, errno.EDQUOT) else "point"
        refuse(f"cannot write into {key}={run_dir} ({err.strerror}); {fix} {key} (or paths.log_dir) at a "
               f"directory you can write to.")
    if not any(p.name != LOCK_FILE for p in run_dir.iterdir()) or resumes_from(cfg, run_dir):
        return
    if in_multi_process_launch() and holds_nothing_of_a_run(run_dir):
        return  # the other ranks of this launch (torchrun, SLURM: other nodes) already wrote Hydra's start files
    if (line := refusal(cfg, key, run_dir)) is not None:
        if not lock_was_there:  # a refused directory is left as it was found
            (run_dir / LOCK_FILE).unlink(missing_ok=True)
        refuse(line)
    for entry in run_dir.iterdir():  # overwrite_run_dir=true on a previous run's directory
        if entry.name != LOCK_FILE:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def refusal(cfg: DictConfig, key: str, run_dir: Path) -> str | None:
    """Why the run may not write into run_dir, which holds files and is not resumed from (see module doc), or None
    where overwrite_run_dir=true may delete them."""
    ckpt = cfg.get("ckpt_path")  # a missing one: the task's own line, before Hydra writes into a directory of files
    if str(ckpt) == "last":
        return (f"ckpt_path=last: {run_dir / 'checkpoints' / 'last.ckpt'} does not exist; pass hydra.run.dir=<the "
                f"run's directory> with ckpt_path=last, or ckpt_path=<path to a .ckpt>.")
    if ckpt is not None and "://" not in str(ckpt) and not Path(str(ckpt)).exists():
        return (f"ckpt_path={str(ckpt)!r} is not a file; give a .ckpt written by lit_rlhf (e.g. <run dir>/checkpoints/"
                f"last.ckpt).")
    overwrite = cfg.get("overwrite_run_dir")
    if not isinstance(overwrite, bool) and overwrite is not None:  # "ture" would delete the run's files
        return f"overwrite_run_dir={overwrite!r} must be true or false."
    if not overwrite and holds_nothing_of_a_run(run_dir):  # a run killed as it started (SIGKILL, out of memory)
        return (f"{key}={run_dir} holds only the start files of a run that ended before it wrote anything; "
                f"pass overwrite_run_dir=true to start this run in it, or pick a new directory.")
    if not overwrite:
        return (f"{key}={run_dir} already holds another run's files; pick a new directory, resume from it "
                f"(ckpt_path=last or a checkpoint inside it), or pass overwrite_run_dir=true to delete them.")
    if not any((run_dir / marker).exists() for marker in RUN_MARKERS):
        return (f"overwrite_run_dir=true, but {key}={run_dir} was not written by a run (no .hydra/ in it), and only "
                f"a previous run's directory is deleted; pick a new or empty directory.")
    if foreign := entries_no_run_writes(run_dir):
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        return (f"overwrite_run_dir=true, but {key}={run_dir} holds {foreign[0]!r}{more}, which no run writes, and "
                f"only a previous run's own files are deleted; move it out, or pick a new or empty directory.")
    return None


def latest_resumable_run(run_dir: Path) -> Path | None:
    """The run directory beside run_dir (logs/train/runs/<date>) whose checkpoints/last.ckpt was written last."""
    try:
        others = [entry for entry in run_dir.parent.iterdir() if entry != run_dir]
    except OSError:
        return None
    last = written_last(entry / "checkpoints" / "last.ckpt" for entry in others)
    return None if last is None else last.parents[1]


def latest_training_checkpoint(log_dir: Path) -> Path | None:
    """The last.ckpt written last by a training run under log_dir: logs/<task>/runs/<date>, or a sweep's job."""
    return written_last([*log_dir.glob("*/runs/*/checkpoints/last.ckpt"),
                         *log_dir.glob("*/multiruns/*/*/checkpoints/last.ckpt")])


def written_last(paths: Iterable[Path]) -> Path | None:
    """Of the paths that exist, the one modified last."""
    stamped = []
    for path in paths:
        with contextlib.suppress(OSError):
            stamped.append((path.stat().st_mtime, path))
    return max(stamped, default=(None, None))[1]


def entries_no_run_writes(run_dir: Path) -> list[str]:
    """The names at the top of run_dir that no run writes (yours: notes, data, code), sorted."""
    return sorted(entry.name for entry in run_dir.iterdir()
                  if entry.name not in RUN_ENTRIES and entry.suffix != ".log" and not entry.name.isdigit())


def lock_run_dir(run_dir: Path, key: str) -> None:
    """An exclusive flock on run_dir/.run.lock for the rest of this process; one line when another holds it."""
    handle = open(run_dir / LOCK_FILE, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        refuse(f"{key}={run_dir} is in use by a run still going ({holder}); wait for it to end (or stop it), "
               f"then resume with ckpt_path=last, or pick another directory.")
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    _held_locks.append(handle)


class RunDirectoryGuard(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        claim_run_dir(config, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        claim_run_dir(config, "hydra.sweep.dir")


def holds_nothing_of_a_run(run_dir: Path) -> bool:
    """True when run_dir holds only what Hydra and the lock write at start (.hydra/, .run.lock, empty logs; a sweep's
    multirun.yaml, its stop marker, and its jobs' directories holding as little)."""
    for path in run_dir.rglob("*"):
        relative = path.relative_to(run_dir)
        if ".hydra" in relative.parts[:-1] or relative.parts[0] in (LOCK_FILE, "multirun.yaml", STOP_MARKER):
            continue
        if path.is_dir():
            continue
        if path.suffix == ".log" and path.stat().st_size == 0:
            continue
        return False
    return True


def discard_unused_run_dir(cfg: DictConfig) -> None:
    """After a run failed its checks before writing anything: its new run directory goes, not to be mistaken for
    a run (a directory holding checkpoints, metrics or another run's files is never touched)."""
    try:
        run_dir = Path(cfg.paths.output_dir)
    except Exception:  # no Hydra run (library use) or an unresolved path: nothing to clean
        return
    if run_dir.is_dir() and holds_nothing_of_a_run(run_dir):
        remove_unused_run_dir(run_dir)


def discard_unused_sweep_dir() -> None:
    """After a sweep's first trial refused what ends the whole sweep (the search's objective): the sweep's new
    directory goes too, as a refused run's does (it was left holding its lock file alone)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return
    hydra = HydraConfig.get()
    sweep_dir = Path(hydra.runtime.cwd, hydra.sweep.dir)  # the command's directory (hydra.job.chdir=true left it)
    if sweep_dir.is_dir() and holds_nothing_of_a_run(sweep_dir):
        remove_unused_run_dir(sweep_dir)


def remove_unused_run_dir(run_dir: Path) -> None:
    """Removes a run directory that holds nothing of a run, and the folders above it that new_run_dir created and that
    are empty then: a refused first run left an empty logs/train/runs/ behind, a folder kept for runs."""
    stop_logging_into(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    above = Path(os.path.abspath(run_dir)).parents
    for parent in _created_parents:
        try:
            if parent not in above:  # created for another run directory (an app run before in this process)
                break
            parent.rmdir()  # only an empty one: another run started since keeps it
        except OSError:
            break


def stop_logging_into(run_dir: Path) -> None:
    """Closes the log handlers that write into run_dir: Hydra's file handler opens <run dir>/<app>.log at the first
    line it logs (delay: true), and a line logged once the directory was removed (a library's at the process's exit)
    was a FileNotFoundError's traceback."""
    inside = os.path.join(os.path.abspath(run_dir), "")
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in list(getattr(logger, "handlers", [])):  # a PlaceHolder has none
            if isinstance(handler, logging.FileHandler) and handler.baseFilename.startswith(inside):
                logger.removeHandler(handler)
                handler.close()


def stop_outside_the_stages_line(signal_name: str) -> str:
    """The line for a Ctrl-C or SIGTERM that none of the app's stages heard: in its first seconds (Lightning's imports
    once the config is composed, before the set-up listens) Ctrl-C was a KeyboardInterrupt's traceback, and SIGTERM
    ended the process without a word. The run directory this process claimed (RunDirectoryGuard's lock), holding
    nothing of a run yet, goes, as a refused run's does. After HUNG_UP where SIGHUP (the terminal closed) stopped it."""
    stop = f"{HUNG_UP if signal_name == 'SIGTERM' and hung_up() else ''}stopped by {said(signal_name)}"
    if not _held_locks:
        return f"{stop} before the run began: nothing was written; run the same command again to start it."
    run_dir = Path(_held_locks[-1].name).parent
    (run_dir / STOP_MARKER).unlink(missing_ok=True)  # a sweep's, once a third Ctrl-C ended it
    if what := remove_claimed_run_dir_holding_nothing():
        return f"{stop} as the {what} started: nothing was trained or written; run the same command again to start it."
    return f"{stop}; what was written until then is in {printable(run_dir)}."


def end_stopped_outside_the_stages(signal_name: str) -> None:
    """Ends the app stopped by Ctrl-C or SIGTERM outside its stages: its line, exit 130 or 143."""
    print(stop_outside_the_stages_line(signal_name), file=sys.stderr, flush=True)
    sys.exit(EXIT_SIGINT if signal_name == "SIGINT" else EXIT_SIGTERM)


def remove_claimed_run_dir_holding_nothing() -> str | None:
    """Removes the run directory this process claimed last (RunDirectoryGuard's lock) where it holds nothing of a run
    (the job ended before its task began: a Ctrl-C, its modules' import failing); "run" or "sweep" where it did."""
    run_dir = Path(_held_locks[-1].name).parent if _held_locks else None
    if run_dir is None or not run_dir.is_dir() or not holds_nothing_of_a_run(run_dir):
        return None
    what = "sweep" if (run_dir / "multirun.yaml").exists() else "run"
    remove_unused_run_dir(run_dir)
    return what


def hide_passwords_in_saved_configs() -> None:
    """Hydra saves the composed config and the command line's overrides (.hydra/*.yaml, a sweep's multirun.yaml)
    before the task starts: a URL's password in them (reward.url=http://user:password@host), and a token typed
    as a token setting's value (reward.auth_env=<the token>), are masked there."""
    from hydra.core.hydra_config import HydraConfig

    from lit_rlhf.terminal import without_passwords

    if not HydraConfig.initialized():
        return
    hydra_cfg = HydraConfig.get()
    saved = []
    if hydra_cfg.output_subdir is not None:
        saved += list((Path(hydra_cfg.runtime.output_dir) / hydra_cfg.output_subdir).glob("*.yaml"))
    if hydra_cfg.mode == RunMode.MULTIRUN:
        saved.append(Path(hydra_cfg.sweep.dir) / "multirun.yaml")
    for path in saved:
        try:
            text = path.read_text()
        except OSError:
            continue
        masked = without_passwords(text)
        if masked != text:
            path.write_text(masked)
