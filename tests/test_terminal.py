"""Messages quoted inside an error line: one line, cut where a reader can see the cut."""

import pytest

from lit_rlhf.errors import ConfigError
from lit_rlhf.rollout.scoring import call_checked
from lit_rlhf.terminal import clipped, clipped_first_line

LONG = ("Failed to import from vllm._C with ModuleNotFoundError(\"No module named 'torchvision'\") while inspecting "
        "the model class Gemma3ForConditionalGeneration, which vLLM needs to decide whether it can serve it, and a "
        "great deal more that follows")


def test_a_short_message_stays_whole_on_one_line():
    assert clipped("  a\n  message\twith   runs of\nspace ") == "a message with runs of space"


def test_a_long_message_is_cut_after_its_last_whole_word_and_marked():
    text = clipped(LONG, limit=80)
    assert text.endswith(" ...") and len(text) <= 80 + len(" ...")
    kept = text.removesuffix(" ...").split(" ")
    words = LONG.split(" ")
    assert kept == words[:len(kept)]  # every kept word whole, none skipped
    assert len(" ".join(words[:len(kept) + 1])) > 80  # and as many as fit


def test_a_word_longer_than_the_limit_is_cut_inside_it():
    path = "/data/" + "x" * 300 + " is missing"
    assert clipped(path, limit=50) == path[:50] + " ..."


def test_the_first_line_of_an_error_is_what_is_quoted():
    assert clipped_first_line(ValueError("bad shape\nTraceback (most recent call last): ...")) == "bad shape"
    assert clipped_first_line(ValueError(""), default="ValueError") == "ValueError"
    assert clipped_first_line(ValueError(LONG), limit=60).endswith(" ...")


def test_a_reward_that_raises_a_long_message_is_one_line_that_shows_the_cut():
    def verbose(prompts, completions, **kwargs):
        raise ValueError(LONG)

    with pytest.raises(ConfigError) as raised:
        call_checked("verbose", verbose, ["a prompt"], ["a completion"], None)
    line = str(raised.value)
    assert "\n" not in line
    assert "raised ValueError: Failed to import from vllm._C" in line
    assert "whether it can ... on prompt 'a prompt'; fix the reward" in line


@pytest.mark.parametrize("text, shown", [
    ("reward.url=http://alice:s3cr3t@host:8000/score", "reward.url=http://alice:***@host:8000/score"),
    # a sweep job's overrides, as Hydra writes them (its colons escaped)
    ("reward.url=http\\://alice\\:s3cr3t@host\\:8000/score", "reward.url=http\\://alice\\:***@host\\:8000/score"),
    ("https://host:8000/score", "https://host:8000/score"),  # no userinfo: nothing to mask
])
def test_a_urls_password_is_masked_as_typed_and_as_a_sweep_saves_it(text, shown):
    from lit_rlhf.terminal import without_passwords

    assert without_passwords(text) == shown


@pytest.mark.parametrize("text, shown", [
    ("reward.auth_env=sk-live-4f9a", "reward.auth_env=***"),  # an override
    ("  auth_env: sk-live-4f9a", "  auth_env: ***"),  # a saved config.yaml
    ("  api_key_env: 'sk:live'", "  api_key_env: '***'"),
    ("teacher.auth_env=ab\\:cd\\,ef,reward=http", "teacher.auth_env=***,reward=http"),  # Hydra's override_dirname
    ("reward.auth_env=MY_TOKEN", "reward.auth_env=MY_TOKEN"),  # a variable's name is what the setting holds
    ("(e.g. reward.auth_env=MY_TOKEN), not", "(e.g. reward.auth_env=MY_TOKEN), not"),
    ("  auth_env: null", "  auth_env: null"),
    ("set auth_env=<a variable holding a token> (clients", "set auth_env=<a variable holding a token> (clients"),
])
def test_a_token_typed_as_a_token_settings_value_is_masked_and_a_variable_name_is_not(text, shown):
    from lit_rlhf.terminal import without_passwords

    assert without_passwords(text) == shown
