"""Rewards with an injected latency: VADER after 0.5 s per call (bench/reward_overlap.py), the calculator task's after
0.2 s (bench/async_overlap.py)."""

import time

from lit_rlhf.rewards import VaderSentiment
from lit_rlhf.tasks.arithmetic import ArithmeticCorrect

VADER = VaderSentiment()


def vader_after_half_a_second(prompts, completions):
    time.sleep(0.5)
    return VADER(prompts, completions)


ARITHMETIC = ArithmeticCorrect()


def arithmetic_after_200ms(prompts, completions, answer):
    """The calculator task's reward (the final answer equals the row's), answered after 0.2 s per call."""
    time.sleep(0.2)
    return ARITHMETIC(prompts, completions, answer)
