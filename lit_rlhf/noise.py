"""Messages a user of lit_rlhf cannot act on, silenced one by one (never by category), so that every warning left
in a run's output means something. Installed by the apps and when lit_rlhf.algos is imported (the modules run in
plain Lightning scripts too: one set of defaults)."""

from __future__ import annotations

import logging
import sys
import warnings

# Lightning advertises its cloud logger and checkpoint store (litmodels) on every Trainer; the run's loggers and
# checkpoints are chosen in conf/.
LIGHTNING_TIPS = ("💡 Tip: For seamless cloud logging", "💡 Tip: For seamless cloud uploads")
# The apps pass their own model summary (ModelSummaryTable); Lightning says it then skips its default one.
LIGHTNING_OWN_SUMMARY = ("Trainer already configured with model summary callbacks",)
# Lightning names the default bar and summary an RLHF module replaces (lit_rlhf/algos/default_callbacks.py) as callbacks
# "passed to Trainer", which a user of a plain Trainer never passed; said only of these two classes.
LIGHTNING_REPLACED_DISPLAY = tuple(
    f"The following callbacks returned in `LightningModule.configure_callbacks` will override existing callbacks "
    f"passed to Trainer: {names}"
    for names in ("RichModelSummary", "RichModelSummary, RichProgressBar", "RichProgressBar"))
# Lightning's check for modules left in eval mode: a full fine-tune's reference copy (model.lora=null), DPO's and the
# reward model's frozen base models stay in eval mode on purpose (no dropout in their forwards); silenced by the apps
# only (allow_frozen_modules_in_eval_mode): a user's own script keeps the check for its own modules.
LIGHTNING_EVAL_MODE = r"Found \d+ module\(s\) in eval mode at the start of training"
# Lightning's CombinedLoader builds a LeafSpec, which torch >= 2.10 deprecates; nothing to change on our side.
LIGHTNING_PYTREE = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
# Lightning's ModelCheckpoint(every_n_train_steps=N) on a manually optimized module: it says that it saves the state
# after the optimizer step and asks for copies of the weights from before it, while the state after the RL step is
# the one an RL checkpoint must hold (lit_rlhf's LastCheckpoint saves it without the warning).
LIGHTNING_MANUAL_CHECKPOINT = r"Using ModelCheckpoint with manual optimization and every_n_train_steps"
# LightningModule.all_gather (the reward model's held-out rewards, the ranks' scores) calls
# torch.distributed.nn.functional.all_gather, which torch >= 2.13 deprecates; nothing to change on our side.
LIGHTNING_ALL_GATHER = r"torch\.distributed\.nn\.functional\.all_gather is deprecated"
# The Trainer's default epoch limit: an RLHF module stops after its RL steps (rl_steps), whatever the epochs.
LIGHTNING_MAX_EPOCHS = r"`max_epochs` was not set\. Setting it to 1000 epochs"
# peft's LoRA on GPT-2's Conv1D layers (target_modules="all-linear" takes them): peft sets fan_in_fan_out itself.
PEFT_CONV1D = r"fan_in_fan_out is set to False but the target module is `Conv1D`"
# The HTTP clients of reward=http and reward=llm_judge log every request (and retry) at INFO; a failure that
# matters ends as the reward's one-line error.
HTTP_CLIENT_LOGGERS = ("httpx", "httpx2", "openai")
# `import optuna` (hparams_search=rloo_optuna's sweeper) imports alembic, which logs each of its plugins at INFO, and
# Hydra's logging prints INFO: seven "setup plugin alembic..." lines before every search.
IMPORT_LOGGERS = ("alembic",)


class DropMessages(logging.Filter):
    """Drops the records whose message starts with one of `prefixes` or is one of `messages`."""

    def __init__(self, prefixes: tuple[str, ...], messages: tuple[str, ...] = ()):
        super().__init__()
        self.prefixes = prefixes
        self.messages = messages

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not (message.startswith(self.prefixes) or message in self.messages)


def silence_import_logs() -> None:
    """The libraries that log at INFO while they are imported: the apps call it before Hydra imports its sweeper."""
    for name in IMPORT_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def silence_known_noise() -> None:
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, DropMessages) for f in logger.filters):
        logger.addFilter(DropMessages(LIGHTNING_TIPS + LIGHTNING_OWN_SUMMARY, LIGHTNING_REPLACED_DISPLAY))
    for name in HTTP_CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=LIGHTNING_PYTREE)
    warnings.filterwarnings("ignore", message=LIGHTNING_ALL_GATHER)
    warnings.filterwarnings("ignore", message=LIGHTNING_MAX_EPOCHS)
    warnings.filterwarnings("ignore", message=LIGHTNING_MANUAL_CHECKPOINT)
    warnings.filterwarnings("ignore", message=PEFT_CONV1D)
    if not sys.stderr.isatty():  # a log file: transformers' "Loading weights" and "Writing model shards" bars are
        from transformers.utils import logging as transformers_logging  # carriage-return noise there

        transformers_logging.disable_progress_bar()


def allow_frozen_modules_in_eval_mode() -> None:
    """The apps' frozen models are in eval mode on purpose (LIGHTNING_EVAL_MODE)."""
    warnings.filterwarnings("ignore", message=LIGHTNING_EVAL_MODE)
