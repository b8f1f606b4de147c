"""teacher=served: a teacher behind an OpenAI-compatible server gives the logprobs a loaded teacher of the same
weights gives; it is checked before training (up, serving the model, the student's tokenizer); a wrong answer is one
line naming the server and the batch; the token comes from the environment."""

import functools
import json

import lightning as L
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lit_rlhf import DistillationModule
from lit_rlhf.errors import ConfigError
from lit_rlhf.rewards import VaderSentiment
from lit_rlhf.teachers.causal_lm import CausalLMTeacher
from lit_rlhf.teachers.served import ServedTeacher, TeacherServiceError
from tests.conftest import LORA, TINY_PYTHIA, make_datamodule
from tests.remote.fake_teacher import FakeTeacherServer


@pytest.fixture(scope="module")
def tiny():
    return AutoModelForCausalLM.from_pretrained(TINY_PYTHIA).eval(), AutoTokenizer.from_pretrained(TINY_PYTHIA)


def padded_batch(tokenizer):
    """Left-padded queries, right-padded responses, one response empty (nothing to score)."""
    ids = tokenizer("The film was good and the actors were great", add_special_tokens=False)["input_ids"]
    assert len(ids) >= 9
    queries = torch.tensor([[0, 0, *ids[0:2]], [0, *ids[2:5]], ids[5:9]])
    query_mask = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]])
    responses = torch.tensor([[*ids[2:5], 0, 0], ids[4:9], [0, 0, 0, 0, 0]])
    response_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]).bool()
    return queries, query_mask, responses, response_mask


def test_served_logprobs_equal_a_loaded_teacher_of_the_same_weights(tiny):
    model, tokenizer = tiny
    batch = padded_batch(tokenizer)
    loaded = CausalLMTeacher(TINY_PYTHIA)
    loaded.load(tokenizer)
    with FakeTeacherServer(model, tokenizer) as server:
        teacher = ServedTeacher(server.url + "/v1", batch_size=2, max_concurrency=2)
        teacher.load(tokenizer)
        served = teacher.logprobs(*batch, temperature=1.0)
    expected = loaded.logprobs(*batch, temperature=1.0)
    assert served.shape == expected.shape == (3, 5)
    torch.testing.assert_close(served, expected, atol=1e-4, rtol=0)
    assert served[2].eq(0).all() and served[0, 3:].eq(0).all() and served[0, :3].lt(0).all()
    completions = [body for method, path, body in server.requests if path == "/v1/completions"]
    assert [len(body["prompt"]) for body in completions] == [2]  # the empty response is not sent
    assert completions[0]["prompt"][0] == [*batch[0][0, 2:].tolist(), *batch[2][0, :3].tolist()]  # no padding
    assert all(body["max_tokens"] == 0 and body["echo"] is True and body["model"] == "teacher" for body in completions)


@pytest.mark.integration
def test_a_served_teacher_equal_to_the_student_gives_a_reverse_kl_of_zero_in_training(tiny, monkeypatch):
    model, tokenizer = tiny
    monkeypatch.setenv("TEACHER_TOKEN", "s3cret")
    with FakeTeacherServer(model, tokenizer) as server:
        module = DistillationModule(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, reward=VaderSentiment(),
                                    teacher=ServedTeacher(server.url, auth_env="TEACHER_TOKEN"),
                                    optimizer=functools.partial(torch.optim.AdamW, lr=1e-2), samples_per_prompt=2,
                                    response_length=8, temperature=1.0)  # a served teacher's logprobs are at 1
        trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
        trainer.fit(module, make_datamodule())
    assert abs(trainer.callback_metrics["distill/reverse_kl"].item()) < 1e-4
    assert trainer.callback_metrics["distill/teacher_logprob_mean"].item() < -0.5  # real logprobs, not zeros
    assert {h["Authorization"] for h in server.headers} == {"Bearer s3cret"}
    assert "s3cret" not in json.dumps([body for _, _, body in server.requests])


def reply(body: dict) -> tuple[int, str]:
    return 200, json.dumps(body)


@pytest.mark.parametrize("answer, expected", [
    ({"choices": [{"index": 0, "text": ""}]}, r"answered sequence 0 without logprobs \(choices\[\]\.logprobs"),
    ({"choices": [{"index": 0, "logprobs": {"token_logprobs": [None, -1.0]}}]},
     r"answered 2 logprobs for the 4 tokens of sequence 0"),
    ({"choices": [{"index": 0, "logprobs": {"token_logprobs": [None, -1.0, float("nan"), -1.0]}}]},
     r"answered nan as a logprob in sequence 0; every logprob of a sampled token must be a finite number <= 0"),
    ({"choices": [{"index": 0, "logprobs": {"token_logprobs": [None, -1.0, 2.5, -1.0]}}]}, r"answered 2\.5 as"),
    ({"choices": []}, r"answered 0 choices for 1 sequences"),
    ({"detail": "\x1b[31mno"}, r"answered no choices for 1 sequences"),
])
def test_an_answer_without_the_logprobs_of_every_token_is_one_line_naming_the_server_and_the_batch(tiny, answer,
                                                                                                   expected):
    _, tokenizer = tiny
    routes = {("POST", "/v1/completions"): lambda body: reply(answer)}
    with FakeTeacherServer(tokenizer=tokenizer, routes=routes) as server:
        teacher = ServedTeacher(server.url, retries=0)
        teacher.load(tokenizer)
        with pytest.raises(TeacherServiceError) as caught:
            teacher.logprobs(torch.tensor([[5, 6]]), torch.ones(1, 2), torch.tensor([[7, 8]]),
                             torch.ones(1, 2, dtype=torch.bool), temperature=1.0)
    message = str(caught.value)
    assert message.startswith(f"the teacher server {server.url} (batch 1 of 1, sequences 0-0) answered ")
    assert "\n" not in message and "\x1b" not in message
    import re

    assert re.search(expected, message), message


def test_before_training_the_server_must_serve_the_model_with_the_students_tokenizer(tiny):
    _, tokenizer = tiny
    other = lambda body: reply({"tokens": tokenizer(body["prompt"], add_special_tokens=False)["input_ids"][1:]})  # noqa: E731
    with FakeTeacherServer(tokenizer=tokenizer, routes={("POST", "/tokenize"): other}) as server:
        with pytest.raises(ConfigError, match=r"serves 'teacher' with another tokenizer than the student's \(a probe "
                                              r"text is \d+ tokens there and \d+ here, first different at token 0\)"):
            ServedTeacher(server.url).load(tokenizer)
        with pytest.raises(ConfigError, match=r"teacher.model='big' is not served by .* \(it serves \['teacher'\]\); "
                                              r"set teacher.model to one of them"):
            ServedTeacher(server.url, model="big").load(tokenizer)
    with FakeTeacherServer(tokenizer=tokenizer, routes={("POST", "/tokenize"): lambda b: (404, "{}")}) as server:
        with pytest.warns(UserWarning, match="has no /tokenize, so its tokenizer is not checked"):
            ServedTeacher(server.url).load(tokenizer)
    down = FakeTeacherServer(tokenizer=tokenizer)
    down.stop()
    with pytest.raises(TeacherServiceError, match=r"cannot connect \(ConnectError\) after 2 attempts; check that the "
                                                  r"server is up \(http://127\.0\.0\.1:\d+/v1/models\)"):
        ServedTeacher(down.url, retries=1, backoff_s=0.01).load(tokenizer)


def test_a_sampling_temperature_other_than_one_and_bad_settings_are_refused_in_one_line(tiny):
    _, tokenizer = tiny
    with FakeTeacherServer(tokenizer=tokenizer) as server:
        teacher = ServedTeacher(server.url)
        teacher.load(tokenizer)
        with pytest.raises(ConfigError, match=r"teacher=served gives logprobs at temperature 1 .* and "
                                              r"algo.temperature=0.7; sample at algo.temperature=1"):
            teacher.logprobs(torch.ones(1, 1, dtype=torch.long), torch.ones(1, 1), torch.ones(1, 2, dtype=torch.long),
                             torch.ones(1, 2, dtype=torch.bool), temperature=0.7)
    with pytest.raises(ConfigError, match=r"teacher.url='127.0.0.1:8000' is not an http\(s\) URL; give the server's "
                                          r"address, e.g. teacher.url=http://127.0.0.1:8000 \(vllm serve"):
        ServedTeacher("127.0.0.1:8000")
    with pytest.raises(ConfigError, match=r"teacher.auth_env='NO_SUCH_TOKEN' names an environment variable that is "
                                          r"not set"):
        ServedTeacher("http://127.0.0.1:9", auth_env="NO_SUCH_TOKEN")
    with pytest.raises(ConfigError, match=r"teacher.timeout_s=nan must be a finite number of seconds > 0"):
        ServedTeacher("http://127.0.0.1:9", timeout_s=float("nan"))


def test_served_top_logprobs_are_the_teachers_most_likely_tokens_and_the_sampled_one(tiny):
    model, tokenizer = tiny
    queries, query_mask, responses, response_mask = padded_batch(tokenizer)
    with FakeTeacherServer(model, tokenizer) as server:
        teacher = ServedTeacher(server.url, top_logprobs=3)
        teacher.load(tokenizer)
        logprobs, top_ids, top_logprobs = teacher.scores(queries, query_mask, responses, response_mask, 1.0)
    [body] = [body for _, path, body in server.requests if path == "/v1/completions"]
    assert body["logprobs"] == 3 and body["return_tokens_as_token_ids"] is True
    assert top_ids.shape == top_logprobs.shape == (3, 5, 4)  # K + 1 entries: the sampled token may be a 4th
    for i, j in response_mask.nonzero().tolist():
        ids = torch.cat([queries[i][query_mask[i].bool()], responses[i, :j]])  # what precedes token j
        with torch.no_grad():
            expected = model(ids[None]).logits[0, -1].float().log_softmax(-1)  # V
        valid = top_logprobs[i, j].isfinite()
        assert set(top_ids[i, j][valid].tolist()) == {*expected.topk(3).indices.tolist(), int(responses[i, j])}
        torch.testing.assert_close(top_logprobs[i, j][valid], expected[top_ids[i, j][valid]], atol=1e-4, rtol=0)
        assert logprobs[i, j] == pytest.approx(expected[responses[i, j]].item(), abs=1e-4)
    off = ~response_mask
    assert top_logprobs[off].isinf().all() and top_ids[off].eq(0).all()  # padding off the model's tokens


@pytest.mark.integration
def test_a_served_top_k_teacher_equal_to_the_student_gives_no_divergence_in_training(tiny):
    model, tokenizer = tiny
    with FakeTeacherServer(model, tokenizer) as server:
        module = DistillationModule(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, reward=VaderSentiment(),
                                    teacher=ServedTeacher(server.url, top_logprobs=4), divergence="generalized_jsd",
                                    optimizer=functools.partial(torch.optim.AdamW, lr=1e-2), samples_per_prompt=2,
                                    response_length=6, temperature=1.0)
        trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
        trainer.fit(module, make_datamodule())
    assert abs(trainer.callback_metrics["distill/divergence"].item()) < 1e-5  # LoRA starts at the base weights
    assert trainer.callback_metrics["distill/teacher_logprob_mean"].item() < -0.5  # real logprobs, not zeros


@pytest.mark.parametrize(("entry", "why"), [
    ({"5": -0.1, "6": -0.2}, "a token's text, not its id"), ({"token_id:5": -0.1}, "fewer than K"),
    ({"token_id:5": 0.5, "token_id:6": -0.2}, "a logprob above 0"),
    ({"token_id:99999999": -0.1, "token_id:6": -0.2}, "outside the vocabulary")])
def test_top_logprobs_that_are_not_ids_with_logprobs_are_one_line(tiny, entry, why):
    model, tokenizer = tiny
    queries, query_mask, responses, response_mask = padded_batch(tokenizer)

    def completions(body):
        prompts = body["prompt"]
        choices = [{"index": i, "logprobs": {"token_logprobs": [None] + [-1.0] * (len(ids) - 1),
                                             "top_logprobs": [None] + [entry] * (len(ids) - 1)}}
                   for i, ids in enumerate(prompts)]
        return 200, json.dumps({"choices": choices})

    with FakeTeacherServer(model, tokenizer, routes={("POST", "/v1/completions"): completions}) as server:
        teacher = ServedTeacher(server.url, top_logprobs=2, retries=0)
        teacher.load(tokenizer)
        with pytest.raises(TeacherServiceError, match=r"as the top logprobs of a token of sequence 0; with "
                                                      r"teacher.top_logprobs=2 each is 2 or 3 entries") as raised:
            teacher.scores(queries, query_mask, responses, response_mask, 1.0)
    assert "\n" not in str(raised.value), why
