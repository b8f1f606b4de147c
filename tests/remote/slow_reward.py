"""A reward that takes a while, served in tests (`reward._target_=tests.remote.slow_reward.length_after_2s`)."""

import time


def length_after_2s(prompts, completions):
    time.sleep(2.0)
    return [float(len(c)) for c in completions]
