"""train_dpo.py's algo.sync_ref_model (TRL's DPOConfig, TR-DPO): every ref_model_sync_steps optimizer steps the
reference becomes alpha x policy + (1 - alpha) x reference, right after the step (before a checkpoint of it is
written), counted in optimizer steps under gradient accumulation; LoRA's reference is an adapter reset to the trained
one."""

import functools

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lit_rlhf.algos.dpo import DPOModule
from lit_rlhf.data.preference_datamodule import PreferenceDataModule
from lit_rlhf.errors import ConfigError
from tests.algos.test_reward_model import separable_pairs
from tests.conftest import LORA, TINY_PYTHIA

pytestmark = pytest.mark.integration  # runs a Trainer


def make(lora=None, **settings):
    return DPOModule(model={"name_or_path": TINY_PYTHIA, "lora": lora},
                     optimizer=functools.partial(torch.optim.AdamW, lr=1e-2), **settings)


def pairs(tmp_path):
    return PreferenceDataModule(tokenizer=TINY_PYTHIA, dataset=separable_pairs(tmp_path / "pairs.jsonl", n=72),
                                batch_size=8, num_eval_pairs=8)


def trainer(steps, **kwargs):
    settings = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    limit_val_batches=0, accelerator="cpu")
    return L.Trainer(max_steps=steps, **{**settings, **kwargs})


def parameters(model):
    return [p.detach().clone() for p in model.parameters()]


class RewardsPerBatch(Callback):
    """rewards/chosen and rewards/rejected as each training batch logged them (beta x the log-ratio to the reference
    before that batch's update), and whether the reference moved during each batch."""

    def __init__(self):
        self.rewards, self.moved, self.before = [], [], None

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.before = parameters(module.frozen_reference)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        metrics = trainer.callback_metrics
        self.rewards.append((float(metrics["rewards/chosen"]), float(metrics["rewards/rejected"])))
        self.moved.append(any(not torch.equal(a, b) for a, b in zip(self.before, parameters(module.frozen_reference),
                                                                     strict=True)))


def test_alpha_one_makes_every_next_batch_start_from_its_reference_and_alpha_0_6_is_trl_s_mix(tmp_path):
    L.seed_everything(0)
    copied, seen = make(sync_ref_model=True, ref_model_mixup_alpha=1.0, ref_model_sync_steps=1), RewardsPerBatch()
    trainer(3, callbacks=[seen]).fit(copied, pairs(tmp_path))
    assert seen.rewards == [(0.0, 0.0)] * 3  # each batch scored by a reference equal to the policy
    assert all(torch.equal(r, p) for r, p in zip(copied.frozen_reference.parameters(), copied.policy.parameters(),
                                                  strict=True))
    L.seed_everything(0)
    fixed, seen = make(), RewardsPerBatch()
    trainer(3, callbacks=[seen]).fit(fixed, pairs(tmp_path))
    assert seen.rewards[0] == (0.0, 0.0) and all(chosen != 0 for chosen, _ in seen.rewards[1:])
    L.seed_everything(0)
    mixed = make(sync_ref_model=True, ref_model_mixup_alpha=0.6, ref_model_sync_steps=1)
    mixed.configure_model()
    start = parameters(mixed.frozen_reference)
    trainer(1).fit(mixed, pairs(tmp_path))
    for reference, policy, initial in zip(mixed.frozen_reference.parameters(), mixed.policy.parameters(), start,
                                          strict=True):
        assert torch.equal(reference.detach(), initial.mul(0.4).add_(policy.detach(), alpha=0.6))  # TRL's line


def test_it_moves_after_every_second_optimizer_step_counted_under_gradient_accumulation(tmp_path):
    L.seed_everything(0)
    module, seen = make(sync_ref_model=True, ref_model_sync_steps=2), RewardsPerBatch()
    trainer(3, accumulate_grad_batches=2, callbacks=[seen]).fit(module, pairs(tmp_path))
    assert seen.moved == [False, False, False, True, False, False]  # 6 batches, 3 optimizer steps: after the 2nd


def test_a_checkpoint_written_at_a_sync_step_holds_the_moved_reference_and_resumes_exactly(tmp_path):
    """ModelCheckpoint writes in on_train_batch_end, after the module's optimizer_step: a resume from step 2 (a sync
    step) trains step 3 exactly as the uninterrupted run does, its token count included."""
    settings = dict(sync_ref_model=True, ref_model_sync_steps=2)
    L.seed_everything(0)
    whole = make(**settings)
    saver = ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=2, save_top_k=-1)
    trainer(3, enable_checkpointing=True, callbacks=[saver]).fit(whole, pairs(tmp_path))
    L.seed_everything(0)
    resumed = make(**settings)
    trainer(3).fit(resumed, pairs(tmp_path), ckpt_path=tmp_path / "ckpts" / "epoch=0-step=2.ckpt")
    for got, expected in zip(resumed.state_dict().items(), whole.state_dict().items(), strict=True):
        assert got[0] == expected[0] and torch.equal(got[1], expected[1]), got[0]
    assert resumed.num_tokens == whole.num_tokens > 0  # TRL's num_tokens goes on from the checkpoint's count
    initial = make()
    initial.configure_model()
    assert any(not torch.equal(a, b) for a, b in zip(whole.frozen_reference.parameters(),
                                                      initial.frozen_reference.parameters(), strict=True))


def test_a_lora_reference_is_an_adapter_reset_to_the_trained_one(tmp_path):
    L.seed_everything(0)
    module = make(lora=LORA, sync_ref_model=True, ref_model_mixup_alpha=1.0, ref_model_sync_steps=2)
    trainer(3).fit(module, pairs(tmp_path))
    assert module.reference.kind == "reference_adapter"
    params = dict(module.policy.named_parameters())
    references = {name: p for name, p in params.items() if ".reference." in name}
    assert references and all(not p.requires_grad for p in references.values())
    trained = {name: params[name.replace(".reference.", ".default.")] for name in references}
    # reset after step 2, trained once more at step 3: the B matrices moved since, none of the reference's did
    assert all(t.requires_grad for t in trained.values())
    assert any(not torch.equal(references[name], trained[name]) for name in references if "lora_B" in name)
    assert any(references[name].abs().sum() > 0 for name in references if "lora_B" in name)  # not the base model


@pytest.mark.parametrize("settings, line", [
    ({"lora": LORA, "sync_ref_model": True}, r"^algo.sync_ref_model=true with LoRA and algo.ref_model_mixup_alpha=0.6: "
                                             r"a LoRA reference can only be reset to the policy"),
    ({"sync_ref_model": True, "ref_model_mixup_alpha": 1.5}, r"^algo.ref_model_mixup_alpha=1.5 must be in \(0, 1\]"),
    ({"sync_ref_model": True, "ref_model_sync_steps": 0}, r"^algo.ref_model_sync_steps=0 must be >= 1"),
    ({"sync_ref_model": "yes"}, r"^algo.sync_ref_model='yes' must be true or false"),
])
def test_bad_sync_settings_are_one_line_at_construction(settings, line):
    with pytest.raises(ConfigError, match=line):
        make(**settings)


def test_its_knobs_without_it_are_said_once():
    from lit_rlhf.config.validation import _warned

    _warned.clear()
    with pytest.warns(UserWarning, match=r"algo.ref_model_mixup_alpha=0.9 times the reference's updates, and "
                                         r"algo.sync_ref_model is off: it does nothing"):
        make(ref_model_mixup_alpha=0.9)
