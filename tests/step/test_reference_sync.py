"""algo.sync_ref_model (TRL's, TR-DPO): the frozen reference moves toward the policy every ref_model_sync_steps
optimizer steps, by TRL's formula; it is checkpointed, and what cannot move it is refused in one line."""

import functools
from types import SimpleNamespace

import lightning as L
import pytest
import torch

from lit_rlhf import GRPOModule
from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.config import GRPOConfig, build
from lit_rlhf.errors import ConfigError
from lit_rlhf.rewards import VaderSentiment
from lit_rlhf.step.reference_sync import ReferenceSync, mix
from tests.conftest import LORA, make_datamodule


def test_the_reference_becomes_alpha_policy_plus_one_minus_alpha_reference_as_trl_computes_it():
    torch.manual_seed(0)
    policy, reference = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    pairs = list(zip(reference.parameters(), policy.parameters(), strict=True))
    expected = [r.detach() * (1 - 0.6) + p.detach() * 0.6 for r, p in pairs]
    trl = [r.detach().clone().mul_(1 - 0.6).add_(p.detach(), alpha=0.6)  # SyncRefModelCallback._sync_target_model
           for r, p in zip(reference.parameters(), policy.parameters(), strict=True)]
    mix(policy, reference, 0.6)
    for got, by_hand, by_trl in zip(reference.parameters(), expected, trl, strict=True):
        torch.testing.assert_close(got.detach(), by_hand)
        assert torch.equal(got.detach(), by_trl)
    mix(policy, reference, 1.0)
    assert all(torch.equal(r, p) for r, p in zip(reference.parameters(), policy.parameters(), strict=True))


def test_it_moves_at_multiples_of_the_sync_steps_only(monkeypatch):
    import lit_rlhf.step.reference_sync as reference_sync

    moved = []
    monkeypatch.setattr(reference_sync, "mix", lambda policy, reference, alpha: moved.append(alpha))
    module = SimpleNamespace(policy=None, reference=SimpleNamespace(frozen_copy=object()))
    results = [ReferenceSync(True, 0.5, 4).after_step(module, steps) for steps in (0, 2, 4, 6, 8, 12)]
    assert results == [False, False, True, False, True, True] and moved == [0.5, 0.5, 0.5]
    assert not any(ReferenceSync(False, 0.5, 4).after_step(module, steps) for steps in (4, 8))


@pytest.mark.parametrize("settings, line", [
    ({"sync_ref_model": True, "beta": 0.0}, r"^algo.sync_ref_model=true with algo.kl_coef=0 \(beta\): no KL term "
                                            r"reads the reference"),
    ({"sync_ref_model": True, "max_staleness": 1}, r"^algo.sync_ref_model=true with algo.max_staleness=1: rollouts "
                                                   r"drawn ahead score the reference while it moves"),
    ({"sync_ref_model": True, "ref_model_sync_steps": 3, "num_iterations": 2},
     r"^algo.ref_model_sync_steps=3 is not a multiple of the 2 optimizer steps of an RL step .* set it to a multiple "
     r"of 2.$"),
    ({"ref_model_mixup_alpha": 1.5}, r"^algo.ref_model_mixup_alpha=1.5 must be in \(0, 1\]"),
    ({"ref_model_mixup_alpha": 0.0}, r"^algo.ref_model_mixup_alpha=0.0 must be > 0"),
])
def test_settings_that_cannot_move_the_reference_as_trl_does_are_refused(settings, line):
    with pytest.raises(ConfigError, match=line):
        build(GRPOConfig, settings, "algo")


def test_its_knobs_without_it_are_said_once():
    from lit_rlhf.config.validation import _warned

    _warned.clear()
    with pytest.warns(UserWarning, match=r"algo.ref_model_sync_steps=8 times the reference's updates, and "
                                         r"algo.sync_ref_model is off: it does nothing"):
        make(lora=None, ref_model_sync_steps=8)


def make(lora=None, **settings):
    return GRPOModule(model={"name_or_path": TINY_PYTHIA, "lora": lora}, reward=VaderSentiment(),
                      optimizer=functools.partial(torch.optim.AdamW, lr=1e-2), response_length=8, **settings)


def fit(module, steps, ckpt_path=None):
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    trainer.fit(module, make_datamodule(), ckpt_path=ckpt_path)
    return trainer


def parameters(model):
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.integration
def test_a_full_fine_tune_s_reference_follows_the_policy_and_its_kl_restarts_from_zero():
    """alpha=1 every optimizer step: after each RL step the reference is the policy, so the next rollout's KL to it is
    0 (and not without the setting); alpha=0.6: the reference after one step is TRL's mix of the two."""
    L.seed_everything(0)
    copied = make(sync_ref_model=True, ref_model_mixup_alpha=1.0, ref_model_sync_steps=1)
    trainer = fit(copied, 2)
    assert all(torch.equal(r, p) for r, p in zip(copied.frozen_reference.parameters(), copied.policy.parameters(),
                                                  strict=True))
    assert float(trainer.callback_metrics["objective/kl"]) == 0.0  # step 2 sampled from the reference itself
    L.seed_everything(0)
    fixed = make()
    assert float(fit(fixed, 2).callback_metrics["objective/kl"]) > 0
    L.seed_everything(0)
    mixed = make(sync_ref_model=True, ref_model_mixup_alpha=0.6, ref_model_sync_steps=1)
    mixed.configure_model()
    start = parameters(mixed.frozen_reference)
    fit(mixed, 1)
    for reference, policy, initial in zip(mixed.frozen_reference.parameters(), mixed.policy.parameters(), start,
                                          strict=True):
        assert torch.equal(reference.detach(), initial.mul(0.4).add_(policy.detach(), alpha=0.6))


@pytest.mark.integration
def test_the_moved_reference_is_checkpointed_and_restored_on_resume(tmp_path):
    L.seed_everything(0)
    module = make(sync_ref_model=True, ref_model_sync_steps=1)
    trainer = fit(module, 1)
    path = tmp_path / "step1.ckpt"
    trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=True)["state_dict"]
    assert any(key.startswith("frozen_reference.") for key in saved)
    resumed = make(sync_ref_model=True, ref_model_sync_steps=1)
    fit(resumed, 1, ckpt_path=path)  # the run is finished: it restores and trains nothing
    initial = make()
    initial.configure_model()
    assert any(not torch.equal(a, b) for a, b in zip(module.frozen_reference.parameters(),
                                                      initial.frozen_reference.parameters(), strict=True))
    for got, expected in zip(resumed.frozen_reference.parameters(), module.frozen_reference.parameters(), strict=True):
        assert torch.equal(got.detach(), expected.detach())
    trainer = fit(make(), 1)
    path_fixed = tmp_path / "fixed.ckpt"
    trainer.save_checkpoint(path_fixed)  # a fixed reference reloads from the model's files, as before
    fixed_keys = torch.load(path_fixed, weights_only=True)["state_dict"]
    assert not any(key.startswith("frozen_reference.") for key in fixed_keys)


@pytest.mark.integration
def test_a_lora_reference_is_an_adapter_reset_to_the_trained_one_and_a_mix_is_refused(tmp_path):
    """With LoRA (alpha 1) the reference is an adapter of its own: the base model at the start (KL 0 at step 1, as
    with adapters off), the trained adapter after each reset (KL 0 again at step 2), checkpointed and resumed."""
    L.seed_everything(0)
    module = make(lora=LORA, sync_ref_model=True, ref_model_mixup_alpha=1.0, ref_model_sync_steps=1)
    trainer = fit(module, 2)
    assert module.reference.kind == "reference_adapter"
    params = dict(module.policy.named_parameters())
    references = {name: p for name, p in params.items() if ".reference." in name}
    assert references and all(not p.requires_grad for p in references.values())
    for name, reference in references.items():
        trained = params[name.replace(".reference.", ".default.")]
        assert trained.requires_grad and torch.equal(reference, trained)
    assert float(trainer.callback_metrics["objective/kl"]) == 0.0
    path = tmp_path / "lora.ckpt"
    trainer.save_checkpoint(path)
    assert set(references) <= {key.removeprefix("policy.") for key in torch.load(path, weights_only=True)["state_dict"]}
    resumed = make(lora=LORA, sync_ref_model=True, ref_model_mixup_alpha=1.0, ref_model_sync_steps=1)
    fit(resumed, 2, ckpt_path=path)
    for name, param in resumed.policy.named_parameters():
        assert torch.equal(param, params[name]), name
    with pytest.raises(ConfigError, match=r"^algo.sync_ref_model=true with LoRA and algo.ref_model_mixup_alpha=0.6: "
                                          r"a LoRA reference can only be reset to the policy"):
        make(lora=LORA, sync_ref_model=True)  # at construction, before any model loads


@pytest.mark.integration
def test_a_ppo_critic_adapter_keeps_training_beside_a_reference_adapter():
    """peft freezes the adapters a switch leaves inactive: PPO's critic adapter still trains beside a reference adapter
    (the update re-enables the gradients of every trained tensor first)."""
    from tests.conftest import make_ppo

    L.seed_everything(0)
    module = make_ppo(critic="adapter", sync_ref_model=True, ref_model_mixup_alpha=1.0, ref_model_sync_steps=1,
                      num_ppo_epochs=1)
    module.configure_model()
    critic = {name: p.detach().clone() for name, p in module.policy.named_parameters() if ".critic." in name}
    fit(module, 2)
    params = dict(module.policy.named_parameters())
    assert critic and all(params[name].requires_grad for name in critic)
    assert all(not torch.equal(params[name], before) for name, before in critic.items() if "lora_B" in name)
