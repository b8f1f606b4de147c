"""python -m lit_rlhf.serve and train.py reward=http together over loopback, as a user runs them."""

import asyncio
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading

import pytest

from lit_rlhf.cli.reward_server import Batcher
from lit_rlhf.rewards import HTTPReward
from lit_rlhf.tasks.arithmetic import ArithmeticCorrect
from tests.apps import BASE_ENV, ROOT, run_app
from tests.helpers import FAST, one_line_error
from tests.remote.fake_server import FakeRewardServer, length_scores


class ServedReward:
    """`python -m lit_rlhf.serve port=0 ...` in a subprocess; url from its first line; stop() sends SIGTERM. For what
    only the server's process shows (how it stops); ServedInThread serves the same app for the rest."""

    def __init__(self, *args: str, cwd, env: dict | None = None):
        self.process = subprocess.Popen([sys.executable, "-m", "lit_rlhf.serve", "port=0", *args], cwd=cwd,
                                        env={**os.environ, **BASE_ENV, "PYTHONPATH": str(ROOT), **(env or {})},
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.first_line = self.process.stdout.readline()
        found = re.search(r"http://[\d.]+:\d+", self.first_line)
        assert found, (self.first_line, self.process.stderr.read()[-3000:] if self.process.poll() is not None else "")
        self.url = found.group()

    def stop(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGTERM)
        stdout, _ = self.process.communicate(timeout=60)
        return self.process.returncode, stdout

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


class ServedInThread:
    """What `python -m lit_rlhf.serve port=0 ...` serves (the serve config composed from the same arguments, its checks,
    the reward it builds, the app create_app makes of it), by uvicorn in a thread of this process. Environment
    variables in `env` are set for the duration (the token a server reads)."""

    def __init__(self, *args: str, env: dict | None = None):
        import uvicorn
        from hydra import compose, initialize_config_dir

        from lit_rlhf.cli.resolvers import register_resolvers
        from lit_rlhf.cli.reward_server import create_app
        from lit_rlhf.cli.serve import served_name, served_reward

        self.env = env or {}
        os.environ.update(self.env)
        register_resolvers()
        with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
            cfg = compose("serve", overrides=["port=0", *args])
        reward = served_reward(cfg)
        app = create_app(reward, served_name(reward), cfg.max_batch_size, cfg.max_wait_ms, cfg.auth_env,
                         cfg.max_body_mb)
        self.socket = socket.socket()
        self.socket.bind((cfg.host, 0))
        self.url = f"http://{cfg.host}:{self.socket.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self.thread.start()
        while not self.server.started and self.thread.is_alive():
            self.thread.join(0.01)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(30)
        self.socket.close()
        for key in self.env:
            os.environ.pop(key, None)


def test_a_served_reward_scores_like_the_reward_in_process():
    prompts = [f"What is {i} + {i}?" for i in range(9)]
    completions = [f"Answer: {2 * i if i % 3 else i}" for i in range(9)]
    answers = [str(2 * i) for i in range(9)]
    with ServedInThread("reward=arithmetic_correct") as server:
        reward = HTTPReward(server.url, batch_size=4, max_concurrency=3)
        assert reward.required_columns == ["answer"]  # the server asks for the column its reward reads
        served = reward(prompts, completions, answer=answers)
    assert served.tolist() == ArithmeticCorrect()(prompts, completions, answer=answers).tolist()
    assert served.tolist().count(1.0) == 7  # all but i = 3 and 6


@pytest.mark.integration
def test_a_request_in_flight_is_answered_before_the_server_stops_cleanly(tmp_path):
    """The server's process: its first line, SIGTERM while a request is being scored (the request is answered, the
    process exits 0 with its last line), and no file written."""
    from concurrent.futures import ThreadPoolExecutor

    with ServedReward("reward._target_=tests.remote.slow_reward.length_after_2s", cwd=tmp_path) as server:
        assert server.first_line.startswith("Serving the reward length_after_2s on http://127.0.0.1:")
        reward = HTTPReward(server.url, retries=0)
        reward.load()
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(reward, ["p", "q"], ["ab", "abcd"])
            import time

            time.sleep(0.5)  # the reward call has started
            code, stdout = server.stop()
            assert pending.result(timeout=30).tolist() == [2.0, 4.0]
    assert code == 0 and stdout.strip().endswith("Reward server stopped.")
    assert list(tmp_path.iterdir()) == []  # a server writes no files


def test_concurrent_requests_are_scored_by_one_reward_call():
    calls = []

    def reward(prompts, completions):
        calls.append(len(completions))
        return [float(len(c)) for c in completions]

    async def two_clients():
        batcher = Batcher(reward, max_batch_size=256, max_wait_s=0.5)
        worker = asyncio.create_task(batcher.run())
        scores = await asyncio.gather(batcher.score(["p", "q"], ["a", "bb"], {}), batcher.score(["r"], ["ccc"], {}))
        worker.cancel()
        return scores

    assert asyncio.run(two_clients()) == [[1.0, 2.0], [3.0]]
    assert calls == [3]


def test_a_request_body_over_max_body_mb_is_answered_413_unread():
    """The default cap (8 MB): a 20 MB body is refused by its Content-Length and, sent in chunks without one, as it
    arrives; the client, still uploading when refused, reads the 413 and its reason (three times each: a server that
    closes on unread bytes resets the connection and loses the answer in some of them); a request under the cap is
    scored."""
    import httpx

    big = json.dumps({"prompts": ["p"], "completions": ["x" * 20 * 2**20]}).encode()
    headers = {"content-type": "application/json"}
    with ServedInThread() as server:
        refused = [httpx.post(f"{server.url}/score", content=big, headers=headers) for _ in range(3)]
        refused += [httpx.post(f"{server.url}/score", headers=headers,
                               content=(big[i:i + 2**20] for i in range(0, len(big), 2**20))) for _ in range(3)]
        small = httpx.post(f"{server.url}/score", json={"prompts": ["p"], "completions": ["I love it"]})
    for response in refused:
        assert response.status_code == 413
        assert "larger than the server's max_body_mb (8 MB)" in response.json()["detail"]
    assert small.status_code == 200 and small.json()["scores"][0] > 0.5


def test_the_server_refuses_a_client_without_its_token():
    with ServedInThread("auth_env=SERVE_TOKEN", env={"SERVE_TOKEN": "s3cret"}) as server:
        with pytest.raises(Exception, match="refused GET /health with HTTP 401"):
            HTTPReward(server.url, retries=0).load()
        os.environ["CLIENT_TOKEN"] = "s3cret"
        try:
            assert HTTPReward(server.url, auth_env="CLIENT_TOKEN")(["p"], ["I love it"]).item() > 0.5
        finally:
            del os.environ["CLIENT_TOKEN"]


@pytest.mark.integration
def test_training_against_a_served_reward_matches_training_in_process(tmp_path):
    args = [a for a in FAST if not a.startswith("steps=")] + ["steps=3"]
    (tmp_path / "remote").mkdir()
    with ServedInThread("reward=vader") as server:
        remote = run_app("train.py", *args, "reward=http", f"reward.url={server.url}", cwd=tmp_path / "remote")
    assert remote.returncode == 0, remote.stderr[-3000:]
    assert "HTTP Request" not in remote.stdout + remote.stderr  # the client's per-request INFO lines are silenced
    (tmp_path / "local").mkdir()
    local = run_app("train.py", *args, "reward=vader", cwd=tmp_path / "local")
    assert local.returncode == 0, local.stderr[-3000:]
    results = {side: json.loads(next((tmp_path / side / "logs" / "train" / "runs").iterdir()).joinpath(
        "result.json").read_text())["metrics"] for side in ("remote", "local")}
    for key in ("eval/scores", "eval/rlhf_reward", "objective/scores", "objective/kl"):
        assert results["remote"][key] == results["local"][key], key
    assert results["remote"]["rewards/http/mean"] == results["local"]["rewards/vader/mean"]
    assert results["remote"]["time/reward_s"] >= results["remote"]["time/reward_wait_s"] >= 0


@pytest.mark.integration
def test_a_server_gone_mid_run_stops_the_run_in_one_line_and_the_printed_command_resumes_it(tmp_path):
    """Two RL steps scored, then the server goes away: the third step's retries fail, the run stops with one line
    naming the server and the command that resumes from the last checkpoint; with the server back, it does."""
    args = [a for a in FAST if not a.startswith("steps=")] + [
        "steps=4", "+trainer.limit_val_batches=0", "callbacks.model_checkpoint.every_n_train_steps=1"]

    def two_then_gone(number, body):
        if number == 1:
            threading.Thread(target=server.stop).start()
        return 200, json.dumps({"scores": length_scores(body)})

    server = FakeRewardServer(two_then_gone)
    result = run_app("train.py", *args, "reward=http", f"reward.url={server.url}", "reward.retries=2",
                     "reward.backoff_s=0.05", cwd=tmp_path)
    line = one_line_error(result)
    assert line.startswith(f"error: the reward server {server.url} (batch 1 of 1, completions 0-15): cannot connect "
                           f"(ConnectError) after 3 attempts; check that the server is up")
    assert "Stopped in RL step 3; resume from the last checkpoint: python " in line
    command = shlex.split(line.split("resume from the last checkpoint: ", 1)[1])
    assert command[-1].endswith("checkpoints/last.ckpt")

    with FakeRewardServer(port=server.port) as back:
        assert command[:2] == ["python", str(ROOT / "train.py")]
        resumed = run_app("train.py", *command[2:], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert len(back.requests) == 2  # RL steps 3 and 4


@pytest.mark.integration
def test_a_server_down_at_start_is_one_line_before_any_training_step(tmp_path):
    server = FakeRewardServer()
    server.stop()
    result = run_app("train.py", *FAST, "reward=http", f"reward.url={server.url}", "reward.retries=1",
                     "reward.backoff_s=0", cwd=tmp_path)
    assert one_line_error(result) == (f"error: the reward server {server.url}: cannot connect (ConnectError) after "
                                      f"2 attempts; check that the server is up ({server.url}/health).")
    assert not (tmp_path / "logs" / "train" / "runs").exists() or not any(
        (run / "checkpoints").exists() for run in (tmp_path / "logs" / "train" / "runs").iterdir())


@pytest.mark.integration
def test_a_password_in_the_reward_url_is_masked_in_the_error_the_saved_configs_and_result(tmp_path):
    """reward.url=http://user:password@host: the password appears in no line printed and no file the run keeps."""
    server = FakeRewardServer()
    server.stop()
    url = f"http://alice:s3cr3t-Pa55@127.0.0.1:{server.port}"
    result = run_app("train.py", *FAST, "reward=http", f"reward.url={url}", "reward.retries=0",
                     "hydra.run.dir=run", cwd=tmp_path)
    line = one_line_error(result)
    assert f"the reward server http://alice:***@127.0.0.1:{server.port}: cannot connect" in line
    assert "s3cr3t" not in result.stderr + result.stdout
    kept = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert kept, "the run directory keeps its records (.hydra, result.json)"
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "failed"
    for path in kept:
        assert b"s3cr3t" not in path.read_bytes(), path


@pytest.mark.integration
def test_a_sweep_job_its_checks_refuse_keeps_no_password_and_no_token_typed_as_auth_env(tmp_path):
    """A sweep keeps a refused job's folder (.hydra/, result.json) and its summary.csv: the URL's password (which
    Hydra writes escaped there, http\\://alice\\:...) and a token typed in auth_env's place are masked in every one,
    and in what the sweep prints, even where the run's checks refuse it before anything is built."""
    result = run_app("train.py", "-m", "reward=http", "reward.url=http://alice:s3cr3t-Pa55@127.0.0.1:9",
                     "reward.auth_env=sk-live-4f9a", "steps=0", "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert "job 0 failed: steps=0 must be a whole number >= 1." in result.stdout + result.stderr
    kept = [path for path in (tmp_path / "sweep").rglob("*") if path.is_file()]
    assert {"overrides.yaml", "config.yaml", "hydra.yaml", "result.json", "summary.csv"} <= {p.name for p in kept}
    for path in kept:
        assert b"s3cr3t" not in path.read_bytes() and b"sk-live" not in path.read_bytes(), path
    assert "s3cr3t" not in result.stdout + result.stderr and "sk-live" not in result.stdout + result.stderr


def test_without_fastapi_the_server_says_how_to_install_it(monkeypatch):
    import importlib.util

    from lit_rlhf.cli.reward_server import serve
    from lit_rlhf.errors import UnavailableError

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "fastapi" else find_spec(name, *args))
    with pytest.raises(UnavailableError, match=r'python -m lit_rlhf.serve needs fastapi \(not installed here\); pip '):
        serve(lambda prompts, completions: [0.0] * len(completions), "r", port=0)


@pytest.mark.integration
@pytest.mark.parametrize("args, expected", [
    (["host=0.0.0.0"], "host='0.0.0.0' accepts other machines, and without a token any of them may call the reward; "
                       "set auth_env=<a variable holding a token> (clients: reward.auth_env), or "
                       "allow_unauthenticated=true on a network you trust."),
    (["port=70000"], "port=70000 is not a TCP port"),
    (["port=abc"], "port='abc' is not a TCP port"),
    (["max_batch_size=0"], "max_batch_size=0 must be a whole number >= 1"),
    (["max_wait_ms=nan"], "max_wait_ms=nan must be a finite number"),
    (["max_body_mb=0"], "max_body_mb=0 must be a finite number of megabytes > 0"),
])
def test_bad_server_settings_are_one_line_before_serving(args, expected, tmp_path):
    result = run_app("lit_rlhf.serve", *args, cwd=tmp_path, module=True)
    assert one_line_error(result).startswith(f"error: {expected}")


def test_an_allow_unauthenticated_that_is_no_bool_is_one_line():
    """allow_unauthenticated=flase (a typo) read as true: the reward was served to every machine without a token."""
    from omegaconf import OmegaConf

    from lit_rlhf.cli.serve import check_serve_settings
    from lit_rlhf.errors import ConfigError

    cfg = OmegaConf.create({"host": "0.0.0.0", "port": 0, "max_batch_size": 8, "max_wait_ms": 5.0, "max_body_mb": 8,
                            "auth_env": None, "allow_unauthenticated": "flase"})
    with pytest.raises(ConfigError, match=r"^allow_unauthenticated='flase' must be true or false.$"):
        check_serve_settings(cfg)
    cfg.allow_unauthenticated = True
    check_serve_settings(cfg)


def test_another_machines_address_is_served_with_a_token_or_an_explicit_flag():
    with ServedInThread("host=0.0.0.0", "auth_env=SERVE_TOKEN", env={"SERVE_TOKEN": "t0k"}) as served:
        HTTPReward(served.url.replace("0.0.0.0", "127.0.0.1"), auth_env="SERVE_TOKEN").load()
    with ServedInThread("host=0.0.0.0", "allow_unauthenticated=true") as served:
        HTTPReward(served.url.replace("0.0.0.0", "127.0.0.1")).load()


def test_a_served_reward_model_asks_clients_for_the_stopped_column():
    """A reward model scores a completion that ended with the stop token with EOS after it: its server's /health
    names `stopped`, which every rollout makes, so a client sends it; a reward that does not read it is not sent
    it."""
    from lit_rlhf.cli.reward_server import reward_columns
    from lit_rlhf.rewards import SequenceClassifierReward, VaderSentiment
    from lit_rlhf.rewards.weighted_sum import WeightedSum

    model = SequenceClassifierReward("a/folder")  # weights load on first call: none here
    assert reward_columns(model) == ["stopped"]
    assert reward_columns(VaderSentiment()) == []
    assert reward_columns(WeightedSum({"rm": model, "vader": VaderSentiment()})) == ["stopped"]


@pytest.mark.integration
def test_a_stop_a_library_caught_while_the_reward_loaded_stops_the_server_before_it_serves(tmp_path):
    """A SIGTERM raised in code that catches everything (here the reward module's import) was lost: the server went
    on, served, and ran until killed. The stop is raised again before serving: its line, exit 143."""
    (tmp_path / "swallows_stops.py").write_text(
        "import os, signal, time\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "except BaseException:  # a library's `except BaseException`, as the reward loads\n"
        "    pass\n\n\n"
        "def score(prompts, completions):\n"
        "    return [0.0] * len(completions)\n")
    result = subprocess.run([sys.executable, "-m", "lit_rlhf.serve", "port=0", "reward._target_=swallows_stops.score"],
                            cwd=tmp_path, env={**os.environ, **BASE_ENV, "PYTHONPATH": f"{ROOT}{os.pathsep}."},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 143, result.stdout[-2000:] + result.stderr[-3000:]
    assert "Serving" not in result.stdout
    assert result.stderr.strip().splitlines()[-1] == ("stopped by SIGTERM before the run began: nothing was written; "
                                                      "run the same command again to start it.")
