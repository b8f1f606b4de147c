import pytest
import torch

from lit_rlhf.rewards import HTTPReward, SequenceClassifierReward, VaderSentiment, WeightedSum


def test_vader_scores_positive_above_negative():
    scores = VaderSentiment()(["", ""], ["I loved this wonderful film.", "It was a terrible, boring mess."])
    assert scores.shape == (2,) and scores[0] > 0.5 and scores[1] < -0.5


def test_weighted_sum_and_plain_functions():
    def length(prompts, completions):
        return torch.tensor([float(len(c)) for c in completions])

    total = WeightedSum([length, VaderSentiment()], [0.5, 2.0])(["", ""], ["ab", "good"])
    vader = VaderSentiment()(["", ""], ["ab", "good"])
    torch.testing.assert_close(total, 0.5 * torch.tensor([2.0, 4.0]) + 2.0 * vader)
    with pytest.raises(ValueError, match="one weight per reward"):
        WeightedSum([length], [1.0, 2.0])


def test_a_reward_that_returns_none_for_a_completion_is_left_out_of_its_sum_as_trl_leaves_it():
    """TRL's multi-task convention: a reward function returns None for a completion it does not apply to; the total
    is the weighted sum of the rewards that did apply (TRL's nansum), 0 where none did."""
    def math_only(completions, **kwargs):
        return [1.0, None, None, 3.0]

    def code_only(completions, **kwargs):
        return [None, 2.0, None, 4.0]

    total = WeightedSum({"math": math_only, "code": code_only}, {"math": 2.0, "code": 0.5})(["p"] * 4, ["c"] * 4)
    assert total.tolist() == [2.0 * 1.0, 0.5 * 2.0, 0.0, 2.0 * 3.0 + 0.5 * 4.0]


def test_a_none_score_is_nan_where_the_caller_allows_it_and_a_one_line_error_elsewhere():
    from lit_rlhf.errors import ConfigError
    from lit_rlhf.rollout.scoring import checked_scores

    scores = checked_scores("r", [0.5, None], ["p", "q"], ["a", "b"], allow_none=True)
    assert scores[0] == 0.5 and scores[1].isnan()
    with pytest.raises(ConfigError, match="the reward r returned list that is not numbers"):
        checked_scores("r", [0.5, None], ["p", "q"], ["a", "b"])  # the gold reward, a reward server's
    with pytest.raises(ConfigError, match="the reward r returned nan for 1 of 2 completions"):
        checked_scores("r", [float("nan"), None], ["p", "q"], ["a", "b"], allow_none=True)  # NaN is no None


def test_sequence_classifier_reward_loads_lazily_and_scores_prompt_plus_completion(tmp_path, tiny_path):
    from transformers import AutoTokenizer, GPTNeoXConfig, GPTNeoXForSequenceClassification

    from lit_rlhf.rewards import SequenceClassifierReward

    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    config = GPTNeoXConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, num_labels=1, pad_token_id=1)
    torch.manual_seed(0)
    model = GPTNeoXForSequenceClassification(config).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    reward = SequenceClassifierReward(str(tmp_path), batch_size=2)
    assert reward.model is None
    scores = reward(["The movie", "The plot", "It"], [" was great.", " was bad and long.", " is fine"])
    assert scores.shape == (3,)
    with torch.no_grad():
        alone = model(**tokenizer("The plot was bad and long.", return_tensors="pt")).logits[0, 0]
    assert scores[1].item() == pytest.approx(alone.item(), abs=1e-5)  # padding in the batch changes nothing

    # a completion that ended with the stop token is scored with EOS after it, as the reward model was trained
    ended = reward(["The movie", "The plot", "It"], [" was great.", " was bad and long.", " is fine"],
                   stopped=[False, True, False])
    ids = tokenizer("The plot was bad and long." + tokenizer.eos_token, return_tensors="pt")
    assert ids["input_ids"][0, -1] == tokenizer.eos_token_id
    with torch.no_grad():
        with_eos = model(**ids).logits[0, 0]
    assert ended[1].item() == pytest.approx(with_eos.item(), abs=1e-5) and abs(with_eos - alone) > 1e-4
    assert torch.equal(ended[[0, 2]], scores[[0, 2]])


def broken_reward_folder(path, how: str):
    """A reward model folder (tests.helpers.save_reward_model) with its weights cut short, its head of another
    size than the config says, or a config that needs the model's own code."""
    import json
    import shutil
    from pathlib import Path

    from lit_rlhf.assets import TINY_PYTHIA
    from tests.helpers import save_reward_model

    save_reward_model(path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(TINY_PYTHIA) / name, path / name)
    if how == "truncated":
        data = (path / "model.safetensors").read_bytes()
        (path / "model.safetensors").write_bytes(data[: len(data) // 2])
        return
    config = json.loads((path / "config.json").read_text())
    if how == "head":
        config.update(num_labels=3, id2label={str(i): f"LABEL_{i}" for i in range(3)},
                      label2id={f"LABEL_{i}": i for i in range(3)})
    else:
        config["model_type"] = "evil_gpt"  # no architecture transformers ships: only the folder's code could load it
        config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_evil.EvilModel",
                              "AutoConfig": "configuration_evil.EvilConfig"}
        (path / "modeling_evil.py").write_text(f"open({str(path / 'PWNED')!r}, 'w').close()\n")
        (path / "configuration_evil.py").write_text(f"open({str(path / 'PWNED')!r}, 'w').close()\n")
    (path / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("how, expected", [
    ("truncated", "holds a safetensors file that cannot be read"),
    ("head", "its weights do not fit its config"),
    ("remote_code", "needs to run its own Python code"),
])
def test_a_broken_or_code_bearing_reward_folder_is_one_line(how, expected, tmp_path):
    from lit_rlhf.errors import ConfigError
    from lit_rlhf.rewards import SequenceClassifierReward

    folder = tmp_path / "rm"
    broken_reward_folder(folder, how)
    with pytest.raises(ConfigError, match=expected):
        SequenceClassifierReward(str(folder)).load()
    assert not (folder / "PWNED").exists()


def trl_length(completions, **kwargs):
    """TRL's GRPO quickstart reward, as written for TRL: completions by name, the rest in kwargs."""
    return [-abs(20 - len(completion)) for completion in completions]


def trl_answer(completions, answer, prompts=None):
    return [float(a in c) for c, a in zip(completions, answer, strict=True)]


def plain(prompts, completions, answer):
    return [float(a in c) + 0.5 * (p == "q") for p, c, a in zip(prompts, completions, answer, strict=True)]


def own_names(texts, outputs):  # positional: (prompts, completions) whatever their names
    return [float(len(o) > len(t)) for t, o in zip(texts, outputs, strict=True)]


def test_a_reward_naming_completions_is_called_by_keyword_as_trl_calls_it_and_others_by_position():
    from lit_rlhf.rewards.protocol import call_reward, missing_columns

    prompts, completions, columns = ["q", "qq"], ["a 4", "b"], {"answer": ["4", "5"], "level": [1, 2]}
    assert call_reward(trl_length, prompts, completions, columns) == [-17, -19]
    assert call_reward(trl_answer, prompts, completions, columns) == [1.0, 0.0]
    assert call_reward(plain, prompts, completions, columns) == [1.5, 0.0]
    assert call_reward(own_names, prompts, completions, columns) == [1.0, 0.0]
    assert missing_columns(trl_answer, {"level": [1, 2]}) == ["answer"]  # after completions, by name
    assert missing_columns(trl_length, {}) == [] and missing_columns(plain, {}) == ["answer"]


def trl_token_length(completion_ids, **kwargs):
    """A TRL reward on token ids alone: no `completions` in its signature."""
    return [-abs(3 - len(ids)) for ids in completion_ids]


def trl_with_state(completions, trainer_state, **kwargs):
    return [1.0] * len(completions)


def test_a_reward_naming_completion_ids_is_called_by_keyword_with_them_and_trainer_state_is_one_line():
    from lit_rlhf.errors import ConfigError
    from lit_rlhf.rewards.protocol import call_reward
    from lit_rlhf.rollout.scoring import call_checked, reads_column

    columns = {"completion_ids": [[5, 6, 0], [7]], "stopped": [True, False]}
    assert call_reward(trl_token_length, ["q", "r"], ["a b", "c"], columns) == [0, -2]
    assert reads_column(trl_token_length, "completion_ids") and reads_column(trl_length, "completion_ids")
    assert not reads_column(plain, "completion_ids") and not reads_column(VaderSentiment(), "completion_ids")
    with pytest.raises(ConfigError) as err:
        call_checked("trl_with_state", trl_with_state, ["q"], ["a"], {})
    assert str(err.value) == ("the reward trl_with_state reads trainer_state, TRL's TrainerState, which is not passed "
                              "here; give it a default (trainer_state=None) or remove it.")


def test_on_chat_message_prompts_a_reward_with_trls_signature_gets_trls_format_and_others_the_texts():
    import functools

    from lit_rlhf.rewards.protocol import call_reward

    messages = [[{"role": "user", "content": "2+2?"}]]
    seen = {}

    def trl_style(prompts, completions, **kwargs):
        seen["trl"] = prompts, completions
        return [1.0]

    def texts_only(prompts, completions, answer):
        seen["texts"] = prompts, completions
        return [1.0]

    columns = {"answer": ["4"]}
    for reward in (trl_style, functools.partial(trl_style), texts_only):
        call_reward(reward, ["user: 2+2?\n"], [" 4"], columns, prompt_messages=messages)
    assert seen["trl"] == (messages, [[{"role": "assistant", "content": " 4"}]])
    assert seen["texts"] == (["user: 2+2?\n"], [" 4"])
    seen.clear()  # the library's rewards (a WeightedSum, which takes **columns) read texts
    call_reward(WeightedSum({"texts": texts_only}), ["user: 2+2?\n"], [" 4"], columns, prompt_messages=messages)
    assert seen == {"texts": (["user: 2+2?\n"], [" 4"])}


@pytest.mark.parametrize("make, key", [
    (lambda value: VaderSentiment(include_prompt=value), "vader.include_prompt"),
    (lambda value: WeightedSum([VaderSentiment()], concurrent=value), "reward.concurrent"),
    (lambda value: HTTPReward("http://127.0.0.1:1", overlap=value), "reward.overlap"),
    (lambda value: SequenceClassifierReward("a-model", normalize=value), "reward.normalize"),
])
def test_a_reward_s_true_or_false_setting_that_is_no_bool_is_one_line(make, key):
    """reward.concurrent=x (the reward configs are untyped) and include_prompt="false" from Python read as true."""
    from lit_rlhf.errors import ConfigError

    make(False)
    with pytest.raises(ConfigError, match=rf"^{key}='x' must be true or false.$"):
        make("x")


@pytest.mark.parametrize("settings, line", [
    ({"batch_size": 0}, "reward.batch_size=0 must be a whole number >= 1."),
    ({"max_length": 0}, "reward.max_length=0 must be a whole number >= 1."),
    ({"label_index": 0.5}, "reward.label_index=0.5 must be a whole number."),
])
def test_a_reward_model_setting_that_cannot_score_is_one_line_when_built(settings, line):
    """batch_size=0 stopped the first RL step with range()'s ValueError, after the models had loaded."""
    from lit_rlhf.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        SequenceClassifierReward("a-model", **settings)
    assert str(err.value) == line


def test_a_label_index_the_head_does_not_have_is_one_line_when_it_loads(tmp_path, tiny_path):
    from transformers import AutoTokenizer, GPTNeoXConfig, GPTNeoXForSequenceClassification

    from lit_rlhf.errors import ConfigError

    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    config = GPTNeoXConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, num_labels=2, pad_token_id=1)
    GPTNeoXForSequenceClassification(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    for index in (-2, 1):
        SequenceClassifierReward(str(tmp_path), label_index=index).load()
    for index in (-3, 2):
        with pytest.raises(ConfigError, match=rf"^reward.label_index={index} is not a logit of '.*', whose head has 2 "
                                              r"\(num_labels\): set reward.label_index from 0 to 1.$"):
            SequenceClassifierReward(str(tmp_path), label_index=index).load()
