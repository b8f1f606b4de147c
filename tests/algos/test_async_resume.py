"""Async mode across kill -9: the rollouts drawn ahead die with the process, and `ckpt_path=last` draws them again,
so every RL step trains its own prompts once: none skipped, none repeated."""

import json

import pytest

from tests.apps import run_app, run_process
from tests.helpers import ROOT

pytestmark = pytest.mark.integration  # runs a Trainer or an app

RUN = ["algo.max_staleness=2", "data.batch_size=4", "algo.response_length=8", "data.num_eval_prompts=4",
       "callbacks.generation_samples=null", "callbacks.training_summary=null", "callbacks.curves=null",
       "callbacks.histograms=null", "callbacks.evaluation=null", "callbacks.model_checkpoint.every_n_train_steps=1",
       "+callbacks.record._target_=tests.helpers.RecordTrainedPrompts"]


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_run_killed_with_rollouts_in_flight_resumes_without_skipping_or_repeating_prompts(tmp_path):
    env = {"PYTHONPATH": str(ROOT)}
    full = run_app("train.py", "steps=4", *RUN, "hydra.run.dir=full", f"+callbacks.record.path={tmp_path}/full.jsonl",
                   cwd=tmp_path, env=env)
    assert full.returncode == 0, full.stderr[-2000:]
    killed = run_process("train.py", "steps=4", *RUN, "hydra.run.dir=run", f"+callbacks.record.path={tmp_path}/a.jsonl",
                         "+callbacks.kill._target_=tests.helpers.KillAt", "+callbacks.kill.rl_step=2", cwd=tmp_path,
                         env=env)
    assert killed.returncode == -9  # SIGKILL, with rollouts 3 and 4 drawn ahead (S=2)
    resumed = run_app("train.py", "steps=4", *RUN, "hydra.run.dir=run", "ckpt_path=last",
                      f"+callbacks.record.path={tmp_path}/b.jsonl", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    expected = {r["rl_step"]: r["prompts"] for r in records(tmp_path / "full.jsonl")}
    before, after = records(tmp_path / "a.jsonl"), records(tmp_path / "b.jsonl")
    assert [r["rl_step"] for r in before] == [1, 2]
    resumed_from = after[0]["rl_step"] - 1  # the last checkpoint written before the kill (step 1 or 2)
    assert resumed_from in (1, 2) and [r["rl_step"] for r in after] == list(range(resumed_from + 1, 5))
    trained = {r["rl_step"]: r["prompts"] for r in before[:resumed_from] + after}
    assert trained == expected  # each step's prompts, once
    assert len({p for prompts in trained.values() for p in prompts}) == 4 * 4  # 4 batches of 4 distinct prompts
