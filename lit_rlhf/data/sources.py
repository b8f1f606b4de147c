"""Where prompts come from: the bundled set, local jsonl/csv/parquet files, or a Hugging Face dataset."""

from __future__ import annotations

import json
from pathlib import Path

from lit_rlhf.errors import ConfigError, UnavailableError

BUNDLED = {"sentiment": Path(__file__).parent / "sentiment" / "prompts.jsonl"}
FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def load_prompt_texts(dataset: str, prompt_column: str = "prompt", split: str = "train",
                      subset: str | None = None) -> list[str]:
    """The prompt column of `dataset`: a bundled name, a local file, or a hub dataset name."""
    if dataset in BUNDLED:  # our own small jsonl: read directly, sparing the ~90 MB that importing datasets costs
        rows = [json.loads(line) for line in BUNDLED[dataset].read_text().splitlines() if line.strip()]
        if prompt_column not in rows[0]:
            raise ConfigError(f"data.prompt_column={prompt_column!r} is not a column of {dataset!r}; its columns "
                              f"are {sorted(rows[0])}.")
        return [str(row[prompt_column]) for row in rows]
    from datasets import load_dataset

    path = Path(dataset)
    if path.suffix in FILE_BUILDERS:
        if not path.exists():
            raise ConfigError(f"data.dataset={dataset!r}: no such file; give an existing .jsonl, .csv or "
                              f".parquet path.")
        data = load_dataset(FILE_BUILDERS[path.suffix], data_files=str(path), split="train")
    else:
        try:
            data = load_dataset(dataset, subset, split=split)
        except (ConnectionError, OSError, FileNotFoundError, ValueError) as err:
            raise UnavailableError(
                f"dataset {dataset!r} (split {split!r}) is not available here ({type(err).__name__}). Download it "
                f"on a machine with internet (`hf download --repo-type dataset {dataset}`), or set data.dataset to "
                f"a local .jsonl/.csv/.parquet file or to 'sentiment' (bundled)."
            ) from err
    if prompt_column not in data.column_names:
        raise ConfigError(
            f"data.prompt_column={prompt_column!r} is not a column of {dataset!r}; its columns are {data.column_names}."
        )
    return [str(text) for text in data[prompt_column]]
