"""How the apps end: a user mistake is one line and exit code 2, an interrupted run 130 or 143, Hydra's own
composition errors 2 as well (see docs/reliability.md#errors-and-exit-codes)."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hydra.errors import InstantiationException
from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue

from lit_rlhf.cli.app_arguments import app_arguments, config_flags, hydra_initialized, search_command_line_config_dir
from lit_rlhf.cli.composition import app_command, composition_error, hydra_node_alone_line, raised_in_the_job
from lit_rlhf.cli.import_failures import import_failure_line
from lit_rlhf.cli.null_settings import mappings_fill_null_settings
from lit_rlhf.cli.override_forms import removed_or_unresolved_line
from lit_rlhf.cli.stop_lines import interruptions_end_the_process
from lit_rlhf.cli.trainer_arguments import trainer_refusal_line
from lit_rlhf.errors import (
    EXIT_USER_ERROR,
    ConfigError,
    UnavailableError,
    exit_with_user_error,
    nearest,
    os_error_message,
    remember_traceback_choice,
    tracebacks_asked,
)
from lit_rlhf.stops_outside_stages import (
    TerminatedOutsideTheStages,
    forget_stops_heard,
    stop_heard_outside_the_stages,
    take_stops_outside_the_stages,
)

T = TypeVar("T")


# groups the algo config holds under other names (conf/algo/common): the key as the user writes it
NESTED_GROUPS = {"algo.environment.": "env.", "algo.reward.": "reward.", "algo.teacher.": "teacher."}


# where a required key has a ready answer: what to run, or where the page that starts with one is
REQUIRED_KEY_HINTS = {
    "teacher.name_or_path": (" (a causal LM folder with the student's tokenizer); to start with an embedded teacher: "
                             "python train.py experiment=calculator_distill (docs/distillation.md)"),
}


def user_key(name: str) -> str:
    """A composed config key as the user writes it on the command line (algo.reward.url -> reward.url)."""
    for nested, group in NESTED_GROUPS.items():
        if name.startswith(nested):
            return group + name.removeprefix(nested)
    return name


def config_key(err: BaseException) -> str:
    """The config key (with a trailing dot) an instantiation error names, as the user writes it."""
    key = re.search(r"full_key: (\S+)", str(err))
    return "" if key is None else user_key(key.group(1)) + "."


def is_lightning_misconfiguration(err: BaseException) -> bool:
    """Without importing Lightning (seconds at start-up): an error raised before it was imported is not its own."""
    lightning_errors = sys.modules.get("lightning.fabric.utilities.exceptions")
    return lightning_errors is not None and isinstance(err, lightning_errors.MisconfigurationException)


def user_error(err: BaseException) -> str | None:
    """The one-line message for a mistake the user can fix, looking through Hydra's instantiate wrapper."""
    while err is not None:
        if isinstance(err, (ConfigError, UnavailableError)):
            return str(err)
        if (line := spawned_rank_line(err)) is not None:
            return line
        if (message := os_error_message(err)) is not None:
            return message
        if isinstance(err, InstantiationException) and "Error locating target" in str(err):
            target, key = re.search(r"target '([^']*)'", str(err)), config_key(err)
            example = " (e.g. torch.optim.AdamW)" if key.endswith("optimizer.") else ""
            return import_failure_line(f"{key}_target_", target.group(1) if target else "?", err, example)
        if isinstance(err, InstantiationException) and (line := unexpected_argument_line(err)):
            return line
        if isinstance(err, InstantiationException) and "Expected a callable target" in str(err):
            target = re.search(r"got '([^']*)'", str(err))
            return (f"{config_key(err)}_target_ names {target.group(1) if target else 'a value'!r}, which is not "
                    f"callable; name a class or function.")
        if is_lightning_misconfiguration(err):  # Lightning's own messages name the setting
            first = (str(err).strip().splitlines() or [""])[0]
            return trainer_refusal_line(first) or f"{first} (check the trainer group's settings)"
        if isinstance(err, InstantiationException) and (line := trainer_value_line(err)):
            return line
        if (line := removed_or_unresolved_line(err)) is not None:
            return line
        if isinstance(err, MissingMandatoryValue):
            key = user_key(err.full_key) if err.full_key else str(err)
            return (f"{key} is required (marked ??? in conf/); set it on the command line: {key}=..."
                    f"{REQUIRED_KEY_HINTS.get(key, '')}")
        err = err.__cause__
    return None


def trainer_value_line(err: InstantiationException) -> str | None:
    """Lightning's Trainer refusing a value with a ValueError, TypeError or ImportError instead of its
    MisconfigurationException (trainer.num_nodes=0, trainer.precision=bf17, trainer.accelerator=tpu without
    torch_xla): its first line, which names the argument; None for any other error."""
    cause = err.__cause__
    if (not isinstance(cause, (ValueError, TypeError, ImportError))
            or "target 'lightning.pytorch.trainer.trainer.Trainer'" not in str(err)):
        return None
    first = (str(cause).strip().splitlines() or [""])[0]
    return f"{first} (check the trainer group's settings)"


def spawned_rank_line(err: BaseException) -> str | None:
    """A one-line error raised in a rank that trainer=ddp_spawn started (its setup, its checks, its RL steps): torch
    hands it back as the rank's traceback, in text (ProcessRaisedException), whose last line is the error's."""
    from torch.multiprocessing import ProcessRaisedException

    if not isinstance(err, ProcessRaisedException):
        return None
    last = ([line for line in str(err).splitlines() if line.strip()] or [""])[-1]
    found = re.fullmatch(r"lit_rlhf\.errors\.(?:ConfigError|UnavailableError): (.+)", last.strip())
    return f"rank {err.error_index}: {found.group(1)}" if found else None


def unexpected_argument_line(err: InstantiationException) -> str | None:
    """`+algo.activation_offloading=true` where the class Hydra builds takes no such argument (Python's TypeError, as
    Hydra wraps it): one line naming the key and, for a TRL name, what this library does instead, else the arguments
    it takes or the nearest one. A TypeError raised inside the constructor is not it."""
    from hydra.utils import get_object

    from lit_rlhf.cli.own_components import constructor_arguments

    found = re.search(r"Error in call to target '([^']+)':\nTypeError\(\"([\w.<>]+)\(\) got an unexpected keyword "
                      r"argument '(\w+)'", str(err))
    if found is None:
        return None
    target, called, argument = found.groups()
    try:
        cls = get_object(target)
    except Exception:  # noqa: BLE001 (it was imported to be called; if not, Hydra's own line is the one)
        return None
    if not isinstance(cls, type) or called != f"{cls.__qualname__}.__init__":  # raised by a call inside it
        return None
    names, takes_any = constructor_arguments(cls)
    if argument in names or takes_any:
        return None
    from lit_rlhf.config.trl_names import python_hint

    hint = python_hint(argument) or nearest(argument, [n for n in names if n != "model"])  # a TRL name before spelling
    return f"{config_key(err)}{argument} is not an argument of {target.rsplit('.', 1)[-1]}{hint}; remove it."


_task_started = False


def set_up_app_output() -> None:
    """What libraries print reaches the terminal escaped (escape_what_libraries_print), and each of Lightning's lines
    once: the apps import Lightning once Hydra has set up logging (a fast --help), so Lightning's loggers find the root
    logger's handlers and pass their lines up; its package logger prints them with a console handler of its own, and
    would pass them on to Hydra's console too. stdout and stderr go on once their reader has gone (`| head`), SIGTERM
    in the first seconds stops the app as Ctrl-C does, and SIGHUP (the terminal closed) as SIGTERM does. Called by the
    app's process and in its task, which a Hydra launcher may run in a process of its own (hydra/launcher=joblib)."""
    from lit_rlhf.dropped_stops import keep_dropped_stops
    from lit_rlhf.noise import silence_import_logs
    from lit_rlhf.output_streams import outputs_survive_their_readers, take_hangup_for_sigterm
    from lit_rlhf.terminal import escape_what_libraries_print

    keep_dropped_stops()  # a Ctrl-C a finalizer dropped in the imports stops the run where its set-up begins
    escape_what_libraries_print()
    outputs_survive_their_readers()
    take_stops_outside_the_stages()  # SIGTERM in the imports as Ctrl-C there: one line, no run directory left
    take_hangup_for_sigterm()
    silence_import_logs()
    logging.getLogger("lightning").propagate = False


def mark_task_started() -> None:
    """From here on, an exit code 1 is the task's own error, not Hydra's composition."""
    global _task_started
    _task_started = True


def run_hydra_app(main: Callable[[], Any], config_name: str, config_dir: Path | None = None) -> None:
    """Runs a @hydra.main function (its conf/ beside the script). Hydra's own errors (an unknown key, a
    misspelled group option, a value of the wrong type) are user mistakes too: one line naming the key and
    the nearest valid one, exit code 2 like ours. Exit code 1 stays for errors raised inside the task that
    are not user mistakes (with a traceback)."""
    remember_traceback_choice()  # the user's HYDRA_FULL_ERROR=1: each one-line error after its traceback
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # Hydra re-raises instead of printing its own report
    forget_stops_heard()
    set_up_app_output()
    own_config_name = config_name
    arguments = app_arguments(sys.argv, config_dir or Path(sys.argv[0]).resolve().parent / "conf", config_name)
    search_command_line_config_dir(arguments.extra_config_dir)
    if (arguments.printed_config is not None or arguments.wants_help) and hasattr(signal, "SIGPIPE"):
        # a command that only prints ends quietly when its reader does (`--info | head`), as cat does; Hydra logs
        # --info, and each line after a closed pipe was a logging error's traceback (not for a run: SIGPIPE would
        # end it at once, without its checkpoint)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    config_dir, config_name, overrides = arguments.config_dir, arguments.config_name, arguments.overrides
    from lit_rlhf.cli.run_dirs import run_dirs_named_not_created, run_location_line

    if line := run_location_line(overrides):  # before Hydra creates the run directory
        exit_with_user_error(line)
    try:
        from lit_rlhf.cli.configs import register_configs
        from lit_rlhf.cli.plugins import import_searchpath_packages

        import_searchpath_packages(overrides)  # a package's own algorithms register before the config composes
        register_configs()
        # mappings_fill_null_settings: model.lora={r: 8} where a config file set model.lora: null
        with mappings_fill_null_settings(), run_dirs_named_not_created(arguments.printed_config is not None):
            if arguments.wants_help and print_app_help(config_dir, config_name, overrides):
                return
            main()
        from lit_rlhf.cli.sweeps import every_job_failed_line, stopped_sweep_line

        if stopped := stopped_sweep_line():  # its jobs ran in a launcher's workers
            print(stopped[0], file=sys.stderr, flush=True)
            sys.exit(stopped[1])
        if line := every_job_failed_line():
            exit_with_user_error(line)
    except (KeyboardInterrupt, TerminatedOutsideTheStages) as err:  # no stage heard it (the first seconds: imports)
        from lit_rlhf.cli.run_dirs import end_stopped_outside_the_stages

        if tracebacks_asked():
            raise
        end_stopped_outside_the_stages("SIGTERM" if isinstance(err, TerminatedOutsideTheStages) else "SIGINT")
    except SystemExit as err:
        if err.code == 1 and not _task_started:
            sys.exit(EXIT_USER_ERROR)
        if "lit_rlhf.interrupts" in sys.modules:  # a task ran (--help and setting errors end before, and fast)
            from lit_rlhf.interrupts import exit_past_hung_threads

            exit_past_hung_threads(err.code if isinstance(err.code, int) else 1)  # calls an interrupt abandoned
        raise
    except Exception as err:
        from lit_rlhf.cli.run_dirs import end_stopped_outside_the_stages
        from lit_rlhf.cli.sweeps import no_completed_trial_line, stopped_sweep_line

        if (heard := stop_heard_outside_the_stages()) and not _task_started and not tracebacks_asked():
            end_stopped_outside_the_stages(heard)  # the error of what the stop broke: a half-made import, a composition

        if (stopped := stopped_sweep_line()) and not tracebacks_asked():  # what the sweeper raised came of the stop
            print(stopped[0], file=sys.stderr, flush=True)
            sys.exit(stopped[1])
        if line := no_completed_trial_line(err):  # Optuna's sweeper, after its trials (or none) ran
            exit_with_user_error(line, cause=err)
        if _task_started:
            raise
        if raised_in_the_job(err):  # its modules' import, after composition (a broken install): no setting's mistake
            from lit_rlhf.cli.run_dirs import remove_claimed_run_dir_holding_nothing

            remove_claimed_run_dir_holding_nothing()
            raise
        command = app_command(own_config_name, config_flags(sys.argv[1:]))
        if arguments.printed_config == "hydra" and "Interpolation key" in str(err):
            exit_with_user_error(hydra_node_alone_line(command), cause=err)
        exit_with_user_error(composition_error(err, config_dir, config_name, overrides, command), cause=err)


def print_app_help(config_dir: Path, config_name: str, overrides: list[str]) -> bool:
    """The app's help (its hydra.help.template, $CONFIG the config composed with the overrides), as Hydra's --help
    prints it, without the two listings of every config group Hydra makes whatever the template (seconds); False,
    printing nothing, for a template that shows Hydra's own listings (Hydra's --help prints it then)."""
    import string

    from hydra import compose
    from omegaconf import OmegaConf, open_dict

    with hydra_initialized(config_dir, job_name=config_name):
        cfg = compose(config_name, overrides=overrides, return_hydra_config=True)
    template = cfg.hydra.help.template
    if any(f"${name}" in template for name in ("APP_CONFIG_GROUPS", "HYDRA_CONFIG_GROUPS", "FLAGS_HELP")):
        return False
    with open_dict(cfg):
        del cfg["hydra"]
    print(string.Template(template).safe_substitute(CONFIG=OmegaConf.to_yaml(cfg)))
    return True


def report_failed_job(err: Exception) -> str:
    """A sweep's job that failed, on stderr before the sweep goes on: a user mistake as a single run shows it (`error:
    <one line>`, its traceback first only with HYDRA_FULL_ERROR=1), any other error with its traceback; control
    characters escaped and URLs' passwords masked. Returns the line its result.json records."""
    import traceback

    from lit_rlhf.terminal import printable

    message = user_error(err)
    if message is None or tracebacks_asked():
        print(printable("".join(traceback.format_exception(err))), file=sys.stderr, end="", flush=True)
    if message is not None:
        print(f"error: {printable(message, one_line=True)}", file=sys.stderr, flush=True)
    return ((message or f"{type(err).__name__}: {err}").strip().splitlines() or [""])[0]


def report_user_errors(fn: Callable[[DictConfig], T], cfg: DictConfig,
                       on_interrupt: Callable[[str], None] | None = None,
                       on_failure: Callable[[str], None] | None = None, step_name: str = "RL step") -> T:
    """fn(cfg) with user mistakes reported as one line (exit code 2) instead of a stack trace; a run stopped
    by SIGTERM or Ctrl-C exits 143 or 130 after on_interrupt(message) (interruptions_end_the_process); on_failure(line)
    records any other failure (a user mistake's line, or an unexpected error's type and message) before the exit.
    step_name: what the app's messages call the unit it trains in ("RL step"; "training step" for the scripts that
    fit on a file)."""
    mark_task_started()
    try:
        with interruptions_end_the_process(on_interrupt, step_name):
            return fn(cfg)
    except Exception as err:
        message = user_error(err)
        if message is None:
            if on_failure is not None:
                on_failure(f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}")
            raise
        from lit_rlhf.cli.run_dirs import discard_unused_run_dir

        discard_unused_run_dir(cfg)  # a run that failed its checks leaves no empty run directory behind
        if on_failure is not None:
            on_failure(str(message))
        exit_with_user_error(message, cause=err)
