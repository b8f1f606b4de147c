"""The apps (train.py, evaluate.py, train_reward_model.py, train_dpo.py, `python -m lit_rlhf.serve`, `-m
lit_rlhf.export`, `-m lit_rlhf.plot`, the bench scripts) run inside the test's process, from the argument list a user
types.

`run_app` executes the script as `python <script> args...` would (runpy: the script's own `__main__` block, Hydra's
composition, the run directory, the one-line error and its exit code), with stdout and stderr captured, and puts back
everything a run changes in a process: the working directory, environment, argv, sys.path, Hydra's singletons, the
logging tree and record factory, warning filters, the exception hooks, lit_rlhf's warned-once set, signal handlers,
torch's RNGs, thread count and compiled-code caches, a process group left behind, the run directory's lock. A
process pays about 10 s of imports on 2 cores before its first line; this pays none. A multi-rank run started here
keeps rank zero in this process, and Lightning's launcher starts the other ranks as processes of their own; run_app
waits for them to end (as a user's terminal shows their errors, a rank that ends with one fails the run here) and
leaves none running.

Only what a process alone can show runs in one (`run_process`): exit codes and stderr as a shell sees them under
signals, kill -9, two processes that meet, environment variables read at import time, what `import lit_rlhf` loads.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import random
import runpy
import signal
import subprocess
import sys
import threading
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
# what every app run gets, as a user running the tests offline would
BASE_ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "COLUMNS": "120"}
# read once, when a library is imported: a test that sets one needs a fresh process (run_process)
IMPORT_TIME_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "HF_ENDPOINT", "HF_HUB_CACHE",
                   "TRANSFORMERS_CACHE", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "LD_PRELOAD", "PYTHONHASHSEED")
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE)
RUNS = {"apps": 0}  # apps run in this process (tests/tiers.py marks such tests integration)


@dataclass
class AppResult:
    """What a test reads of a finished run, as subprocess.CompletedProcess names it."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_process(script: str, *args: str, cwd, env: dict | None = None, timeout: int = 300, module: bool = False,
                new_session: bool = False):
    """`python <repo>/<script> args...` (or `python -m <script>` with module=True) in a fresh process from cwd, with
    the package on PYTHONPATH: for what only a process shows. new_session: in a process group of its own (a signal
    to the group reaches the app and the processes it starts, never the test)."""
    RUNS["apps"] += 1
    full_env = {**os.environ, **BASE_ENV, "PYTHONPATH": str(ROOT), **(env or {})}
    target = ["-m", script] if module else [str(ROOT / script)]
    process = subprocess.Popen([sys.executable, *target, *args], cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=new_session)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if new_session:
            os.killpg(process.pid, signal.SIGKILL)  # the processes it started too (other ranks)
        else:
            process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_app(script: str, *args: str, cwd, env: dict | None = None, module: bool = False) -> AppResult:
    """`python <repo>/<script> args...` (or `python -m <script>`) run in this process; see the module doc."""
    RUNS["apps"] += 1
    env = {**BASE_ENV, **(env or {})}
    if late := [key for key in env if key in IMPORT_TIME_ENV and os.environ.get(key) != env[key]]:
        raise ValueError(f"{late} are read when libraries are imported; use run_process for this test")
    argv = [script if module else str(ROOT / script), *args]
    # sys.path[0] as the interpreter sets it: the working directory under -m, else the script's directory
    first_path = Path(cwd).resolve() if module else (ROOT / script).parent
    stdout, stderr = io.StringIO(), io.StringIO()
    observers_before = set(child_process_observers())
    with isolated_process_state(cwd, env, argv, first_path), redirect_output(stdout, stderr):
        returncode = execute(script, module)
    for rank, code in other_ranks_ended(observers_before, wait_s=120 if returncode == 0 else 10):
        if code != 0 and returncode == 0:  # a user would see the rank's own error; here the run fails
            print(f"tests.apps: rank {rank} ended with exit code {code} after rank 0 finished", file=stderr)
            returncode = 1
    return AppResult(argv, returncode, stdout.getvalue(), stderr.getvalue())


def child_process_observers() -> list:
    """The threads of Lightning's launchers that watch the ranks they started (lit_rlhf's LostRankObserver)."""
    if "lightning" not in sys.modules:
        return []
    from lightning.fabric.strategies.launchers.subprocess_script import _ChildProcessObserver

    return [thread for thread in threading.enumerate() if isinstance(thread, _ChildProcessObserver)]


def other_ranks_ended(observers_before: set, wait_s: float) -> list[tuple[int, int]]:
    """(rank, exit code) of each rank a multi-rank run started here, once it ended (killed past wait_s: after a failed
    run it may wait in a collective). Their observer would end this process (the test's worker) whenever one of them
    ended with an error, as it ends rank 0's process in a user's run: it is stopped first."""
    ended = []
    for observer in set(child_process_observers()) - observers_before:
        observer.exit = lambda code: None  # LostRankObserver's end of the process, after its grace period
        for rank, process in enumerate(observer._child_processes, start=getattr(observer, "rank", 0) + 1):
            try:
                process.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            ended.append((rank, process.returncode))
        observer._child_processes = []  # its next poll finds nothing running, and ends it
    return ended


def execute(script: str, module: bool) -> int:
    """Runs the script as __main__; the exit code a process would end with."""
    try:
        if module:
            # a fresh process has not imported the module before `-m` runs it; this one may have
            warnings.filterwarnings("ignore", message=".*found in sys.modules after import of package",
                                    category=RuntimeWarning)
            runpy.run_module(script, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(str(ROOT / script), run_name="__main__")
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1
    except Exception:  # as the interpreter does with an uncaught exception
        traceback.print_exc(file=sys.stderr)
        return 1
    return 0


@contextlib.contextmanager
def redirect_output(stdout: io.StringIO, stderr: io.StringIO):
    """sys.stdout / sys.stderr, and the logging handlers created on them before the run, write to the buffers."""
    handlers = [h for h in all_handlers() if type(h) is logging.StreamHandler]
    streams = [h.stream for h in handlers]
    for handler in handlers:
        set_stream(handler, stdout if handler.stream is sys.stdout else stderr)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            yield
    finally:
        for handler, stream in zip(handlers, streams, strict=True):
            set_stream(handler, stream)


def set_stream(handler: logging.StreamHandler, stream) -> None:
    """handler.setStream, which flushes the stream it replaces: not one closed since the handler was made (a library
    logger made on sys.stderr while an earlier test's output was captured, e.g. transformers' ContinuousBatchingLogger
    under pytest -n 0)."""
    if getattr(handler.stream, "closed", False):
        with handler.lock:
            handler.stream = stream
    else:
        handler.setStream(stream)


def all_handlers() -> list[logging.Handler]:
    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    return [h for lg in loggers for h in lg.handlers]


@contextlib.contextmanager
def isolated_process_state(cwd, env: dict, argv: list[str], first_path: Path):
    """A fresh process's state for the block, and this process's back afterwards."""
    import lit_rlhf.cli.errors as app_errors
    import lit_rlhf.cli.run_dirs as run_dirs
    import lit_rlhf.config.validation as validation
    import lit_rlhf.interrupts as interrupts

    saved_cwd, saved_env, saved_argv, saved_path = os.getcwd(), dict(os.environ), sys.argv[:], sys.path[:]
    saved_modules = set(sys.modules)
    saved_hydra = hydra_state()
    saved_logging = logging_state()
    saved_signals = {sig: signal.getsignal(sig) for sig in SIGNALS}
    saved_rng = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    saved_torch = torch.get_num_threads(), torch.get_default_dtype(), torch.get_float32_matmul_precision()
    saved_warned, saved_locks = set(validation._warned), len(run_dirs._held_locks)
    saved_hooks = logging.getLogRecordFactory(), warnings.formatwarning, sys.excepthook, threading.excepthook
    os.chdir(cwd)
    os.environ.update(env)
    sys.argv = argv
    user_paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT)]
    sys.path[:0] = [str(first_path), *user_paths, str(ROOT)]  # ROOT: the package, as run_process's PYTHONPATH
    # a relative entry (PYTHONPATH=.) keeps the finder made for it in the first run's directory (Python binds it to
    # that absolute path): a later run in another directory would not find its own modules there
    importlib.invalidate_caches()
    validation._warned.clear()
    app_errors._task_started = False
    interrupts.EXIT_PAST_HUNG_THREADS = False  # never end the test's process: a run that hangs is a process test
    fresh_hydra_state()
    try:
        with warnings.catch_warnings():
            fresh_warnings()
            yield
    finally:
        for handle in run_dirs._held_locks[saved_locks:]:
            handle.close()  # releases the run directory's flock, as the end of a process does
        del run_dirs._held_locks[saved_locks:]
        app_errors._task_started = False
        interrupts.EXIT_PAST_HUNG_THREADS = True
        validation._warned.clear()
        validation._warned.update(saved_warned)
        restore_hydra_state(saved_hydra)
        restore_logging(saved_logging)
        logging.setLogRecordFactory(saved_hooks[0])
        warnings.formatwarning, sys.excepthook, threading.excepthook = saved_hooks[1:]
        for sig, handler in saved_signals.items():
            signal.signal(sig, handler)
        random.setstate(saved_rng[0])
        np.random.set_state(saved_rng[1])
        torch.random.set_rng_state(saved_rng[2])
        torch.set_num_threads(saved_torch[0])
        torch.set_default_dtype(saved_torch[1])
        torch.set_float32_matmul_precision(saved_torch[2])
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()  # trainer=fsdp2 on one rank leaves its group behind
        if "torch._dynamo" in sys.modules:
            torch._dynamo.reset()  # compiled code and recompile counts start from nothing in a new process
        forget_user_modules(saved_modules, [Path(cwd), first_path, *map(Path, user_paths)])
        sys.path[:] = saved_path
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        if os.path.isdir(saved_cwd):  # a failed run may remove its new run directory, the test's cwd among them
            os.chdir(saved_cwd)


def fresh_warnings() -> None:
    """The interpreter's default filters, and warnings printed to stderr (pytest records them instead)."""
    warnings.resetwarnings()
    for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")

    def show(message, category, filename, lineno, file=None, line=None):
        (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show


def hydra_state() -> tuple[dict, dict]:
    from hydra.core.singleton import Singleton
    from omegaconf.basecontainer import BaseContainer

    return dict(Singleton._instances), dict(BaseContainer._resolvers)


def fresh_hydra_state() -> None:
    """GlobalHydra, HydraConfig and JobRuntime as a new process has none; what imports registered (plugins, config
    sources, structured configs) stays."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.singleton import Singleton
    from hydra.core.utils import JobRuntime

    per_run = (GlobalHydra, HydraConfig, JobRuntime)
    Singleton._instances = {cls: obj for cls, obj in Singleton._instances.items() if cls not in per_run}


def restore_hydra_state(saved: tuple[dict, dict]) -> None:
    from hydra.core.singleton import Singleton
    from omegaconf.basecontainer import BaseContainer

    Singleton._instances = saved[0]
    BaseContainer._resolvers = saved[1]


def forget_user_modules(before: set[str], directories: list[Path]) -> None:
    """Modules the run imported from the user's directories (a custom reward, an environment, a bench script's
    helpers): the next run imports its own. Nothing of the repository's package, tests or environment is forgotten."""
    kept = [ROOT / "lit_rlhf", ROOT / "tests", Path(sys.prefix).resolve()]
    roots = [d.resolve() for d in directories if d.resolve() != ROOT]
    for name in set(sys.modules) - before:
        file = getattr(sys.modules[name], "__file__", None)
        if not file:
            continue
        parents = Path(file).resolve().parents
        if any(root in parents for root in roots) and not any(k in parents for k in kept):
            del sys.modules[name]


def logging_state() -> dict:
    loggers = {"": logging.getLogger()} | {name: lg for name, lg in logging.Logger.manager.loggerDict.items()
                                           if isinstance(lg, logging.Logger)}
    return {name: (lg, lg.level, lg.handlers[:], lg.filters[:], lg.propagate, lg.disabled)
            for name, lg in loggers.items()}


def restore_logging(saved: dict) -> None:
    """Levels, handlers, filters and switches of the loggers that existed are put back; a handler the run attached
    (Hydra's console and train.log) is closed once nothing holds it."""
    during = all_handlers()
    for lg, level, handlers, filters, propagate, disabled in saved.values():
        if lg.level != level:  # setLevel clears every logger's cache: only where the run changed it
            lg.setLevel(level)
        lg.handlers, lg.filters, lg.propagate, lg.disabled = handlers, filters, propagate, disabled
    attached = {id(h) for h in all_handlers()}
    for handler in during:
        if id(handler) not in attached:
            handler.close()
