"""Where a failed run says it stopped: inside the RL step that ran, or after the last one that finished."""

from types import SimpleNamespace

import pytest
from lightning.pytorch.loops.progress import _BatchProgress

from lit_rlhf.cli.train import stopped_where


def trainer_after(started: int, processed: int):
    progress = _BatchProgress()
    for _ in range(started):
        progress.increment_ready()
        progress.increment_started()
    for _ in range(processed):
        progress.increment_processed()
    return SimpleNamespace(fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=progress)))


@pytest.mark.parametrize(("started", "processed", "rl_step", "where"), [
    (3, 2, 2, "in RL step 3"),  # step 3's training_step raised (a reward server gone)
    (2, 2, 2, "after RL step 2"),  # step 2 returned; its checkpoint (or the evaluation after it) failed
    (0, 0, 0, "before RL step 1"),  # the held-out evaluation before training
])
def test_a_failure_is_placed_in_the_step_that_ran_or_after_the_one_that_finished(started, processed, rl_step, where):
    assert stopped_where(trainer_after(started, processed), SimpleNamespace(rl_step=rl_step)) == where
