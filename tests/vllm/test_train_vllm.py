"""`python train.py rollout=vllm` end to end on the embedded default, as a user types it, and its resume: the
engine's logprobs stay with the trainer's at every step (the weights reach it after each update, and after a
resume the checkpoint's weights, not the base model's)."""

import csv
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apps import BASE_ENV, run_app, run_process
from tests.helpers import FAST, ROOT

# every test here starts a vLLM engine or server, or runs train.py: the integration tier
pytestmark = pytest.mark.integration

# the embedded default's LoRA drifts ~1e-2 in logprob from the base model within 4 steps; a synced engine stays ~1e-5
SYNCED = 1e-3
ARGS = ["rollout=vllm", "rollout.kv_cache_gib=0.25", *[a for a in FAST if not a.startswith("steps=")]]


def run_dir(result) -> Path:
    return Path(re.search(r"Run directory: (\S+)", result.stdout).group(1))


def logged_steps(directory: Path) -> dict[int, dict[str, float]]:
    rows = csv.DictReader((directory / "csv" / "metrics.csv").open())
    steps = {}
    for row in rows:
        if row.get("rollout/logprob_diff_max"):
            steps[int(row["step"])] = {k: float(v) for k, v in row.items() if v and k.startswith(("rollout/", "obj"))}
    return steps


def test_train_with_vllm_under_fsdp2_logs_the_mismatch_and_resumes(tmp_path):
    """trainer=fsdp2 (one rank: its weights are still FSDP2 shards, DTensors): the engine gets the weights gathered
    for the rollout, LoRA merged, after every update, so its logprobs stay with the trainer's; resumed from the
    sharded checkpoint, it gets the checkpoint's weights, not the base model's. (The other tests here train without
    FSDP2.)"""
    fsdp2 = ["trainer=fsdp2", "trainer.accelerator=cpu", "trainer.devices=1"]
    first = run_app("train.py", *ARGS, *fsdp2, "steps=4", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    steps = logged_steps(run_dir(first))
    assert sorted(steps) == [0, 1, 2, 3]
    assert steps[0]["rollout/logprob_diff_max"] < 1e-4  # before any update: the same weights, two kernels
    for stats in steps.values():
        assert stats["rollout/logprob_diff_max"] < SYNCED
        assert math.isfinite(stats["rollout/is_weight_mean"])  # logged, not NaN
        assert 0 <= stats["rollout/sampler_kl"] < 1e-6
    checkpoint = run_dir(first) / "checkpoints" / "last.ckpt"
    assert checkpoint.is_dir()  # sharded

    resumed = run_app("train.py", *ARGS, *fsdp2, "steps=6", f"ckpt_path={checkpoint}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = logged_steps(run_dir(resumed))
    assert sorted(after) == [4, 5]
    assert all(stats["rollout/logprob_diff_max"] < SYNCED for stats in after.values())


def test_ddp_runs_one_engine_per_rank(tmp_path):
    # both ranks' output is read: each in a process of its own
    result = run_process("train.py", *ARGS, "steps=3", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                         cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    engines = set(re.findall(r"VLLMEngine pid=(\d+)", result.stdout + result.stderr))
    assert len(engines) == 2  # each rank started its own engine process
    (directory,) = (tmp_path / "logs" / "train" / "runs").iterdir()
    steps = logged_steps(directory)
    assert sorted(steps) == [0, 1, 2]
    assert all(stats["rollout/logprob_diff_max"] < 1e-4 for stats in steps.values())  # each engine is synced


def test_the_calculator_task_trains_with_vllm_turn_by_turn(tmp_path):
    result = run_app("train.py", "experiment=calculator_grpo", "rollout=vllm", "rollout.kv_cache_gib=0.25",
                     "steps=3", "trainer.val_check_interval=3", "callbacks.evaluation=null", cwd=tmp_path,
                     )
    assert result.returncode == 0, result.stderr[-3000:]
    steps = logged_steps(run_dir(result))
    assert sorted(steps) == [0, 1, 2]
    assert all(stats["rollout/logprob_diff_max"] < SYNCED for stats in steps.values())
    assert max(stats["rollout/tool_calls_mean"] for stats in steps.values()) > 0  # tools were called and answered
    assert max(stats["rollout/turns_mean"] for stats in steps.values()) > 1


def test_async_mode_samples_with_the_engine_fed_from_the_producers_copy(tmp_path):
    """algo.max_staleness=1 with rollout=vllm: the engine samples for the producer, one version behind the trainer;
    its logprobs are the behaviour policy of the decoupled correction."""
    result = run_app("train.py", *ARGS, "steps=4", "algo.max_staleness=1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    directory = run_dir(result)
    steps = logged_steps(directory)
    assert sorted(steps) == [0, 1, 2, 3]
    assert steps[0]["rollout/logprob_diff_max"] < 1e-4  # version 0 in the engine and the trainer
    assert all(math.isfinite(stats["rollout/is_weight_mean"]) for stats in steps.values())
    rows = [r for r in csv.DictReader((directory / "csv" / "metrics.csv").open()) if r.get("async/staleness")]
    assert [float(r["async/staleness"]) for r in rows] == [0.0, 1.0, 1.0, 1.0]


def test_async_mode_refuses_concurrent_draws_with_one_engine(tmp_path):
    result = run_app("train.py", *ARGS, "steps=2", "algo.max_staleness=1", "algo.async_draws=2", cwd=tmp_path,
                     )
    assert result.returncode != 0
    assert "algo.async_draws=2 draws rollouts with different weights at once" in result.stderr


def test_ctrl_c_in_the_terminal_stops_the_run_after_its_step_and_then_the_engine(tmp_path):
    """The terminal's Ctrl-C reaches its whole process group, the engine's process too, which ended on it (its
    KeyboardInterrupt's traceback) and failed the step the trainer was finishing ("the weight sync to the vLLM engine
    failed", exit 2). The engine leaves the stop to the trainer: the run stops as with rollout=hf, after its RL step
    with a checkpoint, exit 130."""
    env = {**os.environ, **BASE_ENV, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *ARGS, "steps=40",
                                "callbacks.progress_lines.every_n_steps=1"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for line in process.stdout:
            if line.startswith("RL step 2/40"):
                break
        os.killpg(process.pid, signal.SIGINT)  # as a terminal sends it: to the app and every process it started
        _, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    # closed at the trainer's exit, the engine's process released its semaphores (killed, it left them to
    # multiprocessing's resource tracker, whose warning followed every run)
    assert "leaked semaphore" not in stderr, stderr[-3000:]
    assert re.search(r"^stopped by Ctrl-C after RL step \d+ of 40; resume with: ", stderr, re.MULTILINE), stderr[-3000:]
    (directory,) = (tmp_path / "logs" / "train" / "runs").iterdir()
    assert (directory / "checkpoints" / "interrupted.ckpt").exists()
