"""HTTPReward against a server that misbehaves on purpose: retries, timeouts, bad answers, auth."""

import json
import time

import pytest
import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.remote import RewardServiceError
from lit_rlhf.rewards import HTTPReward
from tests.remote.fake_server import FakeRewardServer, hang, length_scores, trickle

PROMPTS = [f"p{i}" for i in range(7)]
COMPLETIONS = ["a" * (i + 1) for i in range(7)]


def test_batches_go_out_in_requests_of_batch_size_and_come_back_in_order():
    with FakeRewardServer(columns=["answer"]) as server:
        reward = HTTPReward(server.url, batch_size=3, max_concurrency=2)
        scores = reward(PROMPTS, COMPLETIONS, answer=list(range(7)), unused=list("abcdefg"))
    assert scores.tolist() == [float(i + 1) for i in range(7)] and scores.dtype == torch.float32
    sent = sorted(server.requests, key=lambda body: body["prompts"][0])
    assert [len(body["completions"]) for body in sent] == [3, 3, 1]
    assert [body["columns"] for body in sent] == [{"answer": [0, 1, 2]}, {"answer": [3, 4, 5]}, {"answer": [6]}]
    assert reward.required_columns == ["answer"]  # what the server's /health asked for, no more


def test_5xx_answers_are_retried_with_backoff_and_4xx_is_not():
    def flaky(number, body):
        return (503, "busy") if number < 2 else (200, json.dumps({"scores": length_scores(body)}))

    with FakeRewardServer(flaky) as server:
        assert HTTPReward(server.url, retries=3, backoff_s=0.01)(["p"], ["abc"]).tolist() == [3.0]
    assert len(server.requests) == 3
    with FakeRewardServer(lambda n, body: (422, '{"detail": "bad"}')) as server:
        with pytest.raises(RewardServiceError, match=r"refused POST /score with HTTP 422: \{\"detail\": \"bad\"\}"):
            HTTPReward(server.url, retries=3, backoff_s=0.01)(["p"], ["abc"])
    assert len(server.requests) == 1


def test_a_server_that_is_down_or_goes_down_fails_after_its_retries_naming_it():
    server = FakeRewardServer()
    url = server.url
    server.stop()
    with pytest.raises(RewardServiceError) as caught:
        HTTPReward(url, retries=2, backoff_s=0.01).load()
    assert str(caught.value).startswith(f"the reward server {url}: cannot connect (ConnectError) after 3 attempts")


def test_a_hanging_server_ends_in_the_timeout_not_a_hang():
    with FakeRewardServer(hang(10.0)) as server:
        # 1 s: long enough for each attempt to reach the server on a loaded machine, so that it counts both
        reward = HTTPReward(server.url, timeout_s=1.0, retries=1, backoff_s=0.0)
        start = time.monotonic()
        with pytest.raises(RewardServiceError, match=r"batch 1 of 1, completions 0-0\): no answer within "
                                                     r"reward.timeout_s=1 s after 2 attempts"):
            reward(["p"], ["abc"])
        assert time.monotonic() - start < 5.0  # two timeouts of 1 s, not the server's 10 s
    assert len(server.requests) == 2


def test_a_server_trickling_its_answer_ends_in_the_timeout_of_the_whole_request():
    """httpx's timeout bounds each read; a byte every 0.3 s never trips it. timeout_s bounds the whole request."""
    with FakeRewardServer(trickle(0.3)) as server:
        reward = HTTPReward(server.url, timeout_s=1.0, retries=0)
        reward.load()
        start = time.monotonic()
        with pytest.raises(RewardServiceError, match=r"no answer within reward.timeout_s=1 s after 1 attempt"):
            reward(["p"], ["abc" * 20])  # an answer of ~18 bytes: 5 s at this pace
        assert time.monotonic() - start < 3.0
    with FakeRewardServer(trickle(0.01)) as server:  # slow but within the timeout: answered
        assert HTTPReward(server.url, timeout_s=5.0, retries=0)(["p"], ["abc"]).tolist() == [3.0]


@pytest.mark.parametrize("answer, expected", [
    ('{"scores": [1.0]}', r"answered 1 scores for 2 completions"),
    ('{"scores": [1.0, NaN]}', r"answered nan for completion 1; every score must be a finite number"),
    ('{"scores": [1.0, "2"]}', r"answered 2 for completion 1"),
    ("<html>\x1b[31m oops", r"answered <html>\\x1b\[31m oops, which is not JSON"),
    ('{"score": [1, 2]}', r"without a \"scores\" list"),
])
def test_a_wrong_answer_is_one_line_naming_the_server_and_the_batch(answer, expected):
    with FakeRewardServer(lambda n, body: (200, answer)) as server:
        with pytest.raises(RewardServiceError) as caught:
            HTTPReward(server.url, batch_size=2)(["p", "q", "r"], ["a", "b", "c"])
    message = str(caught.value)
    assert message.startswith(f"the reward server {server.url} (batch 1 of 2, completions 0-1) ")
    assert "\n" not in message and "\x1b" not in message
    import re

    assert re.search(expected, message), message


def test_the_token_comes_from_the_environment_and_never_from_the_config(monkeypatch):
    with pytest.raises(ConfigError, match="reward.auth_env='REWARD_TOKEN' names an environment variable that is "
                                          "not set; export REWARD_TOKEN="):
        HTTPReward("http://127.0.0.1:9", auth_env="REWARD_TOKEN")
    monkeypatch.setenv("REWARD_TOKEN", "s3cret")
    with FakeRewardServer() as server:
        reward = HTTPReward(server.url, auth_env="REWARD_TOKEN")
        reward(["p"], ["a"])
    assert server.headers[0]["Authorization"] == "Bearer s3cret"
    assert "s3cret" not in repr(vars(reward).get("auth_env")) and "s3cret" not in json.dumps(
        {k: v for k, v in vars(reward).items() if isinstance(v, (str, int, float, bool, type(None)))})


@pytest.mark.parametrize("settings, expected", [
    ({"url": "localhost:8000"}, "reward.url='localhost:8000' is not an http(s) URL"),
    ({"url": "http://x", "batch_size": 0}, "reward.batch_size=0 must be a whole number >= 1"),
    ({"url": "http://x", "timeout_s": 0}, "reward.timeout_s=0 must be a finite number of seconds > 0"),
])
def test_bad_settings_are_one_line(settings, expected):
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        HTTPReward(**settings)


@pytest.mark.parametrize("auth_env, expected", [
    ("", r"reward.auth_env='' is empty \(a shell variable that is not set\?\); give the name of the environment "
         r"variable holding the token, or leave reward.auth_env out \(no token\)\.$"),
    (7, r"reward.auth_env=7 must name the environment variable that holds the token"),
    ("sk-live-4f9a", r"reward.auth_env must name the environment variable that holds the token \(e.g. "
                     r"reward.auth_env=MY_TOKEN\), not the token itself; .* \(not shown here\)\.$"),
])
def test_an_auth_env_that_names_no_variable_is_one_line_that_never_shows_a_token(auth_env, expected):
    """auth_env= (an unset shell variable) sent no token without a word; auth_env=$TOKEN (the token in the variable
    name's place) printed the token in the error line."""
    with pytest.raises(ConfigError, match=f"^{expected}") as caught:
        HTTPReward("http://127.0.0.1:9", auth_env=auth_env)
    assert "4f9a" not in str(caught.value)


def test_every_client_and_the_reward_server_check_their_token_variable_alike(monkeypatch):
    from omegaconf import OmegaConf

    from lit_rlhf.cli.serve import check_serve_settings
    from lit_rlhf.rewards.judge_model import JudgeModel

    monkeypatch.delenv("NO_SUCH_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"^reward.api_key_env='' is empty"):
        JudgeModel("m", base_url="http://127.0.0.1:9/v1", api_key_env="")
    with pytest.raises(ConfigError, match=r"^reward.api_key_env='NO_SUCH_TOKEN' names an environment variable that "
                                          r"is not set; export NO_SUCH_TOKEN=<the endpoint's key> before the run\.$"):
        JudgeModel("m", base_url="http://127.0.0.1:9/v1", api_key_env="NO_SUCH_TOKEN")
    cfg = OmegaConf.create({"host": "127.0.0.1", "port": 0, "max_batch_size": 8, "max_wait_ms": 5.0,
                            "max_body_mb": 8, "auth_env": "", "allow_unauthenticated": False})
    with pytest.raises(ConfigError, match=r"^auth_env='' is empty"):  # it served without a token
        check_serve_settings(cfg)
    cfg.auth_env = "NO_SUCH_TOKEN"
    with pytest.raises(ConfigError, match=r"^auth_env='NO_SUCH_TOKEN' names an environment variable that is not "
                                          r"set; export NO_SUCH_TOKEN=<a token> \(clients send it with "
                                          r"reward.auth_env\)\.$"):
        check_serve_settings(cfg)
