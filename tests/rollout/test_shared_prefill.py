"""The K samples of a prompt share one prefill (rollout.shared_prefill): the distinct prompts run through the model
once, and the samples are those of K separate prefills under the same seed."""

import pytest
import torch

from lit_rlhf.rollout import HFEngine
from lit_rlhf.rollout.hf import sibling_count
from tests.conftest import make_datamodule, make_rloo


def test_sibling_count_finds_groups_of_adjacent_identical_contexts():
    assert sibling_count([[1, 2]] * 4 + [[3]] * 4) == 4
    assert sibling_count([[1, 2], [1, 2], [3], [4]]) == 1  # groups of unequal sizes
    assert sibling_count([[1], [2], [3]]) == 1
    assert sibling_count([[1], [1], [1]]) == 3  # one prompt
    assert sibling_count([[5], [5], [5], [5], [6], [7], [6], [7]]) == 1


def prompt_batch(module):
    datamodule = make_datamodule(batch_size=4)
    datamodule.setup()
    return next(iter(datamodule.train_dataloader()))


@pytest.mark.parametrize("from_reference", [False, True])
def test_shared_prefill_samples_what_separate_prefills_sample(from_reference):
    module = make_rloo(response_length=12)
    module.configure_model()
    batch = prompt_batch(module)
    assert (batch["attention_mask"] == 0).any()  # left-padded prompts of mixed widths
    drawn = {}
    for shared in (True, False):
        module.rollout_engine = HFEngine(shared_prefill=shared)
        module.rollout_engine.setup(module.sampler.context)
        torch.manual_seed(0)
        drawn[shared] = module.rollout_engine.sample(module.sampler.context, batch, samples_per_prompt=4,
                                                     from_reference=from_reference)
    assert torch.equal(drawn[True].responses, drawn[False].responses)
    assert torch.equal(drawn[True].response_mask, drawn[False].response_mask)


def test_the_prefill_runs_each_distinct_prompt_once():
    module = make_rloo(response_length=4)
    module.configure_model()
    batch = prompt_batch(module)
    module.rollout_engine.setup(module.sampler.context)
    rows = []
    hook = module.policy.get_input_embeddings().register_forward_hook(lambda m, args, out: rows.append(out.shape))
    try:
        module.rollout_engine.sample(module.sampler.context, batch, samples_per_prompt=4)
    finally:
        hook.remove()
    width = batch["input_ids"].shape[1]
    assert rows[0] == (4, width - 1, rows[0][2])  # the 4 distinct prompts, but their last token
    assert all(shape[:2] == (16, 1) for shape in rows[1:])  # then one token per step for the 16 samples
