"""LLMJudge: a strict parser of judgements, an OpenAI-compatible endpoint on loopback, a tiny local model."""

import json

import pytest

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.errors import ConfigError
from lit_rlhf.remote import RewardServiceError
from lit_rlhf.rewards import LLMJudge, parse_judgement
from tests.apps import run_app
from tests.helpers import FAST
from tests.remote.fake_server import (
    FakeRewardServer,
    chat_reply,
    judged_completion,
    length_biased_judge,
    longer_wins_judge,
)


@pytest.mark.parametrize("text, expected", [
    ("7", 7.0), ("Score: 8", 8.0), ("score=3", 3.0), ("7/10", 7.0), (" 3.5 ", 3.5), ("\n\n9\nbecause it is", 9.0),
    ("10.", 10.0), ("0", 0.0),
    ("11", None), ("-1", None), ("I think 7", None), ("", None), ("seven", None), ("7 or 8", None), ("Score:", None),
])
def test_the_parser_takes_a_number_in_range_on_the_first_line_and_nothing_else(text, expected):
    assert parse_judgement(text, 0, 10) == expected


def test_an_endpoint_judge_scores_each_completion_and_counts_what_it_cannot_parse():
    def judge(number, body):
        completion = judged_completion(body)
        return 200, chat_reply("no idea" if completion == "???" else f"Score: {len(completion)}")

    with FakeRewardServer(judge) as endpoint:
        reward = LLMJudge(model="judge-1", base_url=endpoint.url + "/v1", unparsable_score=-1.0, retries=0)
        scores = reward(["p1", "p2", "p3"], ["abc", "???", "abcdefg"])
    assert scores.tolist() == [3.0, -1.0, 7.0]
    assert reward.pop_stats() == {"unparsable": 1.0} and reward.pop_stats() == {"unparsable": 0.0}
    (request,) = [r for r in endpoint.requests if "Prompt: p1\n" in r["messages"][0]["content"]]
    assert request["model"] == "judge-1" and request["temperature"] == 0.0
    assert "Prompt: p1\nResponse: abc\n\nScore:" in request["messages"][0]["content"]
    assert reward.waits  # an endpoint is scored while the step's forwards run


def test_an_endpoint_that_is_down_is_one_line_naming_it():
    endpoint = FakeRewardServer()
    endpoint.stop()
    with pytest.raises(RewardServiceError) as caught:
        LLMJudge(model="judge-1", base_url=endpoint.url + "/v1", retries=0)(["p"], ["c"])
    assert str(caught.value).startswith(f"the judge endpoint {endpoint.url}/v1: APIConnectionError after 1 attempt;")


def test_a_local_judge_scores_what_its_judgements_state():
    reward = LLMJudge(model=TINY_PYTHIA, max_tokens=4, batch_size=2)
    prompts, completions = ["The film was", "I thought it", "Overall"], ["great", "was bad", "fine"]
    scores = reward(prompts, completions)
    judgements = reward.judgements([reward.template.format(prompt=p, completion=c, min_score="0",
                                                                max_score="10")
                                         for p, c in zip(prompts, completions, strict=True)])
    parsed = [parse_judgement(j, 0, 10) for j in judgements]
    assert scores.tolist() == [0.0 if s is None else s for s in parsed]
    assert reward.pop_stats() == {"unparsable": float(sum(s is None for s in parsed))}


def test_a_local_judge_folder_without_a_causal_lms_output_layer_is_one_line(tmp_path):
    """A reward model's folder as the judge: its output layer started at random, and it judged with noise."""
    from transformers import AutoModelForSequenceClassification

    from lit_rlhf.models import load_tokenizer

    AutoModelForSequenceClassification.from_pretrained(TINY_PYTHIA, num_labels=1).save_pretrained(tmp_path / "rm")
    load_tokenizer(TINY_PYTHIA).save_pretrained(tmp_path / "rm")  # as train_reward_model.py saves it
    # the output layer's name: lm_head in the newer transformers releases, embed_out in the older
    with pytest.raises(ConfigError, match=r"^reward.model='.*rm' has no weights for '(lm_head|embed_out).weight' "
                                          r"\(of 1 missing\), "
                                          r"which would start at random \(its config.json names "
                                          r"GPTNeoXForSequenceClassification, not a causal LM\)"):
        LLMJudge(model=str(tmp_path / "rm"), max_tokens=4)(["The film was"], ["great"])


@pytest.mark.parametrize("settings, expected", [
    ({"template": "Rate {completion}"}, "reward.template has no {prompt}"),
    ({"min_score": 5, "max_score": 5}, "reward.min_score=5 must be below reward.max_score=5"),
    ({"base_url": "localhost:8000/v1"}, "reward.base_url='localhost:8000/v1' is not an http(s) URL"),
    ({"template": "{prompt} {completion} {rubric}"}, "reward.template names {rubric}, which the judge does not fill"),
    ({"template": '{prompt} {completion} Answer as {"score": n}'}, 'reward.template names {"score"}, which the '
                                                                     "judge does not fill"),
    ({"template": "{prompt} {completion} {"}, "reward.template cannot be formatted"),
    ({"unparsable_score": float("nan")}, "reward.unparsable_score=nan must be a finite number"),
    ({"max_tokens": 0}, "reward.max_tokens=0 must be a whole number >= 1"),
    ({"timeout_s": float("inf")}, "reward.timeout_s=inf must be a finite number of seconds > 0"),
])
def test_bad_judge_settings_are_one_line(settings, expected):
    with pytest.raises(ConfigError) as caught:
        LLMJudge(model="m", **settings)
    assert str(caught.value).startswith(expected)


@pytest.mark.integration
def test_train_py_with_an_endpoint_judge_logs_its_scores_and_unparsable_count(tmp_path):
    with FakeRewardServer(length_biased_judge) as endpoint:
        result = run_app("train.py", *FAST, "reward=llm_judge", "reward.model=judge-1",
                         f"reward.base_url={endpoint.url}/v1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = (tmp_path / "logs" / "train" / "runs").iterdir()
    metrics = json.loads((run / "result.json").read_text())["metrics"]
    assert metrics["rewards/llm_judge/unparsable"] == 0.0
    assert 0.0 <= metrics["rewards/llm_judge/mean"] <= 10.0 and len(endpoint.requests) >= 16


@pytest.mark.parametrize("text, expected", [
    ("A", "a"), ("b", "b"), ("Tie", "tie"), ("Winner: B", "b"), ("Response A.", "a"), ("\nA\nbecause", "a"),
    ("A or B", None), ("both", None), ("", None), ("AB", None),
])
def test_the_pairwise_parser_takes_a_b_or_tie_on_the_first_line(text, expected):
    from lit_rlhf.rewards import parse_verdict

    assert parse_verdict(text) == expected


def test_a_pairwise_judge_alternates_positions_so_a_position_bias_cancels():
    from lit_rlhf.rewards import LLMPairwiseJudge

    prompts, policy, reference = ["p"] * 4, ["long answer", "x", "same", "long answer"], ["x", "long answer", "same",
                                                                                         "y"]
    with FakeRewardServer(longer_wins_judge) as endpoint:
        judge = LLMPairwiseJudge(model="judge-1", base_url=endpoint.url + "/v1", retries=0)
        assert judge(prompts, policy, reference).tolist() == [1.0, 0.0, 0.5, 1.0]
    with FakeRewardServer(lambda n, body: (200, chat_reply("A"))) as endpoint:  # always the first position
        judge = LLMPairwiseJudge(model="judge-1", base_url=endpoint.url + "/v1", retries=0)
        assert judge(prompts, policy, reference).tolist() == [1.0, 0.0, 1.0, 0.0]
    with FakeRewardServer(lambda n, body: (200, chat_reply("Both are fine"))) as endpoint:
        judge = LLMPairwiseJudge(model="judge-1", base_url=endpoint.url + "/v1", retries=0)
        assert judge(prompts, policy, reference).tolist() == [0.5] * 4 and judge.unparsable == 4


def test_without_the_openai_client_an_endpoint_judge_says_how_to_install_it(monkeypatch):
    import sys

    from lit_rlhf.errors import UnavailableError

    monkeypatch.setitem(sys.modules, "openai", None)  # import openai raises ImportError
    with pytest.raises(UnavailableError, match=r'reward.base_url needs the openai client, which is not installed; '
                                               r'pip install -e "\.\[judge\]"'):
        LLMJudge(model="m", base_url="http://127.0.0.1:9/v1").load()


def test_an_endpoint_reply_without_a_message_is_one_line_naming_the_endpoint():
    reply = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                        "choices": [{"index": 0, "finish_reason": "stop"}]})
    with FakeRewardServer(lambda number, body: (200, reply)) as endpoint:
        with pytest.raises(RewardServiceError, match=f"the judge endpoint {endpoint.url}/v1 answered without a "
                                                     f"message"):
            LLMJudge(model="judge-1", base_url=endpoint.url + "/v1", retries=0)(["p"], ["c"])


def test_a_judge_whose_answers_are_mostly_unparsable_warns_once():
    with FakeRewardServer(lambda number, body: (200, chat_reply("I cannot rate this"))) as endpoint:
        reward = LLMJudge(model="judge-1", base_url=endpoint.url + "/v1", retries=0)
        with pytest.warns(UserWarning, match=r"stated no score in \[0, 10\] for 3 of 3 completions"):
            reward(["p"] * 3, ["a", "b", "c"])
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            reward(["p"] * 3, ["a", "b", "c"])  # said once
    assert reward.pop_stats() == {"unparsable": 6.0}
