"""A reward that waits on something (waits = True) is scored while the step's reference and old-logprob forwards
run; the step's timings show it (time/reward_s, time/reward_wait_s)."""

import threading

import lightning as L
import pytest

from lit_rlhf.rewards import VaderSentiment
from tests.conftest import make_datamodule, make_rloo

pytestmark = pytest.mark.integration  # runs a Trainer or an app


class WaitsForTheReference:
    """Scores like VADER once the reference forward of the same step has started (or after a timeout): records
    whether that forward started while it waited. The forward waits until the reward was entered, so the order
    in which the two threads start does not matter."""

    def __init__(self, waits: bool):
        self.waits, self.overlapped, self.forwards = waits, [], 0
        self.changed, self.entered = threading.Condition(), threading.Event()
        self.vader = VaderSentiment()

    def __call__(self, prompts, completions):
        with self.changed:
            start = self.forwards
            self.entered.set()
            self.overlapped.append(self.changed.wait_for(lambda: self.forwards > start,
                                                         timeout=30.0 if self.waits else 1.0))
        return self.vader(prompts, completions)

    def reference_forward_starts(self) -> None:
        self.entered.wait(timeout=30.0)
        self.entered.clear()
        with self.changed:
            self.forwards += 1
            self.changed.notify_all()


def fit(reward, steps=2, before_reference=None):
    module = make_rloo(reward=reward, kl_coef=0.05)
    reference_logprobs = module.reference_logprobs

    def marked(*args):
        if before_reference is not None:
            before_reference()
        return reference_logprobs(*args)

    module.reference_logprobs = marked
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    trainer.fit(module, make_datamodule())
    return module


@pytest.mark.parametrize("waits", [True, False])
def test_a_waiting_reward_runs_during_the_forwards_and_an_in_process_one_before_them(waits):
    reward = WaitsForTheReference(waits)
    module = fit(reward, before_reference=reward.reference_forward_starts)
    assert reward.overlapped == [waits, waits]
    timings = {k: v for k, v in module.last_stats.items() if k.startswith("time/")}
    assert set(timings) == {"time/reward_s", "time/reward_wait_s", "time/step_s"}
    if waits:  # the step waited for less than the reward took (the forward ran meanwhile)
        assert 0 <= timings["time/reward_wait_s"] < timings["time/reward_s"]
    else:  # the step waited for all of it
        assert timings["time/reward_wait_s"] == timings["time/reward_s"] >= 1.0


def test_overlapped_and_serial_scoring_train_the_same_weights():
    import torch

    torch.manual_seed(0)
    serial = fit(VaderSentiment())
    overlapping = VaderSentiment()
    overlapping.waits = True
    torch.manual_seed(0)
    overlapped = fit(overlapping)
    for (name, a), b in zip(serial.policy.named_parameters(), overlapped.policy.parameters(), strict=True):
        assert torch.equal(a, b), name
