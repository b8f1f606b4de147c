"""SFT rows without a prompt column: conversations (a `messages` column, TRL's conversational format), trained on
the assistant turns only, their headers and the other turns as context; plain texts (a `text` column), trained on
every token; train_sft.py as typed on such files."""

import csv
import itertools
import json

import pytest
from transformers import AutoTokenizer

from lit_rlhf.data.completion_datamodule import CompletionDataModule
from lit_rlhf.data.conversations import conversation_item, text_item
from lit_rlhf.errors import ConfigError
from tests.apps import run_app
from tests.conftest import TINY_PYTHIA

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello there"}, {"role": "user", "content": "Bye"},
                {"role": "assistant", "content": "See you"}]


def chat_tokenizer(template: str = TEMPLATE):
    tokenizer = AutoTokenizer.from_pretrained(TINY_PYTHIA)
    tokenizer.chat_template = template
    return tokenizer


def test_the_assistant_turns_are_trained_on_and_every_other_token_is_context():
    tokenizer = chat_tokenizer()
    ids, mask = conversation_item(tokenizer, CONVERSATION, "row 1", max_length=256)
    assert tokenizer.decode(ids) == ("<|system|>Be brief.<|end|>\n<|user|>Hi<|end|>\n<|assistant|>Hello there<|end|>\n"
                                     "<|user|>Bye<|end|>\n<|assistant|>See you<|end|>\n")
    runs = [tokenizer.decode([token for token, _ in run])  # the maximal runs of trained tokens
            for bit, run in itertools.groupby(zip(ids, mask, strict=True), key=lambda pair: pair[1]) if bit]
    assert runs == ["Hello there<|end|>\n", "See you<|end|>\n"]


def test_the_first_max_length_tokens_are_kept():
    tokenizer = chat_tokenizer()
    whole, whole_mask = conversation_item(tokenizer, CONVERSATION, "row 1", max_length=256)
    cut = whole_mask.index(1) + 2  # into the first assistant turn
    ids, mask = conversation_item(tokenizer, CONVERSATION, "row 1", max_length=cut)
    assert (ids, mask) == (whole[:cut], whole_mask[:cut]) and len(whole) > cut


@pytest.mark.parametrize(("messages", "tokenizer", "message"), [
    ([{"role": "user", "content": "Hi"}], chat_tokenizer(), "row 1: the conversation has no assistant turn"),
    (CONVERSATION, AutoTokenizer.from_pretrained(TINY_PYTHIA), "row 1 holds chat messages and the tokenizer has no "
                                                              "chat template"),
    ("Hi there", chat_tokenizer(), "row 1: 'messages' is str, not a list of chat messages"),
    (CONVERSATION, chat_tokenizer("{% for m in messages %}{% if loop.last %}<|{{ m['role'] }}|>{{ m['content'] }}"
                                  "{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"),
     "row 1: the chat template renders the turns before assistant turn 3 otherwise once it follows them"),
])
def test_a_conversation_that_cannot_be_trained_on_is_one_line(messages, tokenizer, message):
    with pytest.raises(ConfigError) as err:
        conversation_item(tokenizer, messages, "row 1", max_length=256)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_no_assistant_token_within_max_length_is_one_line():
    with pytest.raises(ConfigError, match=r"row 1: no assistant token within data.max_length=8"):
        conversation_item(chat_tokenizer(), CONVERSATION, "row 1", max_length=8)


@pytest.mark.integration
def test_train_sft_py_trains_on_a_messages_file_as_typed(tmp_path):
    chat_tokenizer().save_pretrained(tmp_path / "tok")
    with open(tmp_path / "chats.jsonl", "w") as f:
        for i in range(12):
            f.write(json.dumps({"messages": [{"role": "user", "content": f"Film {i}?"},
                                             {"role": "assistant", "content": "It was fine."}]}) + "\n")
    data = CompletionDataModule(tokenizer=str(tmp_path / "tok"), dataset=str(tmp_path / "chats.jsonl"),
                                num_eval_rows=4)
    data.setup("fit")
    per_row = sum(data.train_rows[0][1])  # the assistant turn's tokens
    result = run_app("train_sft.py", "data.dataset=chats.jsonl", "data.tokenizer=tok", "data.num_eval_rows=4",
                     "data.batch_size=4", "hydra.run.dir=sft", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "sft" / "csv" / "metrics.csv") as file:
        rows = list(csv.DictReader(file))
    trained = [float(row["num_completion_tokens"]) for row in rows if row.get("num_completion_tokens")]
    assert trained[-1] == 8 * per_row  # the 8 training rows, each its assistant turn
    counts = [float(row["num_tokens"]) for row in rows if row.get("num_tokens")]
    assert counts[-1] == sum(len(ids) for ids, _ in data.train_rows)  # TRL's num_tokens: the whole rows


def test_a_text_row_is_trained_on_every_token_and_ends_with_one_eos():
    tokenizer = AutoTokenizer.from_pretrained(TINY_PYTHIA)
    eos = tokenizer.eos_token
    ids, mask = text_item(tokenizer, "A quiet film.", "row 1", max_length=64)
    assert ids == tokenizer("A quiet film." + eos)["input_ids"] and mask == [1] * len(ids)
    assert text_item(tokenizer, "A quiet film." + eos, "row 1", max_length=64) == (ids, mask)  # not a second EOS
    assert text_item(tokenizer, "A quiet film.", "row 1", max_length=3) == (ids[:3], [1] * 3)
    with pytest.raises(ConfigError, match=r"^row 1: 'text' is '  ', not a non-empty text"):
        text_item(tokenizer, "  ", "row 1", max_length=64)


@pytest.mark.integration
def test_train_sft_py_trains_on_a_text_file_as_typed(tmp_path):
    with open(tmp_path / "texts.jsonl", "w") as f:
        for i in range(12):
            f.write(json.dumps({"text": f"Film {i} was a quiet delight."}) + "\n")
    result = run_app("train_sft.py", "data.dataset=texts.jsonl", "data.num_eval_rows=4", "data.batch_size=4",
                     "hydra.run.dir=sft", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    data = CompletionDataModule(tokenizer=TINY_PYTHIA, dataset=str(tmp_path / "texts.jsonl"), num_eval_rows=4)
    data.setup("fit")  # the app's draw of the 8 training rows
    with open(tmp_path / "sft" / "csv" / "metrics.csv") as file:
        rows = list(csv.DictReader(file))
    trained = [float(row["num_completion_tokens"]) for row in rows if row.get("num_completion_tokens")]
    assert trained[-1] == sum(len(ids) - 1 for ids, _ in data.train_rows)  # every token but the first is a target
    counts = [float(row["num_tokens"]) for row in rows if row.get("num_tokens")]
    assert counts[-1] == sum(len(ids) for ids, _ in data.train_rows)  # TRL's num_tokens: every token
