"""The overrides the apps print for the user to paste: one shell word each, which Hydra reads back as the value."""

import shlex

import pytest
from hydra import compose, initialize_config_dir

from lit_rlhf.config.command_line import override

AWKWARD = [
    "/home/me/My Drive (2024), runs/a",  # Hydra reads ( as a call and , as a sweep
    "/home/jürgen/runs",  # non-ASCII: a token error unquoted
    "/runs/it's", "/runs/a\"b", "C:\\runs\\", "/runs/a\\'b", "/runs/\\\\x",  # quotes and backslashes
    "/runs/${oops}", "/runs/\\${oops}",  # a literal ${, not an interpolation
    "/runs/a#b", "/runs/a=b", "/runs/a;b", "/runs/a&b", "/runs/~b", " leading", "trailing ",  # grammar and edges
    "true", "1", "null", "[a]",  # would be read as a bool, a number, None and a list
    "$(touch pwned)", "`touch pwned`", "x; touch pwned", "!!",  # a folder's own text is no command
]


@pytest.fixture(scope="module")
def composed(tmp_path_factory):
    """compose(overrides=[word]).key for a word as the shell hands it over."""
    folder = tmp_path_factory.mktemp("conf")
    (folder / "c.yaml").write_text("key: 1\n")
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        yield lambda word: compose("c", overrides=shlex.split(word)).key


@pytest.mark.parametrize("value", AWKWARD)
def test_a_printed_override_is_one_shell_word_that_hydra_reads_back_as_the_value(value, composed):
    word = override("key", value)
    assert len(shlex.split(word)) == 1
    assert composed(word) == value


@pytest.mark.parametrize("value", ["logs/train/runs/2026-12-06_08-08-18", "/tmp/run dir/checkpoints/last.ckpt"])
def test_a_plain_path_is_printed_as_it_is(value, composed):
    """The common case stays readable: no quotes where neither the shell nor Hydra needs them (a space needs the
    shell's alone)."""
    word = override("ckpt_path", value)
    assert word == (f"ckpt_path={value}" if " " not in value else f'"ckpt_path={value}"')
    assert composed(word.replace("ckpt_path=", "key=")) == value


def test_where_double_quotes_suffice_the_word_is_written_as_hydras_docs_write_it():
    assert override("hydra.run.dir", "/home/me/My Drive (2024)") == "\"hydra.run.dir='/home/me/My Drive (2024)'\""
