"""samples.jsonl of a resumed run: one record, as metrics.csv is: the rows of steps after the checkpoint's, which the
resumed run draws again, are dropped when it starts."""

import json
from types import SimpleNamespace

from lit_rlhf.callbacks import GenerationSamples


def resume(tmp_path, lines: list[str], rl_step: int, rank_zero: bool = True) -> list[str]:
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(lines))
    trainer = SimpleNamespace(is_global_zero=rank_zero)
    GenerationSamples(dirpath=str(tmp_path)).on_fit_start(trainer, SimpleNamespace(rl_step=rl_step))
    return path.read_text().splitlines(keepends=True)


def row(stage: str, step) -> str:
    return json.dumps({"step": step, "stage": stage, "mode": "sample", "query": "q", "response": "r"}) + "\n"


def test_a_resume_from_an_earlier_checkpoint_drops_the_samples_it_draws_again(tmp_path):
    # the run sampled every step up to step 4, then crashed; its last checkpoint holds step 2
    earlier = [row("start", 0), row("train", 1), row("train", 2), "not json\n", row("train", 3), row("train", 4)]
    assert resume(tmp_path, earlier, rl_step=2) == earlier[:4]  # a line that is not a row stays
    assert not list(tmp_path.glob(".*partial"))


def test_a_resume_keeps_every_row_up_to_its_checkpoints_step(tmp_path):
    # stopped by max_time at step 2 (its end samples) and resumed from there; rows without a whole-number step stay
    earlier = [row("start", 0), row("train", 1), row("end", 2), row("train", "3"), row("train", True), "[]\n"]
    assert resume(tmp_path, earlier, rl_step=2) == earlier


def test_only_rank_zero_rewrites_the_file(tmp_path):
    earlier = [row("start", 0), row("train", 1), row("train", 2)]
    assert resume(tmp_path, earlier, rl_step=1, rank_zero=False) == earlier
    assert resume(tmp_path, earlier, rl_step=1) == earlier[:2]


def test_a_row_cut_short_is_dropped_so_that_the_resumed_runs_rows_stay_whole(tmp_path):
    """A kill or a full disk in the middle of a row: the resumed run appended its next row to the unended line, and
    both were one unreadable line."""
    earlier = [row("start", 0), row("train", 1), row("train", 2)[:30]]
    assert resume(tmp_path, earlier, rl_step=2) == earlier[:2]
    from lit_rlhf.callbacks.samples import drop_rows_after

    (tmp_path / "samples.jsonl").write_text(row("start", 0)[:20])  # cut in the first: the start samples are drawn
    drop_rows_after(tmp_path / "samples.jsonl", 0)  # again, after nothing
    assert (tmp_path / "samples.jsonl").read_text() == ""
