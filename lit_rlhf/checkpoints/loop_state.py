"""Lightning's loop state in a checkpoint, rewritten where Lightning's restore misreads it. Its restore assumes a
checkpoint written at a training batch's end (on_train_batch_end) or in the evaluation after it, having run to its
end; this library also writes within a batch (a call abandoned on SIGTERM), after a batch's end (Lightning's own stop
on SIGTERM) and within an evaluation that SIGTERM cut short, and it counts an epoch that a fit's last step cut short
as done (keep_a_cut_epoch_unfinished). These functions lean on Lightning's loop-state keys
(`loops.fit_loop`), which Lightning may rename: each leaves a checkpoint without them untouched."""

from __future__ import annotations

from typing import Any


def loop_state_as_lightning_restores_it(checkpoint: dict[str, Any], batches_stepped: int | None = None) -> None:
    """Both rewrites below: a fit resumed from the checkpoint logs and evaluates at the uninterrupted fit's steps."""
    as_lightning_writes_at_a_batchs_end(checkpoint, batches_stepped)
    an_evaluation_cut_short_runs_again_whole(checkpoint)


def as_lightning_writes_at_a_batchs_end(checkpoint: dict[str, Any], batches_stepped: int | None = None) -> None:
    """Lightning's restore reads its loop counters as written where Lightning writes checkpoints: at a batch's end
    (on_train_batch_end) or in the evaluation after it. Two other moments this library writes at were read wrong:
    within a batch (a call abandoned on SIGTERM; the step runs again on resume) and after the batch's evaluation
    (Lightning's stop on SIGTERM at a step's end) when that batch was due an evaluation. The resumed run logged every
    step at the next one's index, and, resumed within a batch, ran the held-out evaluations one step late. Both are
    written as at the end of the last batch whose training step returned. `batches_stepped`: how many batches of the
    fit stepped the optimizer up to that one (the fit's optimizer steps with gradient accumulation); every batch
    (None) in the RL modules."""
    loop = checkpoint.get("loops", {}).get("fit_loop", {})
    progress = loop.get("epoch_loop.batch_progress") or {}
    counters = loop.get("epoch_loop.state_dict") or {}
    total, current = progress.get("total"), progress.get("current")
    if not total or not current or "_batches_that_stepped" not in counters:
        return
    stepped = total["processed"] if batches_stepped is None else batches_stepped
    # Lightning writes before counting the batch as stepped; counted, it was written after the batch's end
    counted = counters["_batches_that_stepped"] == stepped and total["completed"] == total["processed"]
    epochs = (loop.get("epoch_progress") or {}).get("total") or {}
    within_a_batch = total["started"] > total["processed"]
    after_a_batch = total["completed"] > 0 and epochs.get("processed", 0) < epochs.get("started", 0)  # epoch going on
    if not counted or not (within_a_batch or after_a_batch):
        return  # at a batch's end, in its evaluation, before training, or after its end (on_train_end)
    for counts in (total, current):
        counts["ready"] = counts["started"] = counts["processed"]
        counts["completed"] = counts["processed"] - 1  # completed, and counted as stepped, on restart
    counters["_batches_that_stepped"] = stepped - 1


def an_evaluation_cut_short_runs_again_whole(checkpoint: dict[str, Any]) -> None:
    """An evaluation within the fit stopped before its end (Lightning stops one at its next batch once SIGTERM has
    arrived; a call abandoned in it): Lightning records the batches done as a finished evaluation and its restore
    goes on training, so that evaluation was never logged. Recorded as an evaluation restarted at its first batch,
    the resumed fit runs it whole first (from the batch reached, it would log figures of part of the held-out rows)."""
    loop = checkpoint.get("loops", {}).get("fit_loop", {})
    progress = loop.get("epoch_loop.val_loop.batch_progress") or {}
    total, current = progress.get("total"), progress.get("current")
    if not total or not current or not current["started"]:
        return  # no evaluation in this epoch yet
    if progress.get("is_last_batch") and current["completed"] == current["started"]:
        return  # the last evaluation ran to its end
    before = total["completed"] - current["completed"]  # batches of the evaluations before this one
    total.update(ready=before + 1, started=before + 1, processed=before, completed=before)
    current.update(ready=1, started=1, processed=0, completed=0)
    progress["is_last_batch"] = False


def stopped_mid_epoch(fit_loop: dict) -> bool:
    """Whether a checkpoint's fit-loop state stopped after an epoch's first batch and before its last was read."""
    batches = fit_loop.get("epoch_loop.batch_progress")
    return bool(batches) and not batches["is_last_batch"] and bool(batches["current"]["processed"])


def keep_a_cut_epoch_unfinished(checkpoint: dict) -> None:
    """A fit that stopped inside an epoch (trainer.max_steps, or any stop before the epoch's last batch): Lightning's
    loop state counts that epoch as done, so a fit resumed from the checkpoint would start the next epoch where the cut
    one stopped and train one epoch fewer (with the default epochs=1: nothing). Recorded as unfinished, as an
    interruption's checkpoint records it, the resumed fit trains the epoch's remaining batches, then the epochs left:
    what the uninterrupted fit trains."""
    loop = checkpoint.get("loops", {}).get("fit_loop", {})
    epochs = loop.get("epoch_progress")
    if not epochs or not stopped_mid_epoch(loop):
        return
    for count in (epochs["total"], epochs["current"]):
        if count["started"] and count["processed"] == count["started"]:  # counted done
            count["processed"] = count["completed"] = count["started"] - 1
    checkpoint["epoch"] = epochs["current"]["completed"]  # Lightning's current_epoch
