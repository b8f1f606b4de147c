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
