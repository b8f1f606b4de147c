"""Host reads in an RL step: on a GPU each read of a device tensor by the host (.item(), float(), int(), bool(),
.tolist()) waits for all the work queued before it. An RL step makes a fixed number of them, whatever the batch,
the response length or the number of statistics: none per decoding step, per sequence or per statistic; the
statistics come back in one transfer and the update reads once per optimizer step (whether the step is finite).

Counted on the CPU by wrapping torch.Tensor's reading methods and keeping the calls made by lit_rlhf's own code
(calls inside torch, transformers or Lightning are theirs), during the second RL step of a run."""

import collections
import os
import sys

import lightning as L
import pytest
import torch

import lit_rlhf
from tests.conftest import make_datamodule, make_ppo, make_rloo

pytestmark = pytest.mark.integration  # runs a Trainer or an app

READS = ("item", "__float__", "__int__", "__bool__", "tolist", "__index__")
PACKAGE = os.path.dirname(lit_rlhf.__file__)

# RLOO's reads, by the function that makes them (sampling with plain generate() on the CPU)
RLOO_READS = {
    "run_episodes": 1,  # the prompts' tokens, to build each episode's context
    "generate_turn": 1,  # the sampled tokens, which the reward reads as text
    "check": 1,  # the sampler's finiteness flag, once after generate()
    "episode_rows": 1, "sequence_columns": 1,  # the prompt index, to give each sequence its dataset row
    "checked_scores": 1,  # the reward's scores, made on the host (not a device read on a GPU)
    "warn_of_unscored": 1,  # whether a completion no reward scored (each returned None): the same host-made scores
    "pack": 2,  # the masks, to plan each padding-free forward (the policy's and the reference's)
    "leave_one_out_baseline": 2, "group_all_equal": 1, "group_stats": 1,  # the number of prompts, a group check
    "all_finite": 1,  # whether the optimizer step's loss and gradients are finite
    "host_values": 1,  # every statistic of the step, in one transfer
}


class ReadCounter(L.Callback):
    """Counts lit_rlhf's reads of tensors during RL step `step` (by the name of the function that reads)."""

    def __init__(self, step: int = 1):
        self.step, self.counting, self.reads = step, False, collections.Counter()

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.counting = module.rl_step == self.step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.counting = False

    def record(self) -> None:
        if self.counting:
            caller = sys._getframe(2)
            if caller.f_code.co_filename.startswith(PACKAGE):
                self.reads[caller.f_code.co_name] += 1


@pytest.fixture
def counter(monkeypatch):
    counter = ReadCounter()
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(tensor, *args, _original=original, **kwargs):
            counter.record()
            return _original(tensor, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return counter


def reads_in_one_step(module, counter: ReadCounter, **data) -> dict[str, int]:
    L.seed_everything(0)
    counter.reads.clear()
    updates = module.hparams.num_ppo_epochs * module.hparams.num_mini_batches
    L.Trainer(max_steps=2 * updates, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, limit_val_batches=0, callbacks=[counter]).fit(module,
                                                                                     make_datamodule(**data))
    return dict(counter.reads)


def test_an_rloo_step_reads_the_same_few_times_whatever_the_batch_and_length(counter):
    assert reads_in_one_step(make_rloo(), counter) == RLOO_READS
    # twice the prompts, four times the samples each sequence's length: the same reads
    assert reads_in_one_step(make_rloo(response_length=32, rloo_k=2), counter, batch_size=8) == RLOO_READS


def test_a_ppo_step_reads_once_per_optimizer_step_and_its_statistics_once(counter):
    module = make_ppo(num_ppo_epochs=2, num_mini_batches=2)
    reads = reads_in_one_step(module, counter)
    assert reads["all_finite"] == 4 and reads["host_values"] == 1
    assert reads["generate_turn"] == 1 and reads["check"] == 1
    assert sum(reads.values()) <= 16, reads
