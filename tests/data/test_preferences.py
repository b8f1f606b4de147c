"""Preference pairs: the file formats, the checks (one line each), chat messages, and truncation that keeps the
prompt/response boundary."""

import json
import re

import pytest

from lit_rlhf.data.completion_datamodule import CompletionDataModule
from lit_rlhf.data.preference_datamodule import PreferenceDataModule
from lit_rlhf.data.preferences import collate_pairs, load_preference_pairs, tokenize_pair_side
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.tokenizer import load_tokenizer
from tests.conftest import TINY_PYTHIA

ROWS = [{"prompt": f"Q{i}:", "chosen": f" yes {i}", "rejected": f" no {i}", "strength": float(i)} for i in range(6)]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(TINY_PYTHIA)


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet"])
def test_pairs_load_from_jsonl_csv_and_parquet_with_a_margin_column(tmp_path, tokenizer, suffix):
    import datasets

    path = tmp_path / f"pairs.{suffix}"
    if suffix == "jsonl":
        write_jsonl(path, ROWS)
    else:
        getattr(datasets.Dataset.from_list(ROWS), f"to_{suffix}")(str(path))
    pairs, identical = load_preference_pairs(str(path), tokenizer, margin_column="strength")
    assert identical == 0
    eos = tokenizer.eos_token  # appended to plain-text responses, as TRL does
    assert [(p.prompt, p.chosen, p.rejected, p.margin) for p in pairs] == \
        [(r["prompt"], r["chosen"] + eos, r["rejected"] + eos, r["strength"]) for r in ROWS]


@pytest.mark.parametrize("rows, expected", [
    ([{"prompt": "Q", "chosen": " a"}], "row 1: no 'rejected' column (it has ['chosen', 'prompt'])"),
    ([{"prompt": "Q", "chosen": " a", "rejected": " a"}] * 3, "chosen equals rejected on every one of its 3 rows"),
    ([{"prompt": "Q", "chosen": " a", "rejected": " b"}, {"prompt": "Q", "chosen": "  ", "rejected": " b"}],
     "row 2: 'chosen' is empty"),
    ([{"prompt": "Q", "chosen": 3, "rejected": " b"}], "row 1 'chosen' is int, not text or chat messages"),
    ([{"prompt": "Q", "chosen": [], "rejected": " b"}], "row 1 'chosen' is list, not text or chat messages"),
    ([{"prompt": [{"role": "user", "content": None}], "chosen": " a", "rejected": " b"}],
     "row 1 'prompt' is list, not text or chat messages"),
])
def test_bad_rows_are_one_line_errors_naming_the_row(tmp_path, tokenizer, rows, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)) as err:
        load_preference_pairs(write_jsonl(tmp_path / "p.jsonl", rows), tokenizer)
    assert "\n" not in str(err.value)


def test_plain_text_responses_end_with_one_eos_as_trl_builds_them(tmp_path, tokenizer):
    eos = tokenizer.eos_token
    rows = [{"prompt": "Q:", "chosen": " yes", "rejected": " no" + eos}]  # one ends with EOS already
    (pair,), _ = load_preference_pairs(write_jsonl(tmp_path / "pairs.jsonl", rows), tokenizer)
    assert (pair.chosen, pair.rejected) == (" yes" + eos, " no" + eos)
    for response in (pair.chosen, pair.rejected):
        ids, start = tokenize_pair_side(tokenizer, pair.prompt, response, max_length=64, max_prompt_length=32)
        assert ids[-1] == tokenizer.eos_token_id and ids[-2] != tokenizer.eos_token_id


def test_rows_whose_chosen_equals_rejected_are_left_out_and_counted(tmp_path, tokenizer):
    rows = [*ROWS[:3], {"prompt": "Q", "chosen": " same", "rejected": " same"}]
    pairs, identical = load_preference_pairs(write_jsonl(tmp_path / "p.jsonl", rows), tokenizer)
    assert len(pairs) == 3 and identical == 1


def test_chat_messages_are_rendered_with_the_chat_template(tmp_path, tokenizer):
    tokenizer.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}" \
                              "{% if add_generation_prompt %}<assistant>{% endif %}"
    try:
        rows = [{"prompt": [{"role": "user", "content": "hi"}], "chosen": [{"role": "assistant", "content": "hello"}],
                 "rejected": [{"role": "assistant", "content": "go away"}]}]
        (pair,), _ = load_preference_pairs(write_jsonl(tmp_path / "p.jsonl", rows), tokenizer)
        assert (pair.prompt, pair.chosen, pair.rejected) == ("<user>hi<assistant>", "<assistant>hello",
                                                             "<assistant>go away")
    finally:
        tokenizer.chat_template = None
    with pytest.raises(ConfigError, match="holds chat messages and the tokenizer has no chat template"):
        load_preference_pairs(str(tmp_path / "p.jsonl"), tokenizer)


def test_conversations_without_a_prompt_have_the_messages_both_sides_begin_with_as_their_prompt(tmp_path, tokenizer):
    """TRL's implicit prompt: the pairs are those of the same rows with the shared messages as an explicit prompt."""
    def user(text):
        return {"role": "user", "content": text}

    def assistant(text):
        return {"role": "assistant", "content": text}

    shared = [[user("hi")], [user("hi"), assistant("hello"), user("and the film?")]]
    explicit = [{"prompt": turns, "chosen": [assistant("good")], "rejected": [assistant("bad"), user("?")]}
                for turns in shared]
    implicit = [{"chosen": row["prompt"] + row["chosen"], "rejected": row["prompt"] + row["rejected"]}
                for row in explicit]
    tokenizer.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}" \
                              "{% if add_generation_prompt %}<assistant>{% endif %}"
    try:
        found, _ = load_preference_pairs(write_jsonl(tmp_path / "implicit.jsonl", implicit), tokenizer)
        expected, _ = load_preference_pairs(write_jsonl(tmp_path / "explicit.jsonl", explicit), tokenizer)
        assert found == expected
        assert found[1].prompt == "<user>hi<assistant>hello<user>and the film?<assistant>"
        nothing_shared = [{"chosen": [user("a"), assistant("b")], "rejected": [user("c"), assistant("d")]}]
        with pytest.raises(ConfigError, match="row 1: no 'prompt' column"):
            load_preference_pairs(write_jsonl(tmp_path / "none.jsonl", nothing_shared), tokenizer)
    finally:
        tokenizer.chat_template = None


def test_truncation_keeps_the_end_of_the_prompt_and_the_start_of_the_response(tokenizer):
    prompt = "one two three four five six seven eight nine ten"
    response = " alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    response_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    ids, prompt_length = tokenize_pair_side(tokenizer, prompt, response, max_length=12, max_prompt_length=4)
    assert len(prompt_ids) > 4 and len(response_ids) > 8
    assert ids == prompt_ids[-4:] + response_ids[:8] and prompt_length == 4


def test_collate_puts_the_chosen_first_then_the_rejected_right_padded():
    batch = collate_pairs([{"chosen": ([1, 2, 3], 1), "rejected": ([1, 4], 1), "margin": 0.5},
                           {"chosen": ([5], 0), "rejected": ([6, 7], 1), "margin": 0.0}], pad_token_id=0)
    assert batch["input_ids"].tolist() == [[1, 2, 3], [5, 0, 0], [1, 4, 0], [6, 7, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 0]]
    assert batch["response_mask"].tolist() == [[0, 1, 1], [1, 0, 0], [0, 1, 0], [0, 1, 0]]
    assert batch["margin"].tolist() == [0.5, 0.0]


def test_the_held_out_split_is_seeded_and_disjoint(tmp_path):
    rows = [{"prompt": f"Q{i}:", "chosen": f" yes {i}", "rejected": f" no {i}"} for i in range(20)]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    splits = []
    for _ in range(2):
        data = PreferenceDataModule(tokenizer=TINY_PYTHIA, dataset=path, num_eval_pairs=5)
        data.setup("fit")
        splits.append(([tuple(p["chosen"][0]) for p in data.train_pairs],
                       [tuple(p["chosen"][0]) for p in data.eval_pairs]))
    assert splits[0] == splits[1]
    train, held_out = splits[0]
    assert len(train) == 15 and len(held_out) == 5 and not set(train) & set(held_out)


@pytest.mark.parametrize("name, expected", [
    ("a_dir", "cannot be read as a dataset folder (EmptyDatasetError"),
    ("pairs", "suffix-less files are not read"),
    ("pairs.txt", ".txt files are not read"),
], ids=["folder without data files", "suffix-less", "txt"])
def test_a_path_that_is_not_a_pairs_file_is_one_line_as_on_the_prompts_side(name, expected, tmp_path, tokenizer):
    (tmp_path / "a_dir").mkdir()
    for file in ("pairs", "pairs.txt"):
        (tmp_path / file).write_text('{"prompt": "Q", "chosen": " a", "rejected": " b"}\n')
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_preference_pairs(str(tmp_path / name), tokenizer)


def test_a_file_too_small_to_hold_pairs_out_says_so(tmp_path):
    one = write_jsonl(tmp_path / "one.jsonl", [{"prompt": "Q", "chosen": " a", "rejected": " b"}])
    with pytest.raises(ConfigError, match="holds 1 usable pair; training needs at least 2"):
        PreferenceDataModule(tokenizer=TINY_PYTHIA, dataset=one).setup("fit")
    rows = [{"prompt": f"Q{i}:", "chosen": f" yes {i}", "rejected": f" no {i}"} for i in range(10)]
    few = write_jsonl(tmp_path / "few.jsonl", rows)
    with pytest.warns(UserWarning, match=r"holds 10 pairs: 9 are held out \(of data.num_eval_pairs=64\) and 1 left"):
        PreferenceDataModule(tokenizer=TINY_PYTHIA, dataset=few).setup("fit")


def test_a_missing_pairs_file_is_one_line_that_reads_right(tmp_path, tokenizer):
    with pytest.raises(ConfigError) as raised:
        load_preference_pairs(str(tmp_path / "pairs.jsonl"), tokenizer)
    assert str(raised.value).endswith("no such file (a relative path is read from the directory the script is "
                                      "started in); give an existing .jsonl, .json, .csv or .parquet file.")


@pytest.mark.parametrize("settings, expected", [
    ({"max_length": "abc"}, "data.max_length='abc' must be a whole number of tokens above data.max_prompt_length=128"),
    ({"max_length": 1000.0}, "data.max_length=1000.0 must be a whole number of tokens above"),  # 1e3 on the CLI
    ({"max_length": 100}, "data.max_length=100 must exceed data.max_prompt_length=128 (the {second} needs room)"),
    ({"max_prompt_length": "abc"}, "data.max_prompt_length='abc' must be a whole number >= 1."),
    ({"batch_size": 0}, "data.batch_size=0 must be a whole number >= 1."),
])
@pytest.mark.parametrize("data_module, held_out, second", [
    (PreferenceDataModule, "num_eval_pairs", "response"), (CompletionDataModule, "num_eval_rows", "completion")])
def test_the_lengths_of_pair_and_completion_data_are_whole_numbers_checked_as_built(settings, expected, data_module,
                                                                                     held_out, second):
    """data.max_length=abc (or 1e3) was said to need to exceed data.max_prompt_length, which it may already."""
    with pytest.raises(ConfigError, match=f"^{re.escape(expected.format(second=second))}"):
        data_module(tokenizer=TINY_PYTHIA, **settings)
    with pytest.raises(ConfigError, match=rf"^data\.{held_out}=-1 must be a whole number >= 0\.$"):
        data_module(tokenizer=TINY_PYTHIA, **{held_out: -1})
