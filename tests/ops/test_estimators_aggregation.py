"""The estimator seam, against hand values."""

import functools
from types import SimpleNamespace

import lightning as L
import pytest
import torch

from lit_rlhf.estimators import ESTIMATORS, EstimatorInputs
from lit_rlhf.ops import masked_mean
from tests.conftest import make_datamodule, make_rloo


def test_leave_one_out_estimator_by_hand():
    inputs = EstimatorInputs(scores=torch.tensor([1.0, 3.0, 0.0, 2.0]), non_score_reward=torch.zeros(4, 2),
                             response_mask=torch.ones(4, 2, dtype=torch.bool), prompt_index=torch.tensor([0, 0, 1, 1]))
    settings = SimpleNamespace(kl_penalty="sequence", normalize_advantage=False)
    estimate = ESTIMATORS["loo"](inputs, settings)
    assert estimate.advantages[:, 0].tolist() == [1 - 3, 3 - 1, 0 - 2, 2 - 0]


@pytest.mark.integration
def test_an_update_that_is_not_a_clipped_surrogate_reuses_the_rollout():
    """A REINFORCE loss (-A * logp, token mean) in a subclass: the rollout, estimator and loop are reused."""

    class Reinforce(type(make_rloo())):
        def policy_loss(self, new_logprobs, entropy, rollout, advantages, idx, share):
            mask = rollout.response_mask[idx]
            loss = masked_mean(-advantages[idx] * new_logprobs, mask)
            return loss, {"loss/policy_avg": loss}

    module = make_rloo(optimizer=functools.partial(torch.optim.SGD, lr=0.1))
    module.__class__ = Reinforce
    module.configure_model()
    before = {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    trainer.fit(module, make_datamodule())
    assert module.last_stats["loss/policy_avg"] != 0
    assert before and any(not torch.equal(p, before[n]) for n, p in module.named_parameters() if n in before)
