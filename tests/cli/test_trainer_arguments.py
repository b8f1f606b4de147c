"""The Trainer arguments the command line's errors know: Lightning's own list, and the hints for the ones the trainer
group does not set."""

import inspect

import lightning as L
import yaml
from omegaconf import OmegaConf

from lit_rlhf.cli.trainer_arguments import (
    TRAINER_ARGUMENTS,
    manual_optimization_line,
    trainer_argument_hint,
    trainer_refusal_line,
)
from tests.helpers import ROOT


def test_the_list_holds_every_argument_of_lightning_s_trainer_and_every_key_the_trainer_group_sets():
    assert set(inspect.signature(L.Trainer.__init__).parameters) - {"self"} <= set(TRAINER_ARGUMENTS)
    for path in (ROOT / "lit_rlhf" / "conf" / "trainer").glob("*.yaml"):
        keys = set(yaml.safe_load(path.read_text()) or {}) - {"_target_", "defaults"}
        assert keys <= set(TRAINER_ARGUMENTS), (path.name, keys - set(TRAINER_ARGUMENTS))


def test_a_trainer_argument_the_group_lacks_is_pointed_at_what_sets_it():
    rl = OmegaConf.create({"algo": {"max_grad_norm": 1.0, "gradient_accumulation_steps": 1}, "trainer": {}})
    pairs = OmegaConf.create({"algo": {"beta": 0.1}, "trainer": {}})  # train_dpo.py: automatic optimization
    assert "set algo.max_grad_norm instead" in trainer_argument_hint("gradient_clip_val", rl)
    assert "set algo.gradient_accumulation_steps instead" in trainer_argument_hint("accumulate_grad_batches", rl)
    assert "+trainer.gradient_clip_val=..." in trainer_argument_hint("gradient_clip_val", pairs)
    assert "+trainer.deterministic=..." in trainer_argument_hint("deterministic", rl)
    assert "logger=csv" in trainer_argument_hint("logger", rl)
    assert trainer_argument_hint("max_stepz", rl) is None  # not Lightning's: the usual nearest-key hint


def test_lightning_s_refusal_under_manual_optimization_names_the_module_setting():
    line = manual_optimization_line("Automatic gradient clipping is not supported for manual optimization. Remove "
                                    "`Trainer(gradient_clip_val=0.5)` or switch to automatic optimization.")
    assert line.startswith("trainer.gradient_clip_val=0.5: the RL modules optimize by hand")
    assert line.endswith("set algo.max_grad_norm instead and drop trainer.gradient_clip_val.")
    assert manual_optimization_line("Some other misconfiguration.") is None


def test_checkpointing_switched_off_in_the_trainer_names_the_callbacks_that_write_checkpoints():
    """Lightning's own line ("found `ModelCheckpoint` in callbacks list") named no setting the user had typed: the
    interrupt checkpoint is a Checkpoint too."""
    line = trainer_refusal_line("Trainer was configured with `enable_checkpointing=False` but found `ModelCheckpoint` "
                                "in callbacks list.")
    assert line.startswith("trainer.enable_checkpointing=false: the checkpoints are written by callbacks")
    assert "set callbacks.model_checkpoint=null callbacks.checkpoint_on_interrupt=null" in line
    assert trainer_refusal_line("Automatic gradient clipping is not supported for manual optimization. Remove "
                                "`Trainer(gradient_clip_val=0.5)` or switch to automatic optimization.").startswith(
        "trainer.gradient_clip_val=0.5:")
    assert trainer_refusal_line("Some other misconfiguration.") is None
