"""token_id_differences: whether the ids one tokenizer encodes to mean the same tokens to another (the data module's
tokenizer and the model's: tests/algos/test_data_checks.py fits with them)."""

from lit_rlhf.assets import TINY_ARITHMETIC
from lit_rlhf.models.tokenizer import load_tokenizer, token_id_differences
from tests.conftest import TINY_PYTHIA


def test_token_id_differences_by_hand():
    pythia, again, arithmetic = (load_tokenizer(name) for name in (TINY_PYTHIA, TINY_PYTHIA, TINY_ARITHMETIC))
    assert token_id_differences(pythia, again) == ([], [])  # two loads of one tokenizer
    differ, missing = token_id_differences(pythia, arithmetic)
    assert differ and all(pythia.get_vocab()[t] != arithmetic.get_vocab()[t] for t in differ)
    assert missing == sorted(set(arithmetic.get_vocab()) - set(pythia.get_vocab()))
    again.add_special_tokens({"additional_special_tokens": ["<|extra|>"]})
    assert token_id_differences(again, pythia) == ([], [])  # the model may know more tokens than the data uses
    assert token_id_differences(pythia, again) == ([], ["<|extra|>"])  # the data may not use ids the model lacks
