"""A reward that never returns cannot hold a run, synchronous or async: SIGTERM abandons the call with one line,
exit 143 and a checkpoint to resume from; a second Ctrl-C ends the process at once. Real processes: the signals
and the exit are the subject."""

import csv
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.apps import run_app
from tests.helpers import FAST, ROOT

pytestmark = pytest.mark.integration  # runs a Trainer or an app

HANGING_REWARD = '''
import time
from pathlib import Path

import torch


def hang_on_a_call(prompts, completions):
    """Each completion's length mod 7; while a file `hang` is there, the call it names (counted from the first: the
    held-out prompts at step 0, RL step 1, RL step 2, ...) never returns."""
    calls = Path("calls")
    count = int(calls.read_text()) + 1 if calls.exists() else 1
    calls.write_text(str(count))
    if Path("hang").exists() and count == int(Path("hang").read_text()):
        Path("hanging").write_text("")
        time.sleep(3600)
    return torch.tensor([float(len(c) % 7) for c in completions])
'''

ASYNC = ["algo.max_staleness=1"]
# where the reward hangs: the run's settings, the hung call, what the run waits on, the RL steps the checkpoint holds,
# and what the error line says runs again on resume
HUNG = {
    "in RL step 2": (["trainer.val_check_interval=2"], 3, "the reward", 1, "the interrupted RL step runs again"),
    "in RL step 1, held-out evaluations after every step": (
        ["trainer.val_check_interval=1"], 2, "the reward", 0, "the interrupted RL step runs again"),
    "in RL step 2, async": (ASYNC, 3, "the rollout producer", 1,
                            "the interrupted RL step runs again"),
    "in the held-out evaluation after RL step 2": (
        ["trainer.val_check_interval=2"], 4, "the reward", 2,
        "it holds the last complete RL step; the interrupted held-out evaluation runs again first"),
}


def hanging_reward_run(settings: list[str]) -> list[str]:
    return [*[a for a in FAST if not a.startswith("steps=")], "steps=4", "hydra.run.dir=run", *settings,
            "reward._target_=hanging_reward.hang_on_a_call", "callbacks.model_checkpoint.every_n_train_steps=1",
            "algo.optimizer.lr=0.01"]


def start_run_with_a_hanging_reward(tmp_path, settings: list[str], hung_call: int):
    (tmp_path / "hanging_reward.py").write_text(HANGING_REWARD)
    (tmp_path / "hang").write_text(str(hung_call))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}."}
    process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *hanging_reward_run(settings)], cwd=tmp_path,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not (tmp_path / "hanging").exists():
        assert process.poll() is None and time.time() < deadline, process.communicate()[1][-3000:]
        time.sleep(0.1)
    time.sleep(1.0)  # the trainer now waits on the call
    return process


def ended(process, timeout=120) -> tuple[str, str]:
    """The process's output once it ended; one still running after `timeout` is killed and the test fails."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"the run did not end within {timeout} s of the signal")


def logged_rows(run_dir) -> list[tuple[str, list[str], str]]:
    """metrics.csv's rows: the step, the metrics logged there (timings left out) and the held-out score."""
    with open(run_dir / "csv" / "metrics.csv") as f:
        return [(row["step"], sorted(k for k, v in row.items() if v and not k.startswith("time/")),
                 row["eval/scores"]) for row in csv.DictReader(f)]


@pytest.mark.parametrize("when", HUNG)
def test_sigterm_abandons_a_reward_that_never_returns_and_leaves_a_checkpoint(when, tmp_path):
    """SIGTERM while a reward never returns: the call is abandoned, the run ends within seconds with one line, exit
    143 and interrupted.ckpt, and (synchronous) the resume from it trains and logs what one uninterrupted run does:
    the same weights, and metrics.csv's rows at the same steps. Resumed within a step, Lightning counted one more
    step (every row one step further on, the evaluations a step late); in the held-out evaluation after a step, the
    checkpoint holds that step and the resume evaluates again first: metrics.csv lost that step's training row, and
    the line said the step runs again."""
    settings, hung_call, waited_on, steps_saved, runs_again = HUNG[when]
    process = start_run_with_a_hanging_reward(tmp_path, settings, hung_call)
    signalled = time.time()
    process.send_signal(signal.SIGTERM)
    _, stderr = ended(process)
    assert time.time() - signalled < 30  # not the producer's 120 s stop timeout, nor the reward's hour
    assert process.returncode == 143, stderr[-3000:]
    line = stderr.strip().splitlines()[-1]
    assert line.startswith(f"stopped by SIGTERM while waiting on {waited_on}"), line
    assert line.endswith(f"which did not return: the call was abandoned; resume from the checkpoint above "
                         f"({runs_again})."), line
    assert "Traceback" not in stderr
    checkpoint = torch.load(tmp_path / "run" / "checkpoints" / "interrupted.ckpt", weights_only=True)
    assert checkpoint["rlhf_state"]["rl_step"] == steps_saved
    if settings != ASYNC:  # from the random states it began with: the resumed run trains what one uninterrupted
        # run trains, to the last bit (async mode redraws from newer weights: docs/async.md)
        (tmp_path / "hang").unlink()
        here = {"PYTHONPATH": f"{ROOT}{os.pathsep}."}
        resumed = run_app("train.py", *hanging_reward_run(settings), "ckpt_path=run/checkpoints/interrupted.ckpt",
                          cwd=tmp_path, env=here)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        whole = tmp_path / "whole"
        whole.mkdir()
        (whole / "hanging_reward.py").write_text(HANGING_REWARD)
        assert run_app("train.py", *hanging_reward_run(settings), cwd=whole, env=here).returncode == 0
        trained = [torch.load(d / "run" / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
                   for d in (tmp_path, whole)]
        assert trained[0].keys() == trained[1].keys() and trained[0]
        for name, tensor in trained[1].items():
            assert torch.equal(trained[0][name], tensor), name
        assert logged_rows(tmp_path / "run") == logged_rows(whole / "run")


def test_a_second_ctrl_c_ends_an_async_run_whose_reward_never_returns_at_once(tmp_path):
    process = start_run_with_a_hanging_reward(tmp_path, ASYNC, 3)
    signalled = time.time()
    process.send_signal(signal.SIGINT)  # the first: finish the step (which cannot finish), then stop
    time.sleep(1.0)
    process.send_signal(signal.SIGINT)  # the second: abort now
    _, stderr = ended(process)
    assert time.time() - signalled < 30
    assert process.returncode == 130, stderr[-3000:]  # a Ctrl-C's code, not 1 (an unexpected error's)
    line = stderr.strip().splitlines()[-1]
    assert line.startswith("stopped by a second Ctrl-C before the RL step in progress ended: nothing of it was "
                           "saved"), line
    assert "Traceback" not in stderr


SILENT_TEACHER = '''
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):  # /v1/models: the server is up and serves one model
        data = json.dumps({"data": [{"id": "teacher"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # /tokenize: not served (the check is skipped); /v1/completions: never answered
        if self.path == "/tokenize":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        open("asked", "w").close()
        time.sleep(3600)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
'''


def test_sigterm_abandons_a_served_teacher_that_never_answers_and_leaves_a_checkpoint(tmp_path):
    """A synchronous distillation run waiting on a teacher server that never answers (60 s timeout, 3 retries)
    ends within seconds of SIGTERM, as a run waiting on a reward does."""
    (tmp_path / "silent_teacher.py").write_text(SILENT_TEACHER)
    server = subprocess.Popen([sys.executable, "silent_teacher.py"], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        args = [*FAST, "hydra.run.dir=run", "algo=distill", "teacher=served", f"teacher.url=http://127.0.0.1:{port}",
                "teacher.batch_size=4", "algo.temperature=1", "data.num_eval_prompts=0"]  # 4 requests at once
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], cwd=tmp_path, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 240
        while not (tmp_path / "asked").exists():  # RL step 1's rollout asks the teacher
            assert process.poll() is None and time.time() < deadline, process.communicate()[1][-3000:]
            time.sleep(0.1)
        time.sleep(1.0)  # the trainer now waits on the teacher
        signalled = time.time()
        process.send_signal(signal.SIGTERM)
        _, stderr = ended(process)
        assert time.time() - signalled < 30  # not the teacher's 60 s timeout times its retries
    finally:
        server.kill()
        server.communicate()
    assert process.returncode == 143, stderr[-3000:]
    line = stderr.strip().splitlines()[-1]
    assert line.startswith("stopped by SIGTERM while waiting on the teacher, which did not return"), line
    assert "Traceback" not in stderr
    assert (tmp_path / "run" / "checkpoints" / "interrupted.ckpt").exists()
