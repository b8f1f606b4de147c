"""Tokenizer loading: left padding, and a pad token distinct from EOS."""

from __future__ import annotations

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from lit_rlhf.models.loading import from_pretrained

# Tokens some families already carry in their vocabulary for padding (pythia: <|padding|>).
KNOWN_PAD_TOKENS = ("<|padding|>", "<pad>", "[PAD]", "<|pad|>")


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    tokenizer = from_pretrained(AutoTokenizer.from_pretrained, name_or_path, "tokenizer",
                                trust_remote_code=trust_remote_code)
    tokenizer.padding_side = "left"  # generation continues from the last prompt token
    ensure_pad_token(tokenizer)
    return tokenizer


def ensure_pad_token(tokenizer: PreTrainedTokenizerBase) -> None:
    """Gives a tokenizer without a pad token (or whose pad is EOS) one distinct from EOS.

    Reuses a padding token already in the vocabulary when there is one; otherwise adds "<|pad|>",
    and the model's embeddings must then be resized (see `load_policy`).
    """
    if tokenizer.pad_token is not None and tokenizer.pad_token_id != tokenizer.eos_token_id:
        return
    vocab = tokenizer.get_vocab()
    for token in KNOWN_PAD_TOKENS:
        if token in vocab and vocab[token] != tokenizer.eos_token_id:
            tokenizer.pad_token = token
            return
    tokenizer.add_special_tokens({"pad_token": "<|pad|>"})
