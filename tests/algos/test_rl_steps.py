"""RL steps are the unit: rl_steps stops a plain-Lightning run after that many rollouts, whatever the
number of optimizer steps each takes, and checkpoint intervals count RL steps; a Trainer's max_steps (optimizer steps)
converts to the RL steps Lightning actually runs; a fit that nothing stops says so."""

import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping

from lit_rlhf.algos.run_length import (
    endless_fit_line,
    finished_fit_line,
    rl_steps_of_fit,
    time_limit,
    time_limit_stop_line,
)
from lit_rlhf.callbacks import LastCheckpoint
from tests.conftest import make_datamodule, make_ppo, make_rloo


def trainer(**kwargs):
    return L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, accelerator="cpu", **kwargs)


def test_rl_steps_of_fit_by_hand():
    assert rl_steps_of_fit(5, trainer(max_steps=30), 2) == 5 and rl_steps_of_fit(5, trainer(), 2) == 5
    assert rl_steps_of_fit(5, trainer(max_steps=3), 2) == 2  # whichever stops the fit first
    assert rl_steps_of_fit(5, None, 2) == 5 and rl_steps_of_fit(None, None, 2) is None  # no Trainer yet
    assert rl_steps_of_fit(None, trainer(), 2) is None and rl_steps_of_fit(None, trainer(max_epochs=3), 2) is None
    assert rl_steps_of_fit(None, trainer(max_steps=4), 2) == 2
    assert rl_steps_of_fit(None, trainer(max_steps=3), 2) == 2  # after RL step 1, 2 < 3 optimizer steps: one more
    assert rl_steps_of_fit(None, trainer(max_steps=1), 4) == 1 and rl_steps_of_fit(None, trainer(max_steps=0), 4) == 0
    assert rl_steps_of_fit(None, trainer(limit_train_batches=3, max_epochs=2), 2) == 6  # 3 RL steps per epoch
    assert rl_steps_of_fit(None, trainer(limit_train_batches=3, max_epochs=2, max_steps=4), 2) == 2  # the fewest
    assert rl_steps_of_fit(None, trainer(limit_train_batches=3, max_epochs=-1), 2) is None  # endless epochs
    assert rl_steps_of_fit(None, trainer(limit_train_batches=0.5, max_epochs=2), 2) is None  # of an endless stream


def test_a_fit_is_endless_only_without_any_limit():
    line = endless_fit_line(trainer(), None)
    assert line is not None and "rl_steps=N" in line and "max_steps=N" in line
    assert endless_fit_line(trainer(), 3) is None
    assert endless_fit_line(trainer(max_time="00:00:01:00"), None) is None
    assert endless_fit_line(trainer(callbacks=[EarlyStopping(monitor="eval/score")]), None) is None
    assert finished_fit_line(2, None, resumed=True) is None and finished_fit_line(1, 2, resumed=True) is None
    assert "checkpoint is at RL step 2 of 2" in finished_fit_line(2, 2, resumed=True)
    # a second fit of the same module: no checkpoint was loaded, so none is named as its state
    assert finished_fit_line(2, 2, resumed=False).startswith("This module is already at RL step 2 of its rl_steps=2:")


def test_a_spent_max_time_before_the_last_step_is_named():
    limited = trainer(max_time="00:00:00:05")
    time_limit(limited).load_state_dict({"time_elapsed": {"train": 6.0}})  # as a checkpoint restores it
    line = time_limit_stop_line(limited, 3, 10)
    assert line.startswith("The Trainer's max_time (0:00:05) stopped the run after RL step 3 of 10;"), line
    assert time_limit_stop_line(limited, 10, 10) is None  # the run's steps were all done
    time_limit(limited).load_state_dict({"time_elapsed": {"train": 4.0}})
    assert time_limit_stop_line(limited, 3, 10) is None  # time left: something else stopped it
    assert time_limit(trainer()) is None and time_limit_stop_line(trainer(), 3, 10) is None


class StopAfterOneStep(L.Callback):
    def on_train_batch_end(self, trainer, *args):
        trainer.should_stop = True


def fit(module, callbacks=(), **trainer_kwargs):
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        accelerator="cpu", callbacks=list(callbacks), **trainer_kwargs)
    trainer.fit(module, make_datamodule())
    return trainer


@pytest.mark.integration
def test_rl_steps_stops_after_that_many_rollouts_and_checkpoints_count_rl_steps(tmp_path):
    module = make_ppo(num_ppo_epochs=2, num_mini_batches=2, response_length=8, rl_steps=3)  # 4 updates per step
    checkpoint = LastCheckpoint(dirpath=tmp_path, filename="rl{step}", save_top_k=-1, every_n_train_steps=2,
                                save_last=True)
    trainer = fit(module, [checkpoint], enable_checkpointing=True)  # no max_steps
    assert module.rl_step == 3 and trainer.global_step == 3 * 4
    # after RL step 2 (Lightning's step 8): `{step}` in a file name is the RL step too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "rlstep=2.ckpt"]


@pytest.mark.integration
def test_a_max_steps_that_is_no_multiple_runs_its_last_rl_step_with_the_rollout_producer():
    """max_steps=3 at 2 optimizer steps per RL step: Lightning runs 2 RL steps, and the rollout producer (which draws
    only the run's RL steps) drew the second one too."""
    module = make_rloo(num_mini_batches=2, response_length=4, max_staleness=1)
    trainer = fit(module, enable_checkpointing=False, max_steps=3)
    assert module.rl_step == 2 == module.total_rl_steps() and trainer.global_step == 4


@pytest.mark.integration
def test_a_fit_without_any_limit_warns_that_it_trains_until_stopped():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(make_rloo(response_length=4), [StopAfterOneStep()], enable_checkpointing=False)
    assert sum("This fit has no length" in str(w.message) for w in caught) == 1


@pytest.mark.integration
def test_a_second_fit_of_a_trained_module_trains_nothing_and_says_why(caplog):
    module = make_rloo(response_length=4, rl_steps=1)
    fit(module, enable_checkpointing=False)
    trained = {name: p.detach().clone() for name, p in module.named_parameters() if p.requires_grad}
    with caplog.at_level("INFO"):
        fit(module, enable_checkpointing=False)
    assert "This module is already at RL step 1 of its rl_steps=1: nothing is left to train" in caplog.text
    assert module.rl_step == 1 and all(torch.equal(p, trained[n]) for n, p in module.named_parameters() if n in trained)


class RecordPrompts(L.Callback):
    def __init__(self):
        self.batches = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.batches.append(batch["input_ids"].clone())


@pytest.mark.integration
@pytest.mark.parametrize("staleness", [None, 1], ids=["sync", "async"])
def test_limit_train_batches_with_max_epochs_trains_the_stream_s_batches_in_order(staleness):
    """2 epochs of 2 batches: 4 RL steps on the stream's batches 0-3 (the second epoch continues the stream, as a
    resumed run does, instead of repeating its first batches); the rollout producer draws those same prompts."""
    module, record = make_rloo(response_length=4, max_staleness=staleness), RecordPrompts()
    datamodule = make_datamodule()
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", callbacks=[record],
                        limit_train_batches=2, max_epochs=2)
    trainer.fit(module, datamodule)
    assert module.rl_step == 4 == module.total_rl_steps()
    stream = datamodule.prompt_stream()
    for step, batch in enumerate(record.batches):
        assert torch.equal(batch, stream.batch(step)["input_ids"]), step
    assert len(record.batches) == 4 and not torch.equal(record.batches[2], record.batches[0])
