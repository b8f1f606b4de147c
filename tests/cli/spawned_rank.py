"""What a spawned rank runs in tests/cli/test_spawned_rank_errors.py (a small module: the rank imports it)."""

from lit_rlhf.errors import ConfigError


def raise_in_rank(rank: int, kind: str) -> None:
    if kind == "config":
        raise ConfigError("the reward correct needs the dataset column 'answer', which the prompts' rows do not have")
    raise ValueError("a bug of the reward's own")
