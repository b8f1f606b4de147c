"""Lightning's loop state rewritten for an exact resume: the held-out evaluation a checkpoint was written in."""

import copy

import pytest

from lit_rlhf.checkpoints.loop_state import an_evaluation_cut_short_runs_again_whole


def with_evaluation(total: dict, current: dict, is_last_batch: bool) -> dict:
    progress = {"total": total, "current": current, "is_last_batch": is_last_batch}
    return {"loops": {"fit_loop": {"epoch_loop.val_loop.batch_progress": progress}}}


def counts(ready, started, processed, completed) -> dict:
    return {"ready": ready, "started": started, "processed": processed, "completed": completed}


@pytest.mark.parametrize("total, current, is_last_batch", [
    (counts(1, 1, 1, 1), counts(1, 1, 1, 1), False),  # Lightning's stop on SIGTERM after the first of its batches
    (counts(4, 4, 3, 3), counts(2, 2, 1, 1), False),  # a call abandoned in its second batch, 2 batches before it
    (counts(4, 4, 3, 3), counts(2, 2, 1, 1), True),  # ... in its last batch
], ids=["stopped at the next batch", "abandoned in a batch", "abandoned in the last batch"])
def test_a_checkpoint_written_in_an_evaluation_cut_short_restarts_it_at_its_first_batch(total, current, is_last_batch):
    """As Lightning's restore reads an evaluation restarted in its first batch (total started = processed + 1): the
    resumed fit runs the whole evaluation before training on."""
    before = total["completed"] - current["completed"]
    checkpoint = with_evaluation(total, current, is_last_batch)
    an_evaluation_cut_short_runs_again_whole(checkpoint)
    progress = checkpoint["loops"]["fit_loop"]["epoch_loop.val_loop.batch_progress"]
    assert progress == {"total": counts(before + 1, before + 1, before, before), "current": counts(1, 1, 0, 0),
                        "is_last_batch": False}


@pytest.mark.parametrize("total, current, is_last_batch", [
    (counts(2, 2, 2, 2), counts(2, 2, 2, 2), True),  # ran to its end (ModelCheckpoint's on_validation_end)
    (counts(0, 0, 0, 0), counts(0, 0, 0, 0), False),  # none yet
], ids=["finished", "none yet"])
def test_a_finished_evaluation_or_none_is_left_as_lightning_wrote_it(total, current, is_last_batch):
    checkpoint = with_evaluation(total, current, is_last_batch)
    written = copy.deepcopy(checkpoint)
    an_evaluation_cut_short_runs_again_whole(checkpoint)
    assert checkpoint == written
    an_evaluation_cut_short_runs_again_whole(no_loops := {"state_dict": {}})  # a checkpoint without Lightning's loops
    assert no_loops == {"state_dict": {}}
