"""typed_key: the key a value was typed at, followed through the configs' interpolations, for errors to name."""

from omegaconf import OmegaConf

from lit_rlhf.cli.checks import typed_key


def config(**model):
    data = {"tokenizer": "${model.tokenizer_name_or_path}", "nested": {"up": "${..tokenizer}"}}
    return OmegaConf.create({"model": {"name_or_path": "x", "tokenizer_name_or_path": "${.name_or_path}", **model},
                             "data": data, "env_dir": "${oc.env:HOME}", "loop": {"a": "${.b}", "b": "${.a}"}})


def test_an_interpolation_is_followed_to_the_key_that_sets_it():
    assert typed_key(config(), "data.tokenizer") == "model.name_or_path"  # data. -> model.tokenizer_... -> model.
    assert typed_key(config(), "data.nested.up") == "model.name_or_path"  # ${..x}: one level up
    assert typed_key(config(tokenizer_name_or_path="tok"), "data.tokenizer") == "model.tokenizer_name_or_path"
    assert typed_key(config(), "model.name_or_path") == "model.name_or_path"  # set where it is


def test_a_resolver_an_absent_key_or_a_cycle_names_the_key_itself():
    assert typed_key(config(), "env_dir") == "env_dir"
    assert typed_key(config(), "data.absent") == "data.absent"
    assert typed_key(config(), "loop.a") in ("loop.a", "loop.b")  # stops, whichever it ends on
