"""DataConfig: where the prompts come from and how they are batched (PromptDataModule)."""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lit_rlhf.config.settings import setting
from lit_rlhf.config.validation import check_not_empty
from lit_rlhf.errors import ConfigError

# the local files data.dataset reads, by suffix, with the `datasets` builder that reads each
FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def named(dataset: object, tokenizer: object) -> tuple[str | None, str]:
    """data.dataset and data.tokenizer as the names they must be (a bundled set, a file, a folder, a hub name; a
    pathlib.Path becomes its string): checkpoints record the data module's settings and a resume compares the file's
    digest, so objects in memory are one line."""
    if dataset is not None and not isinstance(dataset, (str, os.PathLike)):
        raise ConfigError(f"data.dataset is a {type(dataset).__name__}, not a name or a path; write the rows to a "
                          f"file (a datasets.Dataset: ds.to_json('rows.jsonl')) and pass its path, which checkpoints "
                          f"record.")
    if not isinstance(tokenizer, (str, os.PathLike)):
        name = getattr(tokenizer, "name_or_path", None)
        raise ConfigError(f"data.tokenizer is a {type(tokenizer).__name__}, not a name or a path; pass the name or "
                          f"folder it was loaded from{f' ({name!r})' if isinstance(name, str) else ''}, or save it "
                          f"with save_pretrained and pass that folder.")
    return (None if dataset is None else os.fspath(dataset)), os.fspath(tokenizer)


def check_dataset_file(dataset: str, split: object = "train", subset: object = None) -> None:
    """A data.dataset with a data file's suffix names a local file, and one that no hub dataset can be named (absolute,
    starting with `.` or `~`, or with more than one `/`) a local file or folder; either must exist: checked with the
    settings, before the imports (the apps), and again where the file is read (prompts, completions or pairs). A file
    is read whole, so data.split and data.subset may not pick a part of it (check_read_whole)."""
    check_not_empty("data.dataset", dataset, "give a .jsonl, .json, .csv or .parquet file, a dataset folder or a Hub "
                                             "dataset name")
    path = Path(dataset)
    if path.suffix.lower() in FILE_BUILDERS and not path.is_file() and not path.is_dir():
        raise ConfigError(f"data.dataset={dataset!r}: no such file (a relative path is read from the directory the "
                          f"script is started in); give an existing .jsonl, .json, .csv or .parquet file.")
    if path.suffix.lower() in FILE_BUILDERS and path.is_file():
        check_read_whole(dataset, "one file", split, subset)
    remote = "://" in dataset or dataset.startswith("buckets/")  # what `datasets` reads from elsewhere
    if (dataset.startswith(("/", ".", "~")) or dataset.count("/") > 1) and not remote and not path.exists():
        why = {"/": "", "~": " (~ is not expanded: give the full path)"}.get(
            dataset[0], " (a relative path is read from the directory the script is started in)")
        raise ConfigError(f"data.dataset={dataset!r}: no such file or folder{why}; give an existing file or dataset "
                          f"folder.")


def check_read_whole(dataset: str, what: str, split: object, subset: object) -> None:
    """A file or a bundled set has one split, read whole: data.split=test (or a subset) on it was ignored, silently,
    and the run trained or evaluated on every row."""
    if split != "train":
        raise ConfigError(f"data.split={split!r} picks a split of a hub dataset or a dataset folder, and "
                          f"data.dataset={dataset!r} is {what}, read whole; leave data.split out (train), or give a "
                          f"folder of a file per split (train.jsonl, test.jsonl, ...).")
    if subset is not None:
        raise ConfigError(f"data.subset={subset!r} names a configuration of a hub dataset or a dataset folder, and "
                          f"data.dataset={dataset!r} is {what}, read whole; set data.subset=null.")


def check_pair_lengths(counts: dict[str, tuple[object, int]], max_length: object, max_prompt_length: object,
                       second: str) -> None:
    """The whole-number settings of a data module of (prompt, second) rows: each of counts {name: (value, minimum)},
    then max_length, which must leave room for the second part after max_prompt_length."""
    for name, (value, minimum) in {**counts, "max_prompt_length": (max_prompt_length, 1)}.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ConfigError(f"data.{name}={value!r} must be a whole number >= {minimum}.")
    if not isinstance(max_length, int) or isinstance(max_length, bool):
        raise ConfigError(f"data.max_length={max_length!r} must be a whole number of tokens above "
                          f"data.max_prompt_length={max_prompt_length} (prompt and {second} together).")
    if max_length <= max_prompt_length:
        raise ConfigError(f"data.max_length={max_length!r} must exceed data.max_prompt_length={max_prompt_length} "
                          f"(the {second} needs room); raise data.max_length.")


@dataclass
class DataConfig:
    tokenizer: str = setting("???", "the policy's tokenizer (the CLI sets model.tokenizer_name_or_path)")
    dataset: Optional[str] = setting("sentiment", "`sentiment` (bundled), a .jsonl/.json/.csv/.parquet path, a "
                                                  "dataset folder (save_to_disk's, or a downloaded hub dataset's "
                                                  "files), or a hub dataset name")
    prompt_column: str = setting("prompt", "the column holding the prompts: text, or chat messages (TRL's "
                                           "conversational format, [{role, content}, ...]) that the tokenizer's chat "
                                           "template renders with its generation prompt")
    split: str = setting("train", "for hub datasets and dataset folders (a file, or a bundled set, is read whole)")
    subset: Optional[str] = setting(None, "hub dataset configuration name")
    batch_size: int = setting(8, "prompts per RL step over all ranks (B x world size); N = batch_size x K")
    max_prompt_length: int = setting(64, "longer prompts lose their beginning (counted, warned once)")
    apply_chat_template: bool = setting(False, "wrap each plain-text prompt as a user turn with the tokenizer's chat "
                                               "template (prompts given as chat messages always are rendered with it)")
    num_eval_prompts: int = setting(16, "fixed held-out prompts for validation, samples and the end-of-run "
                                        "evaluation (0: train on every prompt, without them)")
    eval_batch_size: int = setting(16, "held-out prompts per validation batch")
    seed: int = setting(0, "the order of the prompts and the held-out split")
    trust_remote_code: bool = setting(False, "allow the tokenizer's own code from the Hub")

    def __post_init__(self):
        for name in ("batch_size", "max_prompt_length", "eval_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"data.{name}={value!r} must be a whole number >= 1.")
        held_out = self.num_eval_prompts
        if not isinstance(held_out, int) or isinstance(held_out, bool) or held_out < 0:
            raise ConfigError(f"data.num_eval_prompts={held_out!r} must be a whole number >= 0 (0: none held out).")
        if self.tokenizer in (None, "???", ""):
            raise ConfigError("data.tokenizer is required: the policy's tokenizer (hub name or directory).")
        self.dataset, self.tokenizer = named(self.dataset, self.tokenizer)
        if self.dataset is not None:
            check_dataset_file(self.dataset, self.split, self.subset)
