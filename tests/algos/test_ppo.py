import lightning as L
import pytest
import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.step.rollout import Rollout
from tests.conftest import FAST_LEARNING, assert_learns_positivity, make_datamodule, make_ppo
from tests.gae_reference import gae_reverse_loop
from tests.helpers import advantages_of, save_reward_model


def fit(module, steps, callbacks=()):
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", callbacks=list(callbacks))
    trainer.fit(module, make_datamodule())
    return trainer


def snapshot(module):
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def changed(module, before):
    return {n for n, p in module.named_parameters() if not torch.equal(p, before[n])}


@pytest.mark.integration
def test_one_ppo_step_changes_lora_and_value_head_only():
    L.seed_everything(0)
    module = make_ppo(num_ppo_epochs=2)
    module.configure_model()
    before = snapshot(module)
    fit(module, steps=2)  # 1 RL step x 2 epochs
    moved = changed(module, before)
    assert {n for n in moved if n.startswith("value_head")} == {"value_head.summary.weight", "value_head.summary.bias"}
    assert any("lora_B" in n for n in moved)
    assert all("lora_" in n or n.startswith("value_head") for n in moved)
    frozen = [n for n in before if "lora_" not in n and not n.startswith("value_head")]
    assert frozen and not set(frozen) & moved


@pytest.mark.integration
def test_critic_adapter_trains_its_own_adapter_on_the_same_base_weights():
    L.seed_everything(0)
    module = make_ppo(critic="adapter", num_ppo_epochs=1)
    module.configure_model()
    before = snapshot(module)
    lora_numel = sum(p.numel() for n, p in module.named_parameters() if ".default." in n)
    critic_numel = sum(p.numel() for n, p in module.named_parameters() if ".critic." in n)
    base_numel = sum(p.numel() for n, p in module.named_parameters() if "lora_" not in n and "value_head" not in n)
    assert lora_numel == critic_numel > 0
    head_numel = sum(p.numel() for p in module.value_head.parameters())
    assert sum(p.numel() for p in module.parameters()) == base_numel + 2 * lora_numel + head_numel
    fit(module, steps=2)
    moved = changed(module, before)
    assert any(".default." in n for n in moved) and any(".critic." in n for n in moved)
    assert all("lora_" in n or n.startswith("value_head") for n in moved)


@pytest.mark.integration
def test_reward_model_critic_starts_from_its_backbone_and_head(tmp_path):
    rm = save_reward_model(tmp_path)
    L.seed_everything(0)
    module = make_ppo(critic="reward_model", critic_model_path=str(tmp_path), num_ppo_epochs=1)
    module.configure_model()
    torch.testing.assert_close(module.value_head.weight, rm.score.weight)
    before = snapshot(module)
    fit(module, steps=2)
    moved = changed(module, before)
    assert "value_head.weight" in moved and any(n.startswith("critic_backbone") and "lora_" in n for n in moved)
    assert all("lora_" in n or n.startswith("value_head") for n in moved)


def test_a_critic_from_a_causal_lms_folder_starts_its_head_without_transformers_load_report(capfd):
    """A causal LM's folder as algo.critic_model_path: the score head starts at random (as TRL's value model from a
    causal LM), which transformers' colour-coded load report announced on every run."""
    from lit_rlhf.models.value import load_reward_model_critic
    from tests.conftest import TINY_PYTHIA

    backbone, head = load_reward_model_critic(TINY_PYTHIA, "float32", None)
    assert head.weight.shape == (1, backbone.config.hidden_size)
    assert "LOAD REPORT" not in capfd.readouterr().err


@pytest.mark.integration
def test_critic_warmup_trains_only_the_value_head():
    L.seed_everything(0)
    module = make_ppo(critic_warmup_steps=2, num_ppo_epochs=1)
    module.configure_model()
    before = snapshot(module)
    fit(module, steps=2)
    assert changed(module, before) == {"value_head.summary.weight", "value_head.summary.bias"}
    fit(module, steps=3)  # the third RL step is past the warm-up
    assert any("lora_" in n for n in changed(module, before))


def test_advantages_returns_and_rewards_stop_at_the_stop_token():
    module = make_ppo(kl_coef=0.1, gamma=1.0, lam=0.95, whiten_advantages=False)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]).bool()
    torch.manual_seed(0)
    logprobs, ref_logprobs = torch.randn(2, 5), torch.randn(2, 5)
    values = torch.randn(2, 5)
    scores = torch.tensor([1.0, -1.0])
    rollout = Rollout(queries=torch.zeros(2, 1, dtype=torch.long), query_mask=torch.ones(2, 1, dtype=torch.long),
                      responses=torch.zeros(2, 5, dtype=torch.long), response_mask=mask,
                      prompt_index=torch.arange(2), logprobs=logprobs, ref_logprobs=ref_logprobs, scores=scores,
                      raw_scores=scores, contains_stop=torch.ones(2, dtype=torch.bool), values=values)
    advantages, stats = advantages_of(module, rollout)
    kl = (logprobs - ref_logprobs) * mask
    rewards = -0.1 * kl
    rewards[0, 2] += 1.0  # score on the last response token (the stop token)
    rewards[1, 4] += -1.0
    expected = gae_reverse_loop(rewards, values, mask, 1.0, 0.95)
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(rollout.returns, (expected + values) * mask)
    assert (advantages[~mask] == 0).all() and (rollout.returns[~mask] == 0).all()
    assert stats["objective/kl"].item() == pytest.approx(kl.sum(1).mean().item())
    assert {"val/var_explained", "val/mean", "val/var", "returns/mean", "returns/var",
            "policy/advantages_mean"} <= set(stats)


def test_bad_critic_settings_name_the_value():
    with pytest.raises(ConfigError, match="critic='big'"):
        make_ppo(critic="big")
    with pytest.raises(ConfigError, match="critic_model_path"):
        make_ppo(critic="reward_model")
    with pytest.raises(ConfigError, match="needs LoRA"):
        make_ppo(critic="adapter", model={"name_or_path": make_ppo().hparams.model["name_or_path"],
                                          "lora": None}).configure_model()


@pytest.mark.integration
def test_ppo_raises_the_mean_score_on_the_embedded_default():
    assert_learns_positivity(make_ppo(response_length=24, num_ppo_epochs=2, optimizer=FAST_LEARNING), rl_steps=12)
