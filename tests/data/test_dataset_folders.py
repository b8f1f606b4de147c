"""data.dataset as a local folder: one `datasets` saved (save_to_disk), or a hub dataset's files downloaded into a
folder; and a path no hub dataset can have, refused before anything loads when it does not exist."""

import json

import pytest

from lit_rlhf.checkpoints.run_identity import dataset_identity
from lit_rlhf.config.data import check_dataset_file
from lit_rlhf.data.completion_datamodule import load_completions
from lit_rlhf.data.preferences import load_preference_pairs
from lit_rlhf.data.sources import load_prompt_texts
from lit_rlhf.errors import ConfigError, UnavailableError
from lit_rlhf.models.tokenizer import load_tokenizer
from tests.conftest import TINY_PYTHIA, make_datamodule

TRAIN = [f"train prompt {i}" for i in range(12)]
TEST = [f"test prompt {i}" for i in range(5)]


def splits():
    from datasets import Dataset, DatasetDict

    return DatasetDict(train=Dataset.from_dict({"prompt": TRAIN, "answer": list(range(12))}),
                       test=Dataset.from_dict({"prompt": TEST, "answer": list(range(5))}))


def test_a_saved_dataset_and_each_split_of_a_saved_dataset_dict_are_read(tmp_path):
    data = splits()
    data["train"].save_to_disk(str(tmp_path / "one"))
    data.save_to_disk(str(tmp_path / "both"))
    assert load_prompt_texts(str(tmp_path / "one")) == TRAIN
    assert load_prompt_texts(str(tmp_path / "one"), split="test") == TRAIN  # one split saved: it is the data
    assert load_prompt_texts(str(tmp_path / "both")) == TRAIN
    assert load_prompt_texts(str(tmp_path / "both"), split="test") == TEST
    with pytest.raises(ConfigError, match=r"^data.split='validation' is not a split of '.*both'; its splits are "
                                          r"\['test', 'train'\] \(set data.split\).$"):
        load_prompt_texts(str(tmp_path / "both"), split="validation")


def test_a_downloaded_hub_dataset_folder_is_read_by_split_and_trains_with_its_other_columns(tmp_path):
    """The layout `hf download --repo-type dataset NAME --local-dir DIR` leaves: data files named by split."""
    data = splits()
    (tmp_path / "repo" / "data").mkdir(parents=True)
    for split in ("train", "test"):
        data[split].to_parquet(str(tmp_path / "repo" / "data" / f"{split}-00000-of-00001.parquet"))
    assert load_prompt_texts(str(tmp_path / "repo"), split="test") == TEST
    module = make_datamodule(dataset=str(tmp_path / "repo"), num_eval_prompts=4)
    module.setup()
    tokenizer = load_tokenizer(TINY_PYTHIA)
    read = {tokenizer.decode(row.ids): row.columns["answer"] for row in module.train_prompts + module.eval_prompts}
    assert read == {text: answer for answer, text in enumerate(TRAIN)}


def test_a_folder_with_a_loading_script_is_refused_and_the_script_never_runs(tmp_path):
    folder = tmp_path / "scripted"
    folder.mkdir()
    (folder / "scripted.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('ran')\n")
    splits()["train"].to_json(str(folder / "train.jsonl"))
    with pytest.raises(ConfigError, match=r"^data.dataset='.*scripted' holds a loading script \(scripted.py\), which "
                                          r"is never run; give the folder of its data files"):
        load_prompt_texts(str(folder))
    assert not (tmp_path / "ran").exists()


def test_a_folder_without_data_files_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"^data.dataset='.*empty' cannot be read as a dataset folder "
                                          r"\(EmptyDatasetError: .*\); give a folder of .jsonl, .csv or .parquet"):
        load_prompt_texts(str(tmp_path / "empty"))


def test_pairs_and_completions_are_read_from_a_saved_folder(tmp_path):
    from datasets import Dataset

    rows = {"prompt": ["Q1:", "Q2:"], "chosen": [" yes", " sure"], "rejected": [" no", " never"]}
    Dataset.from_dict(rows).save_to_disk(str(tmp_path / "pairs"))
    tokenizer = load_tokenizer(TINY_PYTHIA)
    pairs, identical = load_preference_pairs(str(tmp_path / "pairs"), tokenizer)
    eos = tokenizer.eos_token
    assert [(p.prompt, p.chosen, p.rejected) for p in pairs] == [("Q1:", " yes" + eos, " no" + eos),
                                                                 ("Q2:", " sure" + eos, " never" + eos)]
    assert identical == 0
    texts = load_completions(str(tmp_path / "pairs"), tokenizer, completion_column="chosen")
    assert texts == [("Q1:", " yes" + eos), ("Q2:", " sure" + eos)]


@pytest.mark.parametrize("dataset, why", [
    ("./prompts", " (a relative path is read from the directory the script is started in)"),
    ("data/train/prompts", " (a relative path is read from the directory the script is started in)"),
    ("/no/such/folder", ""),
    ("~/prompts", " (~ is not expanded: give the full path)"),
], ids=["dot", "two slashes", "absolute", "tilde"])
def test_a_missing_path_that_no_hub_dataset_can_have_is_refused_with_the_settings(dataset, why):
    with pytest.raises(ConfigError) as raised:
        check_dataset_file(dataset)
    assert str(raised.value) == (f"data.dataset={dataset!r}: no such file or folder{why}; give an existing file or "
                                 f"dataset folder.")


def test_a_hub_name_is_left_to_the_hub_and_an_existing_folder_passes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_dataset_file("openai/gsm8k")
    check_dataset_file("imdb")
    check_dataset_file("buckets/someone/storage/prompts")  # a Hub storage bucket's folder, read by `datasets`
    (tmp_path / "data" / "train").mkdir(parents=True)
    check_dataset_file("./data")
    check_dataset_file("data/train/")


def test_a_resume_knows_a_dataset_folder_by_its_files(tmp_path):
    splits().save_to_disk(str(tmp_path / "folder"))
    before = dataset_identity(str(tmp_path / "folder"))
    assert before["digest"] is not None and before == dataset_identity(str(tmp_path / "folder"))
    splits()["train"].select(range(3)).save_to_disk(str(tmp_path / "folder" / "train"))
    assert dataset_identity(str(tmp_path / "folder")) != before
    assert dataset_identity("openai/gsm8k") == {"digest": None}


def test_offline_a_hub_dataset_in_the_hub_cache_is_read_from_there(tmp_path, monkeypatch):
    """`hf download --repo-type dataset NAME` fills the Hub's cache, which `datasets` does not read offline (it reads
    only its own): its snapshot folder is read as a dataset folder."""
    import huggingface_hub.constants

    repo = tmp_path / "hub" / "datasets--someone--prompts"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit / "data").mkdir(parents=True)
    for split, data in splits().items():
        data.to_parquet(str(repo / "snapshots" / commit / "data" / f"{split}-00000-of-00001.parquet"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert load_prompt_texts("someone/prompts", split="test") == TEST
    with pytest.raises(UnavailableError, match=r"^dataset 'someone/other' \(split 'train'\) is not available here "
                                               r"\(ConnectionError\). Download it with internet"):
        load_prompt_texts("someone/other")


def test_a_split_or_subset_of_a_file_or_a_bundled_set_is_refused_and_a_folder_gives_its_splits(tmp_path):
    """A file (a bundled set) has one split, read whole: data.split=test on it trained or evaluated on every row."""
    from lit_rlhf.config.data import DataConfig

    (tmp_path / "splits").mkdir()
    for split, count in (("train", 3), ("test", 2)):
        (tmp_path / "splits" / f"{split}.jsonl").write_text("".join(
            json.dumps({"prompt": f"{split} prompt {i}"}) + "\n" for i in range(count)))
    assert load_prompt_texts(str(tmp_path / "splits"), split="test") == ["test prompt 0", "test prompt 1"]
    one_file = str(tmp_path / "splits" / "train.jsonl")
    assert len(load_prompt_texts(one_file)) == 3
    for read in (lambda: DataConfig(tokenizer=TINY_PYTHIA, dataset=one_file, split="test"),
                 lambda: load_prompt_texts(one_file, split="test")):
        with pytest.raises(ConfigError) as refused:
            read()
        assert str(refused.value) == (f"data.split='test' picks a split of a hub dataset or a dataset folder, and "
                                      f"data.dataset={one_file!r} is one file, read whole; leave data.split out "
                                      f"(train), or give a folder of a file per split (train.jsonl, test.jsonl, ...).")
    with pytest.raises(ConfigError, match=r"^data.subset='main' names a configuration of a hub dataset or a dataset "
                                          r"folder, and data.dataset='sentiment' is a bundled prompt set, read whole; "
                                          r"set data.subset=null.$"):
        load_prompt_texts("sentiment", subset="main")
    with pytest.raises(ConfigError, match="data.dataset='sentiment_pairs' is a bundled set, read whole"):
        load_preference_pairs("sentiment_pairs", load_tokenizer(TINY_PYTHIA), split="test")
