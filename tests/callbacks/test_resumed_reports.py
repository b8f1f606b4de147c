"""What the reports of a resumed run show: the run's own start, not the checkpoint's policy as a new start."""

import json

import lightning as L
import pytest

from lit_rlhf.callbacks import GenerationSamples, LastCheckpoint, TrainingSummary
from lit_rlhf.callbacks.summary import TRACKED, shown_sample
from tests.conftest import FAST_LEARNING, make_datamodule, make_rloo

pytestmark = pytest.mark.integration  # runs a Trainer


def fit(tmp_path, callback: L.Callback, rl_steps: int, ckpt_path=None) -> None:
    trainer = L.Trainer(logger=False, enable_progress_bar=False, limit_val_batches=0, accelerator="cpu",
                        callbacks=[callback, LastCheckpoint(dirpath=tmp_path, save_last=True, every_n_train_steps=1)],
                        default_root_dir=tmp_path)
    trainer.fit(make_rloo(rl_steps=rl_steps, optimizer=FAST_LEARNING), make_datamodule(), ckpt_path=ckpt_path,
                weights_only=True)


def test_a_resumed_run_shows_the_run_before_training_not_the_checkpoint_it_resumed_from(tmp_path):
    """The summary's "before" was sampled again from the checkpoint's policy: a resumed run compared its end with
    the checkpoint, not with the policy before training, and spent minutes sampling it on a large model."""
    L.seed_everything(0)
    first = TrainingSummary()
    fit(tmp_path, first, rl_steps=2)
    assert first.before["transcripts"] != first.after["transcripts"]  # the two steps changed the policy
    resumed = TrainingSummary()
    fit(tmp_path, resumed, rl_steps=3, ckpt_path=tmp_path / "last.ckpt")
    assert resumed.before == first.before and resumed.first_step == first.first_step  # what it prints
    assert resumed.last_step != first.last_step  # the third step's
    nothing_left = TrainingSummary()  # steps= reached: it trains nothing and prints the run's last step, not nan
    fit(tmp_path, nothing_left, rl_steps=3, ckpt_path=tmp_path / "last.ckpt")
    assert nothing_left.last_step == resumed.last_step and set(nothing_left.last_step) == set(TRACKED)


GOOD = {"prompts": ["a"], "transcripts": ["b"], "scores": [1.0], "mean_score": 1.0, "mean_kl": 0.0}


@pytest.mark.parametrize("before", [None, {"prompts": ["a"]}, {**GOOD, "prompts": "a"}, {**GOOD, "scores": ["1"]},
                                    {**GOOD, "transcripts": [["b"]]}, {**GOOD, "mean_kl": True}])
def test_a_checkpoints_sample_that_print_cannot_show_is_sampled_again(before):
    summary = TrainingSummary()
    summary.load_state_dict({"first_step": {}, "before": before})
    assert summary.before is None
    summary.load_state_dict({"first_step": {}, "before": GOOD})
    assert summary.before == GOOD and shown_sample(GOOD)


def test_a_checkpoints_step_statistics_are_kept_where_the_table_can_print_them():
    summary = TrainingSummary()
    summary.load_state_dict({"first_step": {"objective/kl": 0.5, "objective/scores": "x", "other": 1.0},
                             "last_step": [1.0], "before": None})  # the table formats each with :.3f
    assert (summary.first_step, summary.last_step) == ({"objective/kl": 0.5}, {})


def test_a_resumed_run_does_not_draw_its_start_samples_again(tmp_path):
    L.seed_everything(0)
    for rl_steps, ckpt_path in ((2, None), (3, tmp_path / "last.ckpt")):
        samples = GenerationSamples(num_samples=2, every_n_steps=1, dirpath=str(tmp_path), print_to_console=False)
        fit(tmp_path, samples, rl_steps, ckpt_path)
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    # two held-out prompts a stage; a "start" at step 2 showed the checkpoint's policy as the start
    assert [(row["stage"], row["step"]) for row in rows[::2]] == [("start", 0), ("train", 1), ("end", 2), ("end", 3)]
