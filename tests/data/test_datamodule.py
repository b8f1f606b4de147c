import json
from pathlib import Path

import pytest
import torch

from lit_rlhf.data import collate_left_padded, local_size
from lit_rlhf.errors import ConfigError, UnavailableError
from tests.conftest import make_datamodule


def test_collate_pads_on_the_left():
    batch = collate_left_padded([[5, 6, 7], [8]], pad_token_id=1)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [1, 1, 8]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]


def test_per_rank_batch_size_divides_exactly():
    assert local_size(8, 2, "data.batch_size") == 4
    with pytest.raises(ConfigError, match="data.batch_size=6 does not divide by world_size=4"):
        local_size(6, 4, "data.batch_size")


def test_bundled_prompts_held_out_split_is_fixed_and_disjoint():
    a, b = make_datamodule(), make_datamodule(seed=1)
    a.setup(), b.setup()
    assert len(a.eval_prompts) == 8 and len(a.train_prompts) == 1000 - 8
    train = {tuple(p.ids) for p in a.train_prompts}
    assert not train & {tuple(p.ids) for p in a.eval_prompts}
    again = make_datamodule()
    again.setup()
    assert again.eval_prompts == a.eval_prompts and a.eval_prompts != b.eval_prompts


def test_shuffling_is_deterministic_by_seed():
    def first_batches(seed):
        dm = make_datamodule(seed=seed)
        dm.setup()
        loader = iter(dm.train_dataloader())
        return [next(loader)["input_ids"].tolist() for _ in range(3)]

    assert first_batches(0) == first_batches(0)
    assert first_batches(0) != first_batches(1)


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet"])
def test_local_files_with_a_prompt_column(tmp_path, suffix):
    from datasets import Dataset

    rows = {"text": [f"prompt number {i} is here" for i in range(20)], "other": list(range(20))}
    path = tmp_path / f"prompts.{suffix}"
    getattr(Dataset.from_dict(rows), {"jsonl": "to_json", "csv": "to_csv", "parquet": "to_parquet"}[suffix])(str(path))
    dm = make_datamodule(dataset=str(path), prompt_column="text", num_eval_prompts=4)
    dm.setup()
    assert len(dm.train_prompts) == 16
    with pytest.raises(ConfigError, match="prompt_column='prompt' is not a column"):
        make_datamodule(dataset=str(path), num_eval_prompts=4).setup()


@pytest.mark.parametrize("empty_rows, expected", [
    ([3], "1 prompt encodes to no tokens (e.g. row 3: ''); remove it"),
    ([2, 5], "2 prompts encode to no tokens (e.g. row 2: ''); remove them"),
])
def test_prompts_that_encode_to_no_tokens_are_one_line_naming_the_first(tmp_path, empty_rows, expected):
    path = tmp_path / "p.jsonl"
    prompts = ["" if i in empty_rows else f"prompt {i}" for i in range(1, 11)]
    path.write_text("\n".join(json.dumps({"prompt": p}) for p in prompts))
    with pytest.raises(ConfigError) as err:
        make_datamodule(dataset=str(path), num_eval_prompts=2).setup()
    assert str(err.value) == f"data.dataset={str(path)!r}: {expected}, or use a tokenizer that adds a BOS token."


def test_long_prompts_are_truncated_on_the_left_counted_and_warned_once(tmp_path):
    path = tmp_path / "p.jsonl"
    long = "The movie was good and the acting was bad and the plot was slow " * 3
    path.write_text("\n".join(json.dumps({"prompt": p}) for p in [long] * 5 + ["I loved it"] * 5))
    dm = make_datamodule(dataset=str(path), max_prompt_length=6, num_eval_prompts=2)
    with pytest.warns(UserWarning, match="5 of 10 prompts") as record:
        dm.setup()
    assert len([w for w in record if "truncated" in str(w.message)]) == 1
    assert dm.num_truncated == 5
    full = dm.tokenizer(long)["input_ids"]
    assert max(len(p.ids) for p in dm.train_prompts + dm.eval_prompts) == 6
    assert full[-6:] in [p.ids for p in dm.train_prompts + dm.eval_prompts]


def test_chat_template_wraps_prompts(tiny_path, tmp_path):
    from lit_rlhf.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_path)
    tokenizer.chat_template = "{% for m in messages %}User: {{ m['content'] }}\n{% endfor %}Review:"
    tokenizer.save_pretrained(tmp_path / "tok")
    dm = make_datamodule(tokenizer=str(tmp_path / "tok"), apply_chat_template=True)
    dm.setup()
    text = dm.tokenizer.decode(dm.train_prompts[0].ids)
    assert text.startswith("User: ") and text.endswith("Review:")


TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}Review:{% endif %}")


def conversations_file(tmp_path, rows: int = 12):
    """Prompts in TRL's conversational format, a system turn in every other one."""
    path = tmp_path / "chat.jsonl"
    with path.open("w") as f:
        for i in range(rows):
            system = [{"role": "system", "content": "Be kind."}] if i % 2 else []
            f.write(json.dumps({"prompt": [*system, {"role": "user", "content": f"Film {i}?"}], "answer": i}) + "\n")
    return str(path)


def tokenizer_with_template(tiny_path, tmp_path):
    from lit_rlhf.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_path)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(tmp_path / "tok")
    return tokenizer, str(tmp_path / "tok")


def test_chat_message_prompts_are_rendered_by_the_template_with_the_generation_prompt(tiny_path, tmp_path):
    tokenizer, folder = tokenizer_with_template(tiny_path, tmp_path)
    dm = make_datamodule(tokenizer=folder, dataset=conversations_file(tmp_path), num_eval_prompts=4)
    dm.setup()  # apply_chat_template is false: a conversation needs the template whatever it says
    by_answer = {row.columns["answer"]: tokenizer.decode(row.ids) for row in dm.rows}
    assert by_answer[0] == "user: Film 0?\nReview:"
    assert by_answer[1] == "system: Be kind.\nuser: Film 1?\nReview:"
    assert len(by_answer) == 12


def test_chat_message_prompts_without_a_chat_template_are_one_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        make_datamodule(dataset=conversations_file(tmp_path), num_eval_prompts=4).setup()
    assert str(err.value).startswith(f"data.dataset={str(tmp_path / 'chat.jsonl')!r} holds chat messages (row 1), but "
                                     f"the tokenizer ") and str(err.value).endswith(
        "has no chat template; give plain-text prompts, or a tokenizer with a chat template (data.tokenizer).")


def test_a_list_that_is_not_chat_messages_is_refused_by_row(tmp_path):
    path = tmp_path / "lists.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(5)) + '{"prompt": ["a", "b"]}\n')
    with pytest.raises(ConfigError, match=r"row 6: 'prompt' is \['a', 'b'\], not a string or a list of chat messages"):
        make_datamodule(dataset=str(path), num_eval_prompts=2).setup()


@pytest.mark.integration
def test_train_py_trains_on_chat_message_prompts(tiny_path, tmp_path):
    from tests.apps import run_app
    from tests.helpers import FAST

    _, folder = tokenizer_with_template(tiny_path, tmp_path)
    result = run_app("train.py", *FAST, "data=files", f"data.dataset={conversations_file(tmp_path)}",
                     f"data.tokenizer={folder}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


def test_unavailable_hub_dataset_is_one_clear_line():
    with pytest.raises(UnavailableError) as err:
        make_datamodule(dataset="someone/not-a-dataset").setup()
    assert "someone/not-a-dataset" in str(err.value) and "\n" not in str(err.value)


def test_batches_hold_local_batch_size_prompts():
    dm = make_datamodule(batch_size=4)
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape[0] == 4 and batch["input_ids"].dtype == torch.long


def test_iterating_the_loaders_leaves_the_global_rng_alone():
    dm = make_datamodule()
    dm.setup()
    state = torch.random.get_rng_state()
    next(iter(dm.val_dataloader()))
    next(iter(dm.train_dataloader()))
    assert torch.equal(state, torch.random.get_rng_state())


def test_the_bundled_prompts_read_directly_equal_what_datasets_loads():
    from datasets import load_dataset

    from lit_rlhf.data.sources import BUNDLED, load_prompt_texts

    direct = load_prompt_texts("sentiment")
    assert direct == load_dataset("json", data_files=str(BUNDLED["sentiment"]), split="train")["prompt"]
    assert len(direct) == 1000
    with pytest.raises(ConfigError, match="data.prompt_column='text' is not a column of 'sentiment'"):
        load_prompt_texts("sentiment", "text")


@pytest.mark.parametrize("module", ["PromptDataModule", "PreferenceDataModule", "CompletionDataModule"])
def test_rows_or_a_tokenizer_in_memory_are_one_line_asking_for_a_name_or_path(module, tiny_path, tmp_path):
    """A plain Lightning script may hand over a datasets.Dataset or a loaded tokenizer; the checkpoints record names."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    from lit_rlhf import PromptDataModule
    from lit_rlhf.data.completion_datamodule import CompletionDataModule
    from lit_rlhf.data.preference_datamodule import PreferenceDataModule

    cls = {"PromptDataModule": PromptDataModule, "PreferenceDataModule": PreferenceDataModule,
           "CompletionDataModule": CompletionDataModule}[module]
    with pytest.raises(ConfigError) as err:
        cls(tokenizer=tiny_path, dataset=Dataset.from_dict({"prompt": ["a", "b"]})).setup("fit")
    assert str(err.value) == ("data.dataset is a Dataset, not a name or a path; write the rows to a file (a "
                              "datasets.Dataset: ds.to_json('rows.jsonl')) and pass its path, which checkpoints "
                              "record.")
    with pytest.raises(ConfigError) as err:
        cls(tokenizer=AutoTokenizer.from_pretrained(tiny_path), dataset="sentiment").setup("fit")
    assert str(err.value) == (f"data.tokenizer is a {type(AutoTokenizer.from_pretrained(tiny_path)).__name__}, not a "
                              f"name or a path; pass the name or folder it was loaded from ({str(tiny_path)!r}), or "
                              f"save it with save_pretrained and pass that folder.")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("")
    named_by_paths = cls(tokenizer=Path(tiny_path), dataset=rows)  # a pathlib.Path is a path: kept as its string
    assert (named_by_paths.hparams.tokenizer, named_by_paths.hparams.dataset) == (str(tiny_path), str(rows))
