"""A reward with an injected latency, for bench/reward_overlap.py: VADER, answered after 0.5 s per call."""

import time

from lit_rlhf.models import VaderSentiment

VADER = VaderSentiment()


def vader_after_half_a_second(prompts, completions):
    time.sleep(0.5)
    return VADER(prompts, completions)
