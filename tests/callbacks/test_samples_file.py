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
