"""Where prompts come from: the bundled set, local jsonl/csv/parquet files, a local dataset folder, or a Hugging Face
dataset.

JSON Lines files (the bundled set included) are read here, line by line, so a bad line is named by its
number and `datasets` (~90 MB of imports) is not needed; csv, parquet and hub datasets go through
`datasets`. Every prompt must be a string or chat messages (a list of {"role", "content"}): a null or a number is
refused, not trained as "None".
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from lit_rlhf.config.data import FILE_BUILDERS, check_dataset_file, check_read_whole
from lit_rlhf.errors import ConfigError, UnavailableError
from lit_rlhf.hub import hub_endpoint, hub_offline, hub_reachable
from lit_rlhf.terminal import clipped_first_line

BUNDLED = {"sentiment": Path(__file__).parent / "sentiment" / "prompts.jsonl",
           "arithmetic": Path(__file__).parent / "arithmetic" / "prompts.jsonl",
           "calculator": Path(__file__).parent / "calculator" / "prompts.jsonl",
           "two_task": Path(__file__).parent / "two_task" / "prompts.jsonl"}
UNSUPPORTED_SUFFIXES = (".txt", ".tsv", ".md", ".yaml", ".yml", ".xlsx", ".xls", ".gz", ".zip", ".arrow")
FORMATS = "a .jsonl, .json, .csv or .parquet file, a dataset folder, a hub dataset name, or 'sentiment' (bundled)"


def read_jsonl(path: Path, dataset: str) -> list[dict[str, Any]]:
    """The rows of a JSON Lines file; blank lines are skipped, anything else that is not a JSON object
    is refused with its line number."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"data.dataset={dataset!r} is not UTF-8 text (byte {err.start}); save it as UTF-8.") from err
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"data.dataset={dataset!r}, line {number}: not valid JSON ({err.msg}); each line must "
                              f"be one JSON object such as {{\"prompt\": \"...\"}}.") from err
        if not isinstance(row, dict):
            raise ConfigError(f"data.dataset={dataset!r}, line {number}: a JSON {type(row).__name__}, not an object "
                              f"such as {{\"prompt\": \"...\"}}.")
        rows.append(row)
    return rows


def column_of(rows: list[dict[str, Any]], prompt_column: str | None, dataset: str) -> list[dict[str, Any]]:
    """The rows, checked to hold the prompt column (None: the caller checks its columns)."""
    if not rows:
        raise ConfigError(f"data.dataset={dataset!r} holds no rows; give a file with prompts.")
    if prompt_column is None:
        return rows
    missing = next((i for i, row in enumerate(rows, start=1) if prompt_column not in row), None)
    if missing is not None:
        raise ConfigError(f"data.prompt_column={prompt_column!r} is not a column of {dataset!r} (row {missing} has "
                          f"{sorted(rows[missing - 1])}); set data.prompt_column.")
    return rows


def check_csv(path: Path, dataset: str) -> None:
    """A CSV file that Python's strict reader parses, each row with the header's number of fields; else one line
    naming the line (the reader of `datasets` would silently merge rows after an unclosed quote)."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f, strict=True)
        start = 1  # the line the record being read starts on (a quoted field may span lines)
        try:
            header = next(reader, [])
            start = reader.line_num + 1
            for row in reader:
                if row and len(row) != len(header):
                    raise ConfigError(f"data.dataset={dataset!r}, line {start}: {len(row)} fields, but the header has "
                                      f"{len(header)}; quote fields that hold commas.")
                start = reader.line_num + 1
        except csv.Error as err:
            raise ConfigError(f"data.dataset={dataset!r}, line {start}: not valid CSV ({err}); check the quotes of "
                              f"that line.") from err


def load_file(path: Path, dataset: str, prompt_column: str | None) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return column_of(read_jsonl(path, dataset), prompt_column, dataset)
    if suffix == ".csv":
        check_csv(path, dataset)
    from datasets import load_dataset

    try:
        data = load_dataset(FILE_BUILDERS[suffix], data_files=str(path), split="train")
    except Exception as err:  # datasets raises many types for a malformed file; all mean the same to the user
        raise ConfigError(f"data.dataset={dataset!r} cannot be read as {path.suffix} ({type(err).__name__}: "
                          f"{clipped_first_line(err)}); check the file.") from err
    return dataset_column(data, prompt_column, dataset)


def load_hub(dataset: str, prompt_column: str | None, split: str, subset: str | None) -> list[dict[str, Any]]:
    from datasets import load_dataset

    if not hub_offline() and not hub_reachable():  # the Hub client's retries took half a minute to say so
        if (folder := downloaded_snapshot(dataset)) is not None:
            return load_directory(folder, dataset, prompt_column, split, subset)
        if not in_datasets_cache(dataset):
            raise unavailable_dataset(dataset, split, f"not in the cache, and {hub_endpoint()} cannot be reached")
    try:
        data = load_dataset(dataset, subset, split=split)
    except (ConnectionError, OSError, FileNotFoundError, ValueError) as err:
        if (folder := downloaded_snapshot(dataset)) is not None:  # offline, `datasets` reads only its own cache
            return load_directory(folder, dataset, prompt_column, split, subset)
        raise unavailable_dataset(dataset, split, type(err).__name__) from err
    return dataset_column(data, prompt_column, dataset)


def unavailable_dataset(dataset: str, split: str, reason: str) -> UnavailableError:
    return UnavailableError(
        f"dataset {dataset!r} (split {split!r}) is not available here ({reason}). Download it with internet (`hf "
        f"download --repo-type dataset {dataset}` into the Hub cache this machine reads, HF_HOME; or with "
        f"--local-dir DIR and data.dataset=DIR), or set data.dataset to {FORMATS}.")


def in_datasets_cache(dataset: str) -> bool:
    """Whether `datasets` holds a prepared copy of the hub dataset (one loaded online before), which it reads
    when the Hub cannot be reached."""
    import datasets

    cache, name = Path(datasets.config.HF_DATASETS_CACHE), dataset.replace("/", "___").lower()
    return cache.is_dir() and any(entry.name.lower() == name for entry in cache.iterdir())


def downloaded_snapshot(dataset: str) -> Path | None:
    """The folder of a hub dataset that `hf download --repo-type dataset NAME` put in the Hub's cache, or None."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(dataset, repo_type="dataset", local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError):
        return None


def load_directory(path: Path, dataset: str, prompt_column: str | None, split: str,
                   subset: str | None) -> list[dict[str, Any]]:
    """The rows of a local dataset folder: one that `datasets` wrote (`save_to_disk`: a Dataset, or a DatasetDict whose
    `split` is read), or a folder of data files such as a hub dataset downloaded with `hf download --repo-type dataset
    NAME --local-dir DIR`, read as `load_dataset(DIR, subset, split=split)` reads it. A loading script in the folder is
    refused, never run: a dataset is data, not code."""
    import datasets

    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        try:
            data = datasets.load_from_disk(str(path))
        except Exception as err:  # a folder save_to_disk wrote in part, or by another release: one line, not a trace
            raise ConfigError(f"data.dataset={dataset!r} cannot be read as a saved dataset ({type(err).__name__}: "
                              f"{clipped_first_line(err)}); save it again with save_to_disk.") from err
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise ConfigError(f"data.split={split!r} is not a split of {dataset!r}; its splits are {sorted(data)} "
                                  f"(set data.split).")
            data = data[split]
        return dataset_column(data, prompt_column, dataset)
    scripts = sorted(script.name for script in path.glob("*.py"))
    if scripts:
        raise ConfigError(f"data.dataset={dataset!r} holds a loading script ({scripts[0]}), which is never run; give "
                          f"the folder of its data files (.jsonl, .csv or .parquet), or one of the files.")
    try:
        data = datasets.load_dataset(str(path), subset, split=split)
    except Exception as err:  # no data files, an unknown split or configuration: datasets says which
        raise ConfigError(f"data.dataset={dataset!r} cannot be read as a dataset folder ({type(err).__name__}: "
                          f"{clipped_first_line(err)}); give a folder of .jsonl, .csv or .parquet files, or one "
                          f"file.") from err
    return dataset_column(data, prompt_column, dataset)


def dataset_column(data, prompt_column: str | None, dataset: str) -> list[dict[str, Any]]:
    """The rows of a `datasets.Dataset`, or one line naming the columns it has when the prompt column is missing
    (None: the caller checks its columns)."""
    if prompt_column is not None and prompt_column not in data.column_names:
        raise ConfigError(f"data.prompt_column={prompt_column!r} is not a column of {dataset!r}; its columns are "
                          f"{data.column_names}.")
    return data.to_list()


def chat_messages(value: Any) -> bool:
    """Whether a prompt is a conversation (TRL's conversational format): a non-empty list of {"role", "content"}
    messages with text, which the tokenizer's chat template renders."""
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)


def checked_prompts(values: list[Any], dataset: str, prompt_column: str) -> list[str | list[dict[str, str]]]:
    """The prompts: each a string, or chat messages."""
    for number, value in enumerate(values, start=1):
        if not isinstance(value, str) and not chat_messages(value):
            raise ConfigError(f"data.dataset={dataset!r}, row {number}: {prompt_column!r} is {value!r}, not a string "
                              f"or a list of chat messages ({{\"role\": ..., \"content\": ...}}); remove the row or "
                              f"fix its value.")
    if not any(chat_messages(value) or value.strip() for value in values):
        raise ConfigError(f"data.dataset={dataset!r}: every {prompt_column!r} is empty; give prompts with text.")
    return values


def load_prompt_texts(dataset: str | None, prompt_column: str = "prompt", split: str = "train",
                      subset: str | None = None) -> list[str | list[dict[str, str]]]:
    """The prompt column of `dataset`: a bundled name, a local file, or a hub dataset name (texts, or chat messages)."""
    return load_prompt_rows(dataset, prompt_column, split, subset)[0]


def load_prompt_rows(dataset: str | None, prompt_column: str = "prompt", split: str = "train",
                     subset: str | None = None) -> tuple[list[str | list[dict[str, str]]], list[dict[str, Any]]]:
    """The prompts of `dataset` (a bundled name, a local file, or a hub dataset name) and, for each, the other
    columns of its row (e.g. a reference `answer`), which the reward receives."""
    if dataset is None:
        raise ConfigError(f"data.dataset is not set; give {FORMATS} (e.g. data=files data.dataset=prompts.jsonl).")
    path = Path(dataset)
    if dataset in BUNDLED:
        check_read_whole(dataset, "a bundled prompt set", split, subset)
        rows = column_of(read_jsonl(BUNDLED[dataset], dataset), prompt_column, dataset)
    elif path.is_dir():
        rows = load_directory(path, dataset, prompt_column, split, subset)
    elif path.suffix.lower() in FILE_BUILDERS:
        check_dataset_file(dataset, split, subset)
        rows = load_file(path, dataset, prompt_column)
    elif path.exists() or path.suffix.lower() in UNSUPPORTED_SUFFIXES:
        raise ConfigError(f"data.dataset={dataset!r}: {path.suffix or 'this'} files are not read; give {FORMATS}.")
    else:
        rows = load_hub(dataset, prompt_column, split, subset)
    prompts = checked_prompts([row[prompt_column] for row in rows], dataset, prompt_column)
    return prompts, [{k: v for k, v in row.items() if k != prompt_column} for row in rows]
