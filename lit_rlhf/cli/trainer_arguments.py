"""Lightning Trainer arguments on the command line: those conf/trainer does not list are added with `+trainer.<name>`,
except the few that the apps set from groups of their own or that the RL modules do in their own update (they
optimize by hand: Lightning refuses its automatic clipping and accumulation for them); and the apps' checks of the
trainer group's values (check_trainer_arguments, check_trains_something). Torch-free: the composition errors and the
checks are written before anything heavy is imported."""

from __future__ import annotations

import re

from omegaconf import DictConfig, OmegaConf

from lit_rlhf.errors import ConfigError

# lightning.Trainer's arguments (tests/cli/test_trainer_arguments.py holds this list to Lightning's own)
TRAINER_ARGUMENTS = (
    "accelerator", "accumulate_grad_batches", "barebones", "benchmark", "callbacks", "check_val_every_n_epoch",
    "default_root_dir", "detect_anomaly", "deterministic", "devices", "enable_autolog_hparams", "enable_checkpointing",
    "enable_model_summary", "enable_progress_bar", "fast_dev_run", "gradient_clip_algorithm", "gradient_clip_val",
    "inference_mode", "limit_predict_batches", "limit_test_batches", "limit_train_batches", "limit_val_batches",
    "log_every_n_steps", "logger", "max_epochs", "max_steps", "max_time", "min_epochs", "min_steps", "model_registry",
    "num_nodes", "num_sanity_val_steps", "overfit_batches", "plugins", "precision", "profiler",
    "reload_dataloaders_every_n_epochs", "strategy", "sync_batchnorm", "use_distributed_sampler", "val_check_interval",
)
# what the apps build from a group of their own
FROM_GROUPS = {"callbacks": "the callbacks group: callbacks.<name>=null drops one, +callbacks.<name>._target_=... adds "
                            "one", "logger": "the logger group: logger=csv, tensorboard or wandb"}
# the RL modules' own settings for what Lightning does only under automatic optimization
MODULE_SETTINGS = {"gradient_clip_val": "algo.max_grad_norm", "gradient_clip_algorithm": "algo.max_grad_norm",
                   "accumulate_grad_batches": "algo.gradient_accumulation_steps"}
_ABSENT = object()


def trainer_argument_hint(name: str, cfg: DictConfig) -> str | None:
    """' (...)' for trainer.<name>, a Lightning argument that the trainer group does not list; None for any other
    name."""
    if name not in TRAINER_ARGUMENTS:
        return None
    if name in FROM_GROUPS:
        return f" (the app passes the Trainer its {name} from {FROM_GROUPS[name]})"
    setting = MODULE_SETTINGS.get(name)
    if setting is not None and OmegaConf.select(cfg, setting, default=_ABSENT) is not _ABSENT:
        return f" (the RL modules do this in their own update: set {setting} instead)"
    return f" (a Lightning Trainer argument that the trainer group does not list: add it, +trainer.{name}=...)"


def trainer_interval_line(trainer: DictConfig, counted_in: str) -> str | None:
    """The one line for a Trainer interval that Lightning divides by (at 0 its fit stops mid-run on a
    ZeroDivisionError) or counts with (a negative one evaluates or logs at every step); None where they hold.
    counted_in: what the app's val_check_interval counts ("RL steps" for train.py)."""
    interval = trainer.get("val_check_interval")
    if isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval <= 0:
        return (f"trainer.val_check_interval={interval} must be > 0 ({counted_in} between held-out evaluations); to "
                f"switch them off use +trainer.limit_val_batches=0.")
    epochs = trainer.get("check_val_every_n_epoch")
    if epochs is not None and not whole_number_at_least(epochs, 1):
        return (f"trainer.check_val_every_n_epoch={epochs!r} must be a whole number >= 1 (epochs between held-out "
                f"evaluations) or null; to switch them off use +trainer.limit_val_batches=0.")
    every = trainer.get("log_every_n_steps")
    if every is not None and not whole_number_at_least(every, 0):
        return (f"trainer.log_every_n_steps={every!r} must be a whole number >= 0 (steps between the statistics "
                f"the loggers write; 0 writes no step's).")
    return None


# Lightning's counts: (the least whole number it takes, whether null is taken, what the value counts)
TRAINER_COUNTS = {"max_steps": (-1, False, "-1: no limit"), "max_epochs": (-1, True, "-1 or null: no limit"),
                  "min_steps": (0, True, "null: none"), "min_epochs": (0, True, "null: none")}
BATCH_LIMITS = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches",
                "overfit_batches")
DEVICES_TEXT = re.compile(r"auto|-1|\d+(\s*,\s*\d+)*\s*,?")  # Lightning's string forms: "auto", "-1", "2", "0,1"


def trainer_limit_line(trainer: DictConfig) -> str | None:
    """The one line for a Trainer count, batch limit or device count of the wrong kind (trainer.max_epochs=abc failed
    an assert in Lightning; max_steps=abc and limit_val_batches=abc ended on a comparison of str and int; devices=abc
    was refused without its value); None where each is of a kind Lightning takes."""
    for name, (least, nullable, meaning) in TRAINER_COUNTS.items():
        value = trainer.get(name)
        if name in trainer and not (value is None and nullable) and not whole_number_at_least(value, least):
            return f"trainer.{name}={value!r} must be a whole number >= {least} ({meaning})."
    for name in BATCH_LIMITS:
        value = trainer.get(name)
        if value is None or whole_number_at_least(value, 0):
            continue
        if not isinstance(value, float) or not 0.0 <= value <= 1.0:
            return (f"trainer.{name}={value!r} must be a whole number of batches (>= 0) or a fraction of them from "
                    f"0.0 to 1.0.")
    devices = trainer.get("devices")
    if isinstance(devices, str) and not DEVICES_TEXT.fullmatch(devices.strip()):
        return (f"trainer.devices={devices!r} must be a number of devices (e.g. 1; -1: all of them), a list of "
                f"device indices ([0,1]) or auto.")
    return None


def whole_number_at_least(value, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def trainer_refusal_line(message: str) -> str | None:
    """The one line for a refusal of Lightning's whose fix is in the apps' settings, not the trainer group; else
    None."""
    return manual_optimization_line(message) or checkpointing_off_line(message)


def checkpointing_off_line(message: str) -> str | None:
    """+trainer.enable_checkpointing=false: Lightning refuses it beside a checkpoint callback, and the apps'
    checkpoints are callbacks of their own (callbacks.model_checkpoint, callbacks.checkpoint_on_interrupt)."""
    if "configured with `enable_checkpointing=False` but found" not in message:
        return None
    return ("trainer.enable_checkpointing=false: the checkpoints are written by callbacks; to write none, drop "
            "trainer.enable_checkpointing and set callbacks.model_checkpoint=null "
            "callbacks.checkpoint_on_interrupt=null (Ctrl-C and SIGTERM then stop the run without saving it).")


def manual_optimization_line(message: str) -> str | None:
    """The one line for Lightning's refusal of its automatic clipping or accumulation under manual optimization
    (+trainer.gradient_clip_val=1.0 with an RL algorithm), naming the module's setting; else None."""
    found = re.search(r"not supported for manual optimization\. Remove `Trainer\((\w+)=([^)]*)\)`", message)
    if found is None or found.group(1) not in MODULE_SETTINGS:
        return None
    name, value = found.groups()
    return (f"trainer.{name}={value}: the RL modules optimize by hand, clipping and accumulating gradients in their "
            f"own update, which Lightning's {name} cannot reach; set {MODULE_SETTINGS[name]} instead and drop "
            f"trainer.{name}.")


def check_trainer_arguments(cfg: DictConfig, validation_counted_in: str = "RL steps") -> None:
    """`+trainer.<TRL name>` (+trainer.save_total_limit=3) is not a Trainer argument: one line with the key that sets
    it here, before anything is built (another unknown argument is named by Lightning's TypeError, with the nearest).
    Then the intervals Lightning divides by and the counts it compares; validation_counted_in: what the app's
    val_check_interval counts."""
    from lit_rlhf.config.trl_names import command_line_hint

    trainer = cfg.get("trainer")
    if not isinstance(trainer, DictConfig) or trainer.get("_target_") != "lightning.Trainer":
        return
    for name in trainer:
        if name not in TRAINER_ARGUMENTS and name != "_target_" and (hint := command_line_hint(str(name), cfg)):
            raise ConfigError(f"trainer.{name} is not an argument of Trainer{hint}; remove it.")
    if line := trainer_interval_line(trainer, validation_counted_in) or trainer_limit_line(trainer):
        raise ConfigError(line)


def check_trains_something(cfg: DictConfig) -> None:
    """A Trainer limit of 0 (Lightning's way to skip training) would train no RL step and report the untrained policy's
    evaluation as the run's result."""
    for key in ("limit_train_batches", "max_epochs", "max_steps"):
        value = OmegaConf.select(cfg, f"trainer.{key}", default=None, throw_on_resolution_failure=False)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
            raise ConfigError(f"trainer.{key}={value!r} trains no RL step; remove it (steps=N sets the run's length), "
                              f"or compare a trained policy with its reference without training: python evaluate.py "
                              f"ckpt_path=<a checkpoint>.")
