"""Preference pairs (prompt, chosen, rejected[, margin]) for reward-model training and DPO.

Rows come from the same sources as prompts (a .jsonl/.csv/.parquet file, a dataset folder or a hub dataset). Texts are
plain strings, or chat messages ([{"role": ..., "content": ...}]) rendered with the tokenizer's chat template (a row
without a prompt whose sides are conversations has TRL's implicit prompt: the messages both sides begin with); a
plain-text chosen or rejected response gets the tokenizer's EOS appended (unless it ends with it), as TRL builds
pairs. A pair is tokenized as the prompt's ids then the response's, truncated so that the boundary stays: the prompt
keeps its last `max_prompt_length` tokens, the response its first `max_length - prompt` tokens.

Shapes: B pairs, L sequence length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lit_rlhf.config.data import check_dataset_file, check_read_whole
from lit_rlhf.data.sources import (
    BUNDLED,
    FILE_BUILDERS,
    UNSUPPORTED_SUFFIXES,
    chat_messages,
    load_directory,
    load_file,
    load_hub,
    read_jsonl,
)
from lit_rlhf.errors import ConfigError


@dataclass
class PreferencePair:
    prompt: str
    chosen: str
    rejected: str
    margin: float = 0.0


def as_text(value: Any, tokenizer: Any, what: str, generation_prompt: bool = False) -> str:
    """A plain string, or chat messages rendered by the tokenizer's chat template."""
    if isinstance(value, str):
        return value
    if chat_messages(value):
        if getattr(tokenizer, "chat_template", None) is None:
            raise ConfigError(f"{what} holds chat messages and the tokenizer has no chat template; give plain text, "
                              f"or a tokenizer with a chat template (model.tokenizer_name_or_path).")
        return tokenizer.apply_chat_template(value, tokenize=False, add_generation_prompt=generation_prompt)
    raise ConfigError(f"{what} is {type(value).__name__}, not text or chat messages; fix that row.")


# the embedded model's own samples on the bundled sentiment prompts, labelled by VADER (scripts/build_pairs.py)
BUNDLED_PAIRS = {"sentiment_pairs": Path(__file__).parent / "sentiment" / "pairs.jsonl"}


def with_eos(text: str, value: Any, tokenizer: Any) -> str:
    """A plain-text response ends with the tokenizer's EOS, as TRL's DPOTrainer and RewardTrainer build them (a
    completion the policy samples ends there too, and the reward model scores it so); chat messages end as their
    template renders them."""
    eos = getattr(tokenizer, "eos_token", None)
    if not isinstance(value, str) or not eos or text.endswith(eos):
        return text
    return text + eos


def read_rows(dataset: str, prompt_column: str | None, split: str, subset: str | None,
              what: str = "preference pairs") -> list[dict[str, Any]]:
    """The rows of a file, a bundled pairs file or a hub dataset; `what` names the rows in the errors. A file or
    hub dataset must have `prompt_column` (None: the caller checks the columns of each row)."""
    path = Path(dataset)
    if dataset in BUNDLED_PAIRS:
        check_read_whole(dataset, "a bundled set", split, subset)
        return read_jsonl(BUNDLED_PAIRS[dataset], dataset)
    if dataset in BUNDLED:
        raise ConfigError(f"data.dataset={dataset!r} is a bundled prompt set, not {what}; give a file of {what}, "
                          f"or 'sentiment_pairs' (bundled).")
    if path.is_dir():
        return load_directory(path, dataset, prompt_column, split, subset)
    if path.suffix.lower() not in FILE_BUILDERS and (path.exists() or path.suffix.lower() in UNSUPPORTED_SUFFIXES):
        raise ConfigError(f"data.dataset={dataset!r}: {path.suffix or 'suffix-less'} files are not read; give a "
                          f".jsonl, .json, .csv or .parquet file of {what}.")
    if path.suffix.lower() in FILE_BUILDERS:
        check_dataset_file(dataset, split, subset)
        if path.suffix.lower() == ".jsonl":
            return read_jsonl(path, dataset)
        return load_file(path, dataset, prompt_column)
    return load_hub(dataset, prompt_column, split, subset)


def load_preference_pairs(dataset: str | None, tokenizer: Any, prompt_column: str = "prompt",
                          chosen_column: str = "chosen", rejected_column: str = "rejected",
                          margin_column: str | None = None, split: str = "train",
                          subset: str | None = None) -> tuple[list[PreferencePair], int]:
    """The pairs of `dataset`, checked, and how many rows were dropped because chosen equals rejected."""
    if dataset is None:
        raise ConfigError("data.dataset is not set; give a .jsonl, .csv or .parquet file (or a hub dataset) with "
                          "prompt, chosen and rejected columns, or 'sentiment_pairs' (bundled).")
    rows = read_rows(dataset, None, split, subset)  # each row's columns: below
    if not rows:
        raise ConfigError(f"data.dataset={dataset!r} holds no rows; give preference pairs.")
    rows = [with_implicit_prompt(row, prompt_column, chosen_column, rejected_column) for row in rows]
    needed = [prompt_column, chosen_column, rejected_column, *([margin_column] if margin_column else [])]
    for number, row in enumerate(rows, start=1):
        missing = [column for column in needed if column not in row]
        if missing:
            key = column_key(missing[0], needed)
            raise ConfigError(f"data.dataset={dataset!r}, row {number}: no {missing[0]!r} column (it has "
                              f"{sorted(row)}); preference pairs need {needed} (set data.{key} to the name your "
                              f"file uses).")
    pairs, identical = [], 0
    for number, row in enumerate(rows, start=1):
        where = f"data.dataset={dataset!r}, row {number}"
        prompt = as_text(row[prompt_column], tokenizer, f"{where} {prompt_column!r}", generation_prompt=True)
        chosen = as_text(row[chosen_column], tokenizer, f"{where} {chosen_column!r}")
        rejected = as_text(row[rejected_column], tokenizer, f"{where} {rejected_column!r}")
        for column, text in ((chosen_column, chosen), (rejected_column, rejected)):
            if not text.strip():
                raise ConfigError(f"{where}: {column!r} is empty; give every response text, or remove the row.")
        chosen = with_eos(chosen, row[chosen_column], tokenizer)
        rejected = with_eos(rejected, row[rejected_column], tokenizer)
        if chosen == rejected:
            identical += 1
            continue
        margin = row_margin(row[margin_column], f"{where} {margin_column!r}") if margin_column else 0.0
        pairs.append(PreferencePair(prompt, chosen, rejected, margin))
    if not pairs:
        raise ConfigError(f"data.dataset={dataset!r}: chosen equals rejected on every one of its {len(rows)} rows, "
                          f"so there is no preference to learn; check the {chosen_column!r} and {rejected_column!r} "
                          f"columns.")
    return pairs, identical


def with_implicit_prompt(row: dict[str, Any], prompt_column: str, chosen_column: str,
                         rejected_column: str) -> dict[str, Any]:
    """A row without a prompt whose chosen and rejected sides are conversations (TRL's implicit prompt): the messages
    both begin with are the prompt, the rest of each its response."""
    chosen, rejected = row.get(chosen_column), row.get(rejected_column)
    if prompt_column in row or not chat_messages(chosen) or not chat_messages(rejected):
        return row
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    if shared == 0:  # nothing in common: no prompt to find (the missing column's line says so)
        return row
    return {**row, prompt_column: chosen[:shared], chosen_column: chosen[shared:], rejected_column: rejected[shared:]}


def row_margin(value: Any, where: str) -> float:
    """A row's margin: a finite number (not a string, a boolean or null)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where} is {value!r}, not a finite number; give every row a numeric margin (or set "
                          f"data.margin_column=null).")
    return float(value)


def column_key(column: str, needed: list[str]) -> str:
    return ("prompt_column", "chosen_column", "rejected_column", "margin_column")[needed.index(column)]


def tokenize_pair_side(tokenizer: Any, prompt: str, response: str, max_length: int,
                       max_prompt_length: int) -> tuple[list[int], int]:
    """prompt ids (its last max_prompt_length) + response ids (as many as max_length leaves), and the prompt's
    length in it (where the response starts)."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"][-max_prompt_length:]
    response_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    return prompt_ids + response_ids[: max_length - len(prompt_ids)], len(prompt_ids)


def collate_pairs(items: list[dict[str, Any]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-padded chosen and rejected sequences (2B,L: the B chosen first, then the B rejected), the response
    mask (2B,L: 1 on response tokens), margins (B), and the reference's summed logprobs (2B) where every item holds
    them. An item: {"chosen": (ids, prompt length), "rejected": ..., "margin": float, optionally "reference_logprobs":
    (chosen, rejected)}; a bare id list counts as all response."""
    batch = collate_sequences([item[side] for side in ("chosen", "rejected") for item in items], pad_token_id)
    batch["margin"] = torch.tensor([item["margin"] for item in items], dtype=torch.float32)  # B
    if all("reference_logprobs" in item for item in items):  # precomputed (DPO's precompute_ref_log_probs)
        batch["reference_logprobs"] = torch.tensor([item["reference_logprobs"][side] for side in (0, 1)
                                                    for item in items], dtype=torch.float32)  # 2B
    return batch


def collate_sequences(sides: list, pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-padded sequences (M,L), their attention mask and response mask (M,L: 1 on response tokens). A side:
    (ids, prompt length), (ids, a 0/1 mask per id), or a bare id list (all response)."""
    sides = [side if isinstance(side, tuple) else (side, 0) for side in sides]
    sequences = [ids for ids, _ in sides]
    width = max(map(len, sequences))
    input_ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)  # 2B,L
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)  # 2B,L
    response_mask = torch.zeros((len(sequences), width), dtype=torch.long)  # 2B,L
    for i, (ids, response) in enumerate(sides):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention_mask[i, : len(ids)] = 1
        if isinstance(response, int):  # the prompt's length
            response_mask[i, response : len(ids)] = 1
        else:
            response_mask[i, : len(ids)] = torch.tensor(response)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "response_mask": response_mask}
