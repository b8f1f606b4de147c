"""train_reward_model.py's, train_dpo.py's, train_kto.py's and train_sft.py's tasks: a module fitted offline on a file
of rows (preference pairs, labelled completions, or completions), then saved as a folder: a reward model that
`reward=reward_model reward.name_or_path=<folder>` loads, or a DPO, KTO or SFT policy that `evaluate.py
policy_path=<folder>` compares with the model it started from (and `train.py model.name_or_path=<folder>` trains on)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lit_rlhf.algos.run_length import time_limit_stop_line
from lit_rlhf.callbacks import CheckpointOnInterrupt
from lit_rlhf.callbacks.interrupt import stopped_by_interrupt, stops_before_training_said
from lit_rlhf.checkpoints.loading import load_checkpoint_file
from lit_rlhf.cli.checks import check_fitting_on_a_file, typed_key
from lit_rlhf.cli.sweeps import FinalMetrics
from lit_rlhf.cli.train import (
    instantiate_group,
    last_checkpoint,
    redone_once_there_is_room,
    report,
    rerun_command,
    resume_command,
    resume_path,
    spawned_fit,
)
from lit_rlhf.config.command_line import override
from lit_rlhf.interrupts import StopCutShort, TrainingInterrupted, end_of_run_interrupts, set_up_stops_on_signals
from lit_rlhf.noise import allow_frozen_modules_in_eval_mode, silence_known_noise
from lit_rlhf.terminal import config_without_passwords


def set_up_fit_on_pairs(cfg: DictConfig) -> tuple[Any, Any, L.Trainer, str | None]:
    """The module, data module, trainer and checkpoint to resume from (or None) that fit cfg.algo on cfg.data for
    cfg.epochs epochs."""
    silence_known_noise()
    allow_frozen_modules_in_eval_mode()
    check_fitting_on_a_file(cfg)  # again: a sweep's trials are checked here only (a later one: its save_dir)
    with set_up_stops_on_signals():
        L.seed_everything(cfg.seed, workers=True)
        datamodule = instantiate(cfg.data)
        datamodule.tokenizer_key = typed_key(cfg, "data.tokenizer")  # model.name_or_path, as the configs repeat it
        module = instantiate(cfg.algo, _convert_="all")
        loggers = instantiate_group(cfg.get("logger"))
        trainer = instantiate(cfg.trainer, callbacks=instantiate_group(cfg.get("callbacks")), logger=loggers or False)
        for logger in loggers:
            logger.log_hyperparams(config_without_passwords(OmegaConf.to_container(cfg, resolve=True)))
        for callback in trainer.callbacks:
            if isinstance(callback, CheckpointOnInterrupt):
                callback.resume_hint = resume_command
        ckpt_path = resume_path(cfg)
        if ckpt_path is not None:
            load_checkpoint_file(ckpt_path)  # a missing, corrupt or pickled file: one line, before Lightning reads it
    return module, datamodule, trainer, ckpt_path


def fit_on_pairs(cfg: DictConfig, module, datamodule, trainer: L.Trainer, ckpt_path: str | None) -> None:
    with redone_once_there_is_room(trainer, lambda last: (  # a disk that filled up mid-run
            f"Stopped after training step {trainer.global_step}; resume from the last checkpoint: "
            f"{resume_command(last)}")), stops_before_training_said(trainer), contextlib.suppress(StopCutShort):
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)  # StopCutShort: said below
    stopped = stopped_by_interrupt(trainer)
    if stopped is not None and stopped.stopped_by == "SIGINT":  # nothing is saved but the checkpoint
        report(f"\nRun directory: {cfg.paths.output_dir}")
        raise TrainingInterrupted(f"stopped by Ctrl-C after training step {trainer.global_step}; resume with: "
                                  f"{resume_command(stopped.path)}")


def train_reward_model(cfg: DictConfig) -> dict[str, float]:
    """A RewardModelModule fitted and saved (weights, tokenizer, reward_stats.json); returns the final metrics."""
    return fit_and_save(cfg, lambda module, folder: (
        f"Reward model: {module.save_reward_model(folder)}\n  use it: python train.py reward=reward_model "
        f"{override('reward.name_or_path', folder)} reward.dtype=float32 reward.normalize=true"),
        lambda m: f"accuracy {m['val/accuracy']:.3f} (chosen scored above rejected)")


def train_dpo(cfg: DictConfig) -> dict[str, float]:
    """A DPOModule fitted and its policy saved (LoRA merged); returns the final metrics."""
    # with algo.sync_ref_model the held-out figures are against the reference of the last update, not the start
    reference = "the reference as algo.sync_ref_model last moved it" if cfg.algo.get("sync_ref_model") else \
        "the reference"
    return fit_and_save(cfg, lambda module, folder: (
        f"Policy: {module.save_policy(folder)}\n  evaluate it against the model it started from: python "
        f"evaluate.py {override('policy_path', folder)} {override('model.name_or_path', cfg.model.name_or_path)}"),
        lambda m: f"accuracy {m['eval/rewards/accuracies']:.3f}, reward margin {m['eval/rewards/margins']:+.4f} "
                  f"(beta x the log-ratio to {reference}, chosen minus rejected), loss {m['eval/loss']:.4f}")


def train_kto(cfg: DictConfig) -> dict[str, float]:
    """A KTOModule fitted and its policy saved (LoRA merged); returns the final metrics."""
    return fit_and_save(cfg, lambda module, folder: (
        f"Policy: {module.save_policy(folder)}\n  evaluate it against the model it started from: python "
        f"evaluate.py {override('policy_path', folder)} {override('model.name_or_path', cfg.model.name_or_path)}"),
        lambda m: f"{kto_margin(m)}, KL {m['eval/kl']:.4f}, loss {m['eval/loss']:.4f}")


def kto_margin(metrics: dict[str, float]) -> str:
    if "eval/rewards/margins" not in metrics:  # a small held-out draw of one label only
        return "no reward margin (the held-out rows are all desirable or all undesirable: raise data.num_eval_rows)"
    return (f"reward margin {metrics['eval/rewards/margins']:+.4f} (beta x the log-ratio to the reference, desirable "
            f"minus undesirable rows)")


def train_sft(cfg: DictConfig) -> dict[str, float]:
    """An SFTModule fitted and its policy saved (LoRA merged); returns the final metrics."""
    return fit_and_save(cfg, lambda module, folder: (
        f"Policy: {module.save_policy(folder)}\n  train on from it: python train.py "
        f"{override('model.name_or_path', folder)}"),
        lambda m: f"loss {m['eval/loss']:.4f} (the completions' mean token cross-entropy)")


def fit_and_save(cfg: DictConfig, save: Callable[[Any, Path], str],
                 heldout: Callable[[dict[str, float]], str]) -> dict[str, float]:
    """fit_on_pairs, then save(module, cfg.save_dir) on rank zero (it returns the lines to print) and the held-out
    pairs' figures of the final weights (`heldout` words them; evaluated once more when the fit ended elsewhere than
    at an evaluation). Ctrl-C or SIGTERM after training (its last.ckpt written) stops the save and evaluation in one
    line: a model folder it created is removed, never left half-written."""
    module, datamodule, trainer, ckpt_path = set_up_fit_on_pairs(cfg)
    with end_of_run_interrupts(lambda: module.training_finished, lambda: rerun_command(trainer),
                               stopped=lambda: stopped_by_interrupt(trainer) is not None):
        fit_on_pairs(cfg, module, datamodule, trainer, ckpt_path)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        # the figures below are the final weights'; a fit in spawned ranks (trainer=ddp_spawn) reports the last
        # evaluation there: a validation from this process would spawn ranks at step 0 that log over the run's rows
        if module.held_out_figures_are_stale() and not spawned_fit(trainer):
            trainer.validate(module, datamodule=datamodule, verbose=False)
            metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        module.prepare_save()  # every rank: under trainer=fsdp2 the policy is gathered on rank zero
        if trainer.is_global_zero:
            with redone_once_there_is_room(trainer, lambda last: (
                    f"The fit is complete; once there is room, save it again (from its final checkpoint, training "
                    f"nothing): {resume_command(last)}")):
                saved = save(module, Path(cfg.save_dir))
            report("\n" + saved)
            with contextlib.suppress(KeyError):  # no validation ran (e.g. trainer.limit_val_batches=0)
                held = getattr(datamodule, "eval_pairs", None) or getattr(datamodule, "eval_rows", [])
                what = "pairs" if hasattr(datamodule, "eval_pairs") else "rows"
                report(f"Held-out {what} ({len(held)}): {heldout(metrics)}")
    report(f"Run directory: {cfg.paths.output_dir}")
    if spawned_fit(trainer):  # the ranks' Timer and step counts stayed in them (trainer=ddp_spawn)
        return metrics
    total_steps = trainer.estimated_stepping_batches  # optimizer steps, as global_step counts them
    if line := time_limit_stop_line(trainer, trainer.global_step, int(total_steps) if math.isfinite(total_steps)
                                    else None, step_name="training step"):  # the model saved is the one it stopped with
        last = last_checkpoint(trainer)
        report(f"\n{line}" + (f"; to train on, resume with a larger trainer.max_time: {resume_command(last)}"
                              if last is not None else "."))
        return FinalMetrics(metrics, status="time_limit")
    return metrics
