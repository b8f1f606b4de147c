"""Rows of supervised fine-tuning without a prompt column: plain text (a `text` column, TRL's language-modeling
format: every token trained on, the tokenizer's EOS appended) and conversations.

Conversations: a row's `messages` (TRL's conversational language-modeling format,
[{"role": ..., "content": ...}, ...]) rendered once by the tokenizer's chat template, and trained on its assistant
turns only (each turn's text and the end-of-turn tokens the template writes after it); the system and user turns,
and each assistant turn's header, are context.

The assistant spans are found in the rendered text: the conversation up to an assistant turn, rendered with the
template's generation prompt, must be where the conversation that includes the turn begins (true of templates that
render each turn the same whatever follows it); a template that rewrites earlier turns is refused in one line."""

from __future__ import annotations

from typing import Any

from lit_rlhf.data.sources import chat_messages
from lit_rlhf.errors import ConfigError

MESSAGES_COLUMN = "messages"
TEXT_COLUMN = "text"


def text_item(tokenizer: Any, text: Any, where: str, max_length: int) -> tuple[list[int], list[int]]:
    """(ids, mask) of a plain text, every token trained on: its first max_length tokens, the tokenizer's EOS appended
    (as to a plain-text completion) unless the text ends with it."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where}: {TEXT_COLUMN!r} is {text!r}, not a non-empty text; fix or remove the row.")
    eos = getattr(tokenizer, "eos_token", None)
    ids = tokenizer(text + (eos if eos and not text.endswith(eos) else ""))["input_ids"][:max_length]
    if len(ids) < 2:  # the first token has no token before it to be predicted from
        raise ConfigError(f"{where}: {TEXT_COLUMN!r} encodes to {len(ids)} token, nothing to train on; remove the row.")
    return ids, [1] * len(ids)


def rendered(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def assistant_spans(tokenizer: Any, messages: list[dict[str, str]], where: str) -> tuple[str, list[tuple[int, int]]]:
    """The whole conversation's text and the (start, end) characters of each assistant turn in it."""
    text, spans = rendered(tokenizer, messages, generation_prompt=False), []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = rendered(tokenizer, messages[:i], generation_prompt=True) if i else ""
        through = rendered(tokenizer, messages[: i + 1], generation_prompt=False)
        if not through.startswith(before) or not text.startswith(through):
            raise ConfigError(f"{where}: the chat template renders the turns before assistant turn {i + 1} otherwise "
                              f"once it follows them, so its tokens cannot be told apart; give the rows as "
                              f"prompt/completion columns, or as input_ids with a completion_mask.")
        spans.append((len(before), len(through)))
    return text, spans


def conversation_item(tokenizer: Any, messages: Any, where: str, max_length: int) -> tuple[list[int], list[int]]:
    """(ids, mask) of a conversation: 1 on the tokens of its assistant turns, the first max_length tokens."""
    if not chat_messages(messages):
        raise ConfigError(f"{where}: {MESSAGES_COLUMN!r} is {type(messages).__name__}, not a list of chat messages "
                          f"({{\"role\": ..., \"content\": ...}}); fix that row.")
    if not any(m["role"] == "assistant" for m in messages):
        raise ConfigError(f"{where}: the conversation has no assistant turn to train on; remove the row.")
    if getattr(tokenizer, "chat_template", None) is None:
        raise ConfigError(f"{where} holds chat messages and the tokenizer has no chat template; give a tokenizer "
                          f"with one (data.tokenizer).")
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(f"{where}: conversations need a fast tokenizer (its character offsets place the assistant "
                          f"turns); give one with a tokenizer.json (data.tokenizer).")
    text, spans = assistant_spans(tokenizer, messages, where)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(start <= first < end for start, end in spans)) for first, _ in encoded["offset_mapping"]]
    ids, mask = encoded["input_ids"][:max_length], mask[:max_length]
    if not any(mask[1:]):  # the first token has no token before it to be predicted from
        raise ConfigError(f"{where}: no assistant token within data.max_length={max_length}; raise data.max_length "
                          f"or remove the row.")
    return ids, mask
