"""train.py's task: instantiate everything from the config, fit, report, return the sweep objective."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from lit_rlhf.algos.run_length import time_limit_stop_line
from lit_rlhf.callbacks import CheckpointOnInterrupt, GoldReward, PolicyEvaluation
from lit_rlhf.callbacks.interrupt import stopped_by_interrupt, stops_before_training_said
from lit_rlhf.cli.app_arguments import config_flags
from lit_rlhf.cli.checks import check_run_settings, typed_key
from lit_rlhf.cli.errors import mark_task_started, report_failed_job, report_user_errors, set_up_app_output
from lit_rlhf.cli.run_dirs import discard_unused_run_dir, hide_passwords_in_saved_configs, latest_resumable_run
from lit_rlhf.cli.stop_lines import interruption_types, interruptions_end_the_process, stop_message
from lit_rlhf.cli.sweep_stops import JobStopped, stops_pass_between_jobs, sweep_stopping
from lit_rlhf.cli.sweeps import (
    FinalMetrics,
    app_argv,
    check_optimized_metric,
    config_objective,
    in_multirun,
    in_the_sweeps_process,
    summarize_sweep,
    sweep_group,
    write_result,
)
from lit_rlhf.config.command_line import override
from lit_rlhf.distributed.lost_rank import lost_rank_line, report_lost_ranks
from lit_rlhf.errors import ConfigError, UnavailableError, os_error_message
from lit_rlhf.interrupts import StopCutShort, TrainingInterrupted, end_of_run_interrupts, set_up_stops_on_signals
from lit_rlhf.noise import allow_frozen_modules_in_eval_mode, silence_known_noise
from lit_rlhf.terminal import config_without_passwords, without_passwords


def instantiate_group(configs: DictConfig | None, **defaults: Any) -> list[Any]:
    """Callbacks or loggers: a dict of {name: config with _target_}; a null entry switches one off.
    `defaults` fill keys a config has and leaves null (e.g. the W&B group of a sweep)."""
    objects = []
    for conf in (configs or {}).values():
        if conf is not None and "_target_" in conf:
            filled = {k: v for k, v in defaults.items() if v is not None and k in conf and conf[k] is None}
            objects.append(instantiate(conf, **filled))
    return objects


@rank_zero_only
def report(line: str) -> None:
    print(line, flush=True)


def train(cfg: DictConfig) -> dict[str, float]:
    """Fits cfg.algo on cfg.data; returns the final metrics (last training step, held-out, evaluation)."""
    if in_multirun() and cfg.trainer.get("strategy") == "ddp":
        raise ConfigError("trainer=ddp does not work inside a Hydra multirun (Lightning's ddp launcher re-runs the "
                          "script, Lightning PR #18175); use trainer=ddp_spawn for sweeps.")
    silence_known_noise()
    allow_frozen_modules_in_eval_mode()  # model.lora=null: the reference's frozen copy
    rank_zero_only(hide_passwords_in_saved_configs)()  # first: a sweep keeps the folder of a job its checks refuse
    check_run_settings(cfg)
    if cfg.get("export_dir") is not None:  # checked now, not after training
        from lit_rlhf.models.export import check_export_dir

        check_export_dir(cfg.export_dir, "export_dir")
    with set_up_stops_on_signals():
        L.seed_everything(cfg.seed, workers=True)
        datamodule = instantiate(cfg.data)
        datamodule.tokenizer_key = typed_key(cfg, "data.tokenizer")  # model.name_or_path, as the configs repeat it
        module = instantiate(cfg.algo, _convert_="all")
        if module.environment is not None:  # a chat template shows the model its tools
            datamodule.tools = module.environment.schemas
        check_optimized_metric(cfg, [metric.name for metric in module.task_metrics])
        # saved in checkpoints, so that evaluate.py ckpt_path=... scores with what the run trained on
        # (a URL's password is masked: it never reaches a checkpoint, a log or a saved config)
        module.record_run_config(config_without_passwords(
            {group: OmegaConf.to_container(cfg[group], resolve=True) if cfg.get(group) is not None else None
             for group in ("reward", "gold", "task_metrics", "env")}))
        loggers = instantiate_group(cfg.get("logger"), group=sweep_group())
    try:
        return fit(cfg, module, datamodule, loggers)
    finally:
        finish_wandb_run(loggers)


def finish_wandb_run(loggers: list[Any]) -> None:
    """W&B keeps one active run per process and a new WandbLogger would log into it: finish it, so that
    the next run of a sweep (same process) gets a run of its own."""
    if any(isinstance(logger, WandbLogger) for logger in loggers):
        import wandb

        if wandb.run is not None:
            wandb.finish()


def fit(cfg: DictConfig, module, datamodule, loggers: list[Any]) -> dict[str, float]:
    with set_up_stops_on_signals():
        callbacks = instantiate_group(cfg.get("callbacks"))
        if cfg.get("gold"):  # gold=<a reward>: scored beside the trained reward, never trained on
            callbacks.append(GoldReward(instantiate(cfg.gold)))
        trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
        for logger in loggers:
            logger.log_hyperparams(config_without_passwords(OmegaConf.to_container(cfg, resolve=True)))
        for callback in trainer.callbacks:
            if isinstance(callback, CheckpointOnInterrupt):
                callback.resume_hint = resume_command
        report_lost_ranks(trainer, lambda: resume_after_failure(trainer, module))
    # weights_only: a checkpoint (a file or a URL) may hold tensors and plain values, never code
    with end_of_run_interrupts(lambda: module.training_finished, lambda: rerun_command(trainer),
                               stopped=lambda: stopped_by_interrupt(trainer) is not None):
        try:
            with stops_before_training_said(trainer):
                trainer.fit(module, datamodule=datamodule, ckpt_path=resume_path(cfg), weights_only=True)
        except StopCutShort:  # a further Ctrl-C after the stop's checkpoint: the stop is said below
            pass
        except UnavailableError as err:  # e.g. a reward server gone after its retries: say where to resume
            if module.rl_step == 0:
                raise
            raise UnavailableError(f"{err} {resume_after_failure(trainer, module)}") from err
        except OSError as err:  # a disk that filled up mid-run: its line, and where to resume once there is room
            if (line := os_error_message(err)) is None or module.rl_step == 0:
                raise
            raise UnavailableError(f"{line} {resume_after_failure(trainer, module)}") from err
        except RuntimeError as err:  # another rank died: one line naming it, and where to resume
            lost = lost_rank_line(err, trainer.global_rank, trainer.world_size)
            if lost is None:
                raise
            raise UnavailableError(f"{lost} {resume_after_failure(trainer, module)}") from None
        stopped = stopped_by_interrupt(trainer)
        if stopped is not None and stopped.stopped_by == "SIGINT":
            report(f"\nRun directory: {cfg.paths.output_dir}")
            raise TrainingInterrupted(f"stopped by Ctrl-C after RL step {module.rl_step} of "
                                      f"{module.total_rl_steps() or '?'}; resume with: {resume_command(stopped.path)}")
        metrics = end_of_run(cfg, trainer, module, datamodule, loggers)
        if line := time_limit_stop_line(trainer, module.rl_step, module.total_rl_steps()):
            last = last_checkpoint(trainer)
            report(f"\n{line}" + (f"; to train on, resume with a larger trainer.max_time: {resume_command(last)}"
                                  if last is not None else "."))
            return FinalMetrics(metrics, status="time_limit")
        return metrics


def resume_command(checkpoint: Path) -> str:
    """This run's own command line with ckpt_path=checkpoint: a resume changes nothing else, and goes on in this run's
    directory (one run, one metrics.csv, one set of curves)."""
    overrides, run_dir = [], []
    if HydraConfig.initialized():
        overrides = list(HydraConfig.get().overrides.task)
        run_dir = [override("hydra.run.dir", HydraConfig.get().runtime.output_dir)]
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in ("ckpt_path", "overwrite_run_dir")]
    argv = app_argv()
    flags = [flags] if (flags := config_flags(argv[1:])) else []  # --config-name ...: the same config
    typed = [shlex.join(kept)] if kept else []  # as the user typed them: Hydra read them so
    # Hydra's flags come before the overrides, which its parser takes only in one run
    words = [shlex.join(["python", argv[0]]), *flags, *typed, *run_dir, override("ckpt_path", checkpoint)]
    return without_passwords(" ".join(words))


def last_checkpoint(trainer) -> Path | None:
    """The run's last.ckpt, where one was written (complete: writes are atomic)."""
    checkpoint = trainer.checkpoint_callback
    last = Path(checkpoint.dirpath) / "last.ckpt" if checkpoint is not None and checkpoint.dirpath else None
    return last if last is not None and last.exists() else None


def rerun_command(trainer) -> str | None:
    """After training finished: the command that resumes from its final checkpoint, which trains nothing and runs
    the end-of-run reports (an offline fit's save) again."""
    last = last_checkpoint(trainer)
    return resume_command(last) if last is not None else None


def resume_after_failure(trainer, module) -> str:
    """Where a run that failed mid-training resumes: its last checkpoint."""
    last = last_checkpoint(trainer)
    where = stopped_where(trainer, module)
    if last is not None:
        return f"Stopped {where}; resume from the last checkpoint: {resume_command(last)}"
    return (f"Stopped {where}, before the first checkpoint (written every "
            f"callbacks.model_checkpoint.every_n_train_steps RL steps).")


def stopped_where(trainer, module) -> str:
    """'in RL step N+1' where the failure came while a step ran; 'after RL step N' where step N had finished (its
    checkpoint, the held-out evaluation after it, the next batch): Lightning counts a batch processed once its
    training_step returned."""
    batches = trainer.fit_loop.epoch_loop.batch_progress.current
    if batches.processed < batches.started:
        return f"in RL step {module.rl_step + 1}"
    return f"after RL step {module.rl_step}" if module.rl_step else "before RL step 1"


def end_of_run(cfg: DictConfig, trainer, module, datamodule, loggers: list[Any]) -> dict[str, float]:
    """After training: the final held-out metrics, the evaluation's, the export, where things went."""
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if (module.rl_step > 0 and module.last_validated_rl_step != module.rl_step and trainer.limit_val_batches
            and not spawned_fit(trainer)):  # spawned ranks (trainer=ddp_spawn) trained: their last figures stand
        # the held-out metrics of the final policy (the sweep objective), when the last step had none
        trainer.validate(module, datamodule=datamodule, verbose=False)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("eval/")})
    for callback in trainer.callbacks:
        if isinstance(callback, PolicyEvaluation) and callback.evaluation is not None:
            metrics.update(callback.evaluation.flat_metrics())
    output_dir = Path(cfg.paths.output_dir)
    if cfg.get("export_dir") and trainer.is_global_zero:
        from lit_rlhf.export import export_policy

        with redone_once_there_is_room(trainer, lambda last: (
                f"Training is complete; once there is room, export its final checkpoint: python -m lit_rlhf.export "
                f"{shlex.join([str(last), str(cfg.export_dir)])}")):
            out = export_policy(exportable(trainer, module), cfg.export_dir, metrics=metrics)
        report(f"Exported the trained policy (with a model card, README.md) to {out}")
    report(f"\nRun directory: {output_dir}")
    for logger in loggers:
        report(f"  {type(logger).__name__}: {getattr(logger, 'log_dir', None) or logger.save_dir}")
    checkpoints = trainer.checkpoint_callback and trainer.checkpoint_callback.dirpath
    if checkpoints and ("://" in checkpoints or Path(checkpoints).is_dir()):  # save_last=false, save_top_k=0: none
        report(f"  checkpoints: {checkpoints}")
    return metrics


@contextmanager
def redone_once_there_is_room(trainer, redo: Callable[[Path], str]):
    """A full disk (or a target that cannot be written): its line, and `redo(last)`, what to run from the run's last
    complete checkpoint once there is room (the bare line where there is none)."""
    try:
        yield
    except OSError as err:
        if (line := os_error_message(err)) is None or (last := last_checkpoint(trainer)) is None:
            raise
        raise UnavailableError(f"{line} {redo(last)}") from err


def exportable(trainer, module):
    """The module to export: itself, or the final checkpoint, read whole on rank zero, where this process's module
    does not hold the run: with trainer=fsdp2 its weights are shards on every rank; with trainer=ddp_spawn the spawned
    ranks trained, and it holds rank zero's weights but not its RL counters, which the model card states."""
    if not module.sharding.sharded and not spawned_fit(trainer):
        return module
    from lit_rlhf.export import load_from_checkpoint

    last = last_checkpoint(trainer)
    if last is None:
        raise ConfigError(f"export_dir with trainer={'fsdp2' if module.sharding.sharded else 'ddp_spawn'} exports the "
                          f"final checkpoint, and this run wrote none; keep callbacks.model_checkpoint, or export a "
                          f"checkpoint later (python -m lit_rlhf.export).")
    return load_from_checkpoint(last, trust_remote_code=module.hparams.model.get("trust_remote_code", False))


def spawned_fit(trainer) -> bool:
    """Whether the Trainer fitted in processes it spawned (ddp_spawn, ddp_fork), not in this one."""
    from lightning.pytorch.strategies.launchers.multiprocessing import _MultiProcessingLauncher

    return isinstance(getattr(trainer.strategy, "launcher", None), _MultiProcessingLauncher)


def resume_path(cfg: DictConfig) -> str | None:
    """cfg.ckpt_path, with `last` meaning this run directory's checkpoints/last.ckpt (or an error)."""
    ckpt = cfg.get("ckpt_path")
    if ckpt is None or str(ckpt) != "last":
        return None if ckpt is None else str(ckpt)
    last = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
    if last.exists():  # a file, or a sharded directory (trainer=fsdp2)
        return str(last)
    latest = None if in_multirun() else latest_resumable_run(Path(cfg.paths.output_dir))
    if latest is not None:  # the user meant the run before this one, as Lightning's ckpt_path="last" would
        raise ConfigError(f"ckpt_path=last resumes this run directory's checkpoints/last.ckpt, and {last} does not "
                          f"exist; to resume the latest run beside it, add {override('hydra.run.dir', latest)} "
                          f"(or give ckpt_path=<path to a .ckpt>).")
    raise ConfigError(f"ckpt_path=last: {last} does not exist; pass hydra.run.dir=<the run's directory> with "
                      f"ckpt_path=last, or ckpt_path=<path to a .ckpt>.")


@contextmanager
def stops_end_the_job(job: int, on_interrupt: Callable[[str], None], step_name: str) -> Iterator[None]:
    """Around a sweep's job in a launcher's worker: a stop by Ctrl-C or SIGTERM is recorded (on_interrupt) and said
    with the job's number, and the job returns to the launcher (JobStopped) instead of ending the worker's process
    (joblib would end the whole pool on it); the sweep's process, which heard the stop too, ends the sweep."""
    stops_pass_between_jobs()
    try:
        yield
    except interruption_types() as err:
        message, _ = stop_message(err, step_name)
        on_interrupt(message)
        print(f"The sweep's job {job} stopped, whose line follows.\n{message}", file=sys.stderr, flush=True)
        raise JobStopped from err


def run(cfg: DictConfig, task: Callable[[DictConfig], dict[str, float]] = train,
        step_name: str = "RL step") -> float | None:
    """train.py's task: train (or another `task` returning its final metrics), then return the objective
    (config_objective) to a sweeper. step_name: what messages call the unit the task trains in.

    A single run reports user mistakes in one line (exit code 2). In a multirun, a failing trial is
    recorded in its result.json with a one-line error and returns None, so the sweep goes on (Optuna
    marks the trial failed). Ctrl-C or SIGTERM stops a single run and a sweep alike: the run (the sweep's job in
    progress) is recorded as interrupted, with the line that says how to resume it, and the process exits 130 or
    143 (a sweep's later jobs do not run). A job in a launcher's worker (joblib's) returns instead, and the sweep's
    process, which heard the stop too, ends the sweep (sweep_stops)."""
    mark_task_started()
    set_up_app_output()

    def record_interruption(message: str) -> None:
        rank_zero_only(write_result)(cfg.paths.output_dir, "interrupted", None, {}, message)

    if not in_multirun():
        def record_failure(message: str) -> None:  # where the run directory stays (a failure before it held
            if Path(cfg.paths.output_dir).is_dir():  # anything of a run removes it)
                rank_zero_only(write_result)(cfg.paths.output_dir, "failed", None, {}, message)

        metrics = report_user_errors(task, cfg, on_interrupt=record_interruption, on_failure=record_failure,
                                     step_name=step_name)
        try:
            objective = config_objective(metrics, cfg)
        except ConfigError as err:
            report(f"warning: {err}")
            objective = None
        rank_zero_only(write_result)(cfg.paths.output_dir, getattr(metrics, "status", "ok"), objective, metrics)
        return objective
    job, sweep_dir = HydraConfig.get().job.num, Path(HydraConfig.get().sweep.dir)

    def record_interruption_and_summarize(message: str) -> None:  # the runs done so far, in summary.csv
        record_interruption(message)
        rank_zero_only(summarize_sweep)(sweep_dir)

    if in_the_sweeps_process():  # a stop ends the process, and with it the sweep
        stops = interruptions_end_the_process(record_interruption_and_summarize, step_name, said_before=(
            f"The sweep stopped in its job {job}, whose line follows; the jobs after it did not run."))
    elif sweep_stopping(sweep_dir):  # a launcher's worker, after the sweep's process heard a stop
        discard_unused_run_dir(cfg)
        return None
    else:  # a launcher's worker: the stopped job returns, and the sweep's process ends the sweep
        stops = stops_end_the_job(job, record_interruption, step_name)
    try:
        with stops:
            metrics = task(cfg)
        objective = config_objective(metrics, cfg)
    except JobStopped:
        return None
    except Exception as err:
        rank_zero_only(write_result)(cfg.paths.output_dir, "failed", None, {}, report_failed_job(err))
        return None
    rank_zero_only(write_result)(cfg.paths.output_dir, getattr(metrics, "status", "ok"), objective, metrics)
    return objective
