"""An engine that plays scripted model turns through the real episode loop (RolloutEngine.sample), and small
environments for the tests."""

import time

from lit_rlhf.envs import Environment
from lit_rlhf.rollout import RolloutEngine


def odd_ids(tokenizer, text: str) -> list[int]:
    """text as one token per character: a segmentation the tokenizer itself would not produce."""
    return [i for char in text for i in tokenizer(char, add_special_tokens=False)["input_ids"]]


class ScriptedEngine(RolloutEngine):
    """Turn t of every episode is turns[t] (text, as odd_ids) plus the stop token and trailing junk, which the
    loop must cut; `stop=False` leaves the stop token out."""

    def __init__(self, turns: list[str], stop: bool = True):
        self.turns, self.stop, self.calls, self.turn = turns, stop, [], 0

    def begin(self, sampling, from_reference):
        self.turn = 0  # every rollout's episodes start at the script's first turn

    def generate_turn(self, sampling, contexts, max_new_tokens, from_reference, greedy):
        self.calls.append([list(c) for c in contexts])
        text = self.turns[min(self.turn, len(self.turns) - 1)]
        self.turn += 1
        ids = odd_ids(sampling.tokenizer, text) + ([sampling.stop_token_id] if self.stop else [])
        junk = [sampling.tokenizer.pad_token_id] * 3
        return [((ids + junk)[:max_new_tokens], None) for _ in contexts]


def echo(text: str) -> str:
    """Repeats its argument.

    Args:
        text: what to repeat
    """
    return f"echo:{text}"


def fail(text: str) -> str:
    """Always raises.

    Args:
        text: ignored
    """
    raise RuntimeError("the tool broke")


def hang(text: str) -> str:
    """Sleeps past any timeout.

    Args:
        text: ignored
    """
    time.sleep(30)
    return "late"


def undocumented(text):
    return text


class EchoEnvironment(Environment):
    tools = [echo, fail, hang]


class CountingEnvironment(Environment):
    """No tools: answers every turn with a step() observation until the third turn; rewards the turn count."""

    def __init__(self, prompt_id: int = 0):
        self.turns = 0

    def step(self, text):
        self.turns += 1
        return (" next", False) if self.turns < 3 else (None, True)

    def reward(self):
        return float(self.turns)


class NeedsAnswer(Environment):
    def __init__(self, answer: str):
        self.answer = answer


class Exploding(Environment):
    def __init__(self):
        raise RuntimeError("boom")


class BadReward(Environment):
    def reward(self):
        raise KeyError("score")


def huge(text: str) -> str:
    """Returns megabytes of text.

    Args:
        text: ignored
    """
    return "x" * 5_000_000


def quits(text: str) -> str:
    """Ends the process, if it were let.

    Args:
        text: SystemExit or KeyboardInterrupt
    """
    raise SystemExit(0) if text == "exit" else KeyboardInterrupt()


class Unprintable:
    def __str__(self):
        raise ValueError("no text for you")


def unprintable(text: str) -> Unprintable:
    """Returns a result whose str() raises.

    Args:
        text: ignored
    """
    return Unprintable()


class HostileEnvironment(Environment):
    tools = [huge, quits, unprintable, hang, echo]


class HugeStepEnvironment(Environment):
    """No tools: step() answers with megabytes of text."""

    def step(self, text):
        return "y" * 5_000_000, False


class NumberStepEnvironment(Environment):
    def step(self, text):
        return 42, False


class InFlight:
    """Counts tool calls running at once; each call waits (up to 2 s) for `expect` calls to be in flight together."""

    def __init__(self, expect: int):
        import threading

        self.expect, self.now, self.most = expect, 0, 0
        self.lock, self.all_in = threading.Lock(), threading.Event()

    def call(self) -> str:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            if self.now >= self.expect:
                self.all_in.set()
        self.all_in.wait(2.0)
        with self.lock:
            self.now -= 1
        return "ok"


IN_FLIGHT = InFlight(1)


def wait_together(text: str) -> str:
    """Joins the calls in flight.

    Args:
        text: ignored
    """
    return IN_FLIGHT.call()


async def async_echo(text: str) -> str:
    """Repeats its argument, asynchronously.

    Args:
        text: what to repeat
    """
    import asyncio

    await asyncio.sleep(0.01)
    return f"async:{text}"


class ConcurrentEnvironment(Environment):
    tools = [wait_together, async_echo]


class AsyncStepEnvironment(Environment):
    async def step(self, text):
        import asyncio

        await asyncio.sleep(0.01)
        return " awaited", False
