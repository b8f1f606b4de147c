"""train_dpo.py's algo.precompute_ref_log_probs (TRL's): the reference scores every pair once before the first step
and a full fine-tune's frozen copy is freed; the fit trains what the fit without it trains, and resumes."""

import functools

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_rlhf.algos.dpo import DPOModule
from lit_rlhf.data.preference_datamodule import PreferenceDataModule
from lit_rlhf.errors import ConfigError
from tests.algos.test_reward_model import separable_pairs
from tests.conftest import TINY_PYTHIA

pytestmark = pytest.mark.integration  # runs a Trainer


def make(**settings):
    return DPOModule(model={"name_or_path": TINY_PYTHIA, "lora": None},
                     optimizer=functools.partial(torch.optim.AdamW, lr=1e-3), **settings)


def pairs(tmp_path):
    return PreferenceDataModule(tokenizer=TINY_PYTHIA, dataset=separable_pairs(tmp_path / "pairs.jsonl", n=40),
                                batch_size=8, num_eval_pairs=8)


def fit(module, data, steps, **kwargs):
    settings = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    accelerator="cpu", num_sanity_val_steps=0)
    trainer = L.Trainer(max_steps=steps, **{**settings, **kwargs.pop("trainer", {})})
    trainer.fit(module, data, **kwargs)
    return trainer


def test_a_precomputed_reference_trains_what_the_reference_forward_trains_and_is_freed(tmp_path):
    L.seed_everything(0)
    plain, plain_data = make(), pairs(tmp_path)
    plain_trainer = fit(plain, plain_data, 3)
    L.seed_everything(0)
    precomputed, data = make(precompute_ref_log_probs=True, precompute_ref_batch_size=5), pairs(tmp_path)
    trainer = fit(precomputed, data, 3)
    assert precomputed.frozen_reference is None and precomputed.reference is None
    assert not any(key.startswith("frozen_reference.") for key in precomputed.state_dict())
    assert all("reference_logprobs" in item for item in data.train_pairs + data.eval_pairs)
    for got, expected in zip(precomputed.policy.parameters(), plain.policy.parameters(), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    # the held-out pairs were scored too: their figures after training are the plain fit's
    held_out = [t.validate(m, d, verbose=False)[0] for t, m, d in ((trainer, precomputed, data),
                                                                  (plain_trainer, plain, plain_data))]
    assert held_out[0]["eval/loss"] == pytest.approx(held_out[1]["eval/loss"], rel=1e-5)
    assert held_out[0]["eval/rewards/margins"] != 0


def test_a_fit_that_freed_its_reference_resumes_from_its_checkpoint(tmp_path):
    L.seed_everything(0)
    whole = make(precompute_ref_log_probs=True)
    saver = ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=2, save_top_k=-1)
    fit(whole, pairs(tmp_path), 3, trainer={"enable_checkpointing": True, "callbacks": [saver],
                                            "limit_val_batches": 0})
    saved = torch.load(tmp_path / "ckpts" / "epoch=0-step=2.ckpt", weights_only=True)["state_dict"]
    assert not any(key.startswith("frozen_reference.") for key in saved)  # freed: the model's files hold it
    L.seed_everything(0)
    resumed = make(precompute_ref_log_probs=True)
    fit(resumed, pairs(tmp_path), 3, ckpt_path=tmp_path / "ckpts" / "epoch=0-step=2.ckpt",
        trainer={"limit_val_batches": 0})
    for got, expected in zip(resumed.policy.parameters(), whole.policy.parameters(), strict=True):
        assert torch.equal(got, expected)


def test_values_another_module_left_on_the_pairs_are_not_read_without_the_setting(tmp_path):
    """A data module whose pairs a precomputing fit scored, reused by a fit with another reference sum (ld_alpha): its
    first step scores its own reference (rewards 0 against itself), not the values left on the pairs."""
    data = pairs(tmp_path)
    fit(make(precompute_ref_log_probs=True), data, 1, trainer={"limit_val_batches": 0})
    other = make(ld_alpha=0.3)
    trainer = fit(other, data, 1, trainer={"limit_val_batches": 0})
    assert float(trainer.callback_metrics["rewards/chosen"]) == 0.0


def test_it_cannot_score_a_reference_that_moves():
    with pytest.raises(ConfigError, match=r"^algo.precompute_ref_log_probs=true scores a fixed reference once, and "
                                          r"algo.sync_ref_model=true moves it"):
        make(precompute_ref_log_probs=True, sync_ref_model=True)


def test_ddp_is_told_to_leave_the_frozen_copy_it_would_otherwise_hold_after_the_pass_frees_it():
    module = make(precompute_ref_log_probs=True)
    module.configure_model()
    frozen = {f"frozen_reference.{name}" for name, _ in module.frozen_reference.named_parameters()}
    assert frozen and frozen <= set(module._ddp_params_and_buffers_to_ignore)
    plain = make()
    plain.configure_model()
    assert not getattr(plain, "_ddp_params_and_buffers_to_ignore", [])  # a reference kept for the run: DDP's as before
