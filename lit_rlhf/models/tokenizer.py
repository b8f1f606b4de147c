"""Tokenizer loading: left padding, and a pad token distinct from EOS."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from lit_rlhf.errors import ConfigError
from lit_rlhf.models.loading import from_pretrained
from lit_rlhf.terminal import clipped, printable

# Tokens some families already carry in their vocabulary for padding (pythia: <|padding|>).
KNOWN_PAD_TOKENS = ("<|padding|>", "<pad>", "[PAD]", "<|pad|>")


# Files a tokenizer is loaded from; a local model directory with none of them has no tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "tokenizer.model",
                   "spiece.model", "sentencepiece.bpe.model")
PROBE_TEXT = "The quick brown fox."


def tokenizer_source(spec: dict, group: str = "model") -> tuple[str, str]:
    """(where the tokenizer loads from, the setting that says so): `<group>.tokenizer_name_or_path` when it names
    another place than the model's own `<group>.name_or_path` (the configs default it to that), else the latter, so
    that an error names the key the user typed."""
    tokenizer = spec.get("tokenizer_name_or_path")
    if tokenizer and tokenizer != spec["name_or_path"]:
        return tokenizer, f"{group}.tokenizer_name_or_path"
    return spec["name_or_path"], f"{group}.name_or_path"


def load_model_tokenizer(spec: dict, group: str = "model") -> PreTrainedTokenizerBase:
    """load_tokenizer for a model's settings ({name_or_path, tokenizer_name_or_path, trust_remote_code, ...})."""
    name_or_path, key = tokenizer_source(spec, group)
    return load_tokenizer(name_or_path, spec.get("trust_remote_code", False), key)


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False,
                   key: str = "model.tokenizer_name_or_path") -> PreTrainedTokenizerBase:
    """The policy's tokenizer: left padding and a pad token distinct from EOS."""
    tokenizer = load_checked_tokenizer(name_or_path, trust_remote_code, key)
    tokenizer.padding_side = "left"  # generation continues from the last prompt token
    ensure_pad_token(tokenizer)
    return tokenizer


def load_checked_tokenizer(name_or_path: str, trust_remote_code: bool = False,
                           key: str = "model.tokenizer_name_or_path") -> PreTrainedTokenizerBase:
    """The tokenizer at name_or_path, refused in one line (naming `key`) when it has no files or
    encodes text to nothing."""
    path = Path(str(name_or_path))
    if path.is_dir() and not any((path / name).exists() for name in TOKENIZER_FILES):
        raise ConfigError(f"{path} has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...); set {key} to "
                          f"the directory or hub name of the model's tokenizer.")
    tokenizer = from_pretrained(AutoTokenizer.from_pretrained, name_or_path, "tokenizer", key=key, weights=False,
                                trust_remote_code=trust_remote_code)
    try:
        ids = tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"]
    except (TypeError, ValueError, KeyError, AttributeError) as err:  # e.g. tokenizer_config.json's model_max_length
        raise ConfigError(f"the tokenizer of {name_or_path!r} cannot encode text ({type(err).__name__}: "  # as text
                          f"{printable(clipped(err), one_line=True)}); check its tokenizer_config.json, or set {key} "
                          f"to the directory or hub name of the model's tokenizer.") from err
    if not ids:
        raise ConfigError(f"the tokenizer of {name_or_path!r} encodes text to no tokens; set {key} to the "
                          f"directory or hub name of the model's tokenizer.")
    return tokenizer


def ensure_pad_token(tokenizer: PreTrainedTokenizerBase) -> None:
    """Gives a tokenizer without a pad token (or whose pad is EOS) one distinct from EOS.

    Reuses a padding token already in the vocabulary when there is one; otherwise adds "<|pad|>",
    and the model's embeddings must then be resized (see `load_policy`).
    """
    if tokenizer.pad_token is not None and tokenizer.pad_token_id != tokenizer.eos_token_id:
        return
    known = known_pad_token(tokenizer)
    if known is not None:
        tokenizer.pad_token = known
        return
    tokenizer.add_special_tokens({"pad_token": "<|pad|>"})


def known_pad_token(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """A padding token already in the vocabulary, other than EOS, or None."""
    vocab = tokenizer.get_vocab()
    return next((t for t in KNOWN_PAD_TOKENS if t in vocab and vocab[t] != tokenizer.eos_token_id), None)


def token_id_differences(ours: PreTrainedTokenizerBase, theirs: PreTrainedTokenizerBase) -> tuple[list, list]:
    """(their tokens that have another id in ours, their tokens that ours lacks), each sorted: both empty when every
    id `theirs` encodes to means the same token to `ours` (ours may have more, e.g. an added pad token)."""
    if ours is theirs:
        return [], []
    own, other = ours.get_vocab(), theirs.get_vocab()
    return (sorted(token for token, i in other.items() if own.get(token, i) != i),
            sorted(token for token in other if token not in own))


def check_data_tokenizer(datamodule: object, tokenizer: PreTrainedTokenizerBase, model_spec: dict) -> None:
    """The data module encodes its rows with token ids that mean the same to the model's tokenizer: the model reads
    the data's ids as its own, and another tokenizer's are silently other words."""
    data_tokenizer = getattr(datamodule, "tokenizer", None)
    if data_tokenizer is None or tokenizer is None:
        return
    differ, missing = token_id_differences(tokenizer, data_tokenizer)
    if differ or missing:
        name, key = tokenizer_source(model_spec)
        data_key = getattr(datamodule, "tokenizer_key", "data.tokenizer")
        data_name = getattr(datamodule, "hparams", {}).get("tokenizer")
        raise ConfigError(f"{data_key}={data_name!r} encodes the data with other token ids than the model's tokenizer "
                          f"({key}={name!r}; e.g. token {(differ or missing)[0]!r}: {len(differ)} tokens with other "
                          f"ids, {len(missing)} it lacks); the model would read them as other tokens, so give the "
                          f"data the model's tokenizer ({data_key}={name!r}).")
