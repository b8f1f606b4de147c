import lightning as L
import pytest
import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.step.rollout import Rollout
from tests.conftest import FAST_LEARNING, assert_learns_positivity, make_datamodule, make_rloo
from tests.helpers import advantages_of


def fake_rollout(scores, logprobs, ref_logprobs, mask, k):
    n = len(scores)
    return Rollout(queries=torch.zeros(n, 1, dtype=torch.long), query_mask=torch.ones(n, 1, dtype=torch.long),
                   responses=torch.zeros_like(mask, dtype=torch.long), response_mask=mask,
                   prompt_index=torch.arange(n // k).repeat_interleave(k), logprobs=logprobs,
                   ref_logprobs=ref_logprobs, scores=scores, raw_scores=scores,
                   contains_stop=torch.ones(n, dtype=torch.bool))


def test_sequence_and_token_level_advantages_against_hand_values():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]]).bool()
    logprobs = torch.tensor([[-1.0, -1.0, -5.0], [-1.0, -2.0, -1.0]])
    ref_logprobs = torch.tensor([[-2.0, -1.5, -9.0], [-1.0, -1.0, -3.0]])  # k1 KL: [1, .5, (masked)], [0, -1, 2]
    scores = torch.tensor([1.0, 3.0])
    rollout = fake_rollout(scores, logprobs, ref_logprobs, mask, k=2)
    seq = make_rloo(kl_coef=0.1)
    advantages, stats = advantages_of(seq, rollout)
    rlhf = [1.0 - 0.1 * 1.5, 3.0 - 0.1 * 1.0]  # 0.85, 2.9
    expected = torch.tensor([[rlhf[0] - rlhf[1]] * 2 + [0.0], [rlhf[1] - rlhf[0]] * 3])
    torch.testing.assert_close(advantages, expected)
    assert stats["objective/kl"].item() == pytest.approx(1.25)
    assert stats["objective/non_score_reward"].item() == pytest.approx(-0.125)
    assert stats["objective/rlhf_reward"].item() == pytest.approx(sum(rlhf) / 2)

    tok = make_rloo(kl_coef=0.1, kl_penalty="token")
    token_adv, token_stats = advantages_of(tok, rollout)
    # rewards-to-go: seq 0: [-0.1 + (-0.05 + 1), -0.05 + 1] ; seq 1: [0 + 0.1 + (-0.2 + 3), 0.1 + 2.8, 2.8]
    returns = torch.tensor([[0.85, 0.95, 0.0], [2.9, 2.9, 2.8]])
    baseline = torch.tensor([[2.9], [0.85]])  # the sibling's total return
    torch.testing.assert_close(token_adv, (returns - baseline) * mask)
    torch.testing.assert_close(token_adv[:, 0], advantages[:, 0])  # first token: the sequence advantage
    assert token_stats["objective/rlhf_reward"].item() == pytest.approx(stats["objective/rlhf_reward"].item())


def fit(module, steps, **trainer_kwargs):
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", **trainer_kwargs)
    trainer.fit(module, make_datamodule())
    return trainer


@pytest.mark.integration
def test_a_few_steps_change_lora_weights_only():
    L.seed_everything(0)
    module = make_rloo()
    module.configure_model()
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    fit(module, steps=3)
    changed = {n for n, p in module.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
    assert any("lora_B" in n for n in changed)
    frozen = [n for n in before if "lora_" not in n]
    assert frozen and all(torch.equal(dict(module.named_parameters())[n], before[n]) for n in frozen)


@pytest.mark.integration
def test_epochs_minibatches_and_accumulation_count_optimizer_steps():
    L.seed_everything(0)
    module = make_rloo(num_ppo_epochs=2, num_mini_batches=2, gradient_accumulation_steps=2)
    trainer = fit(module, steps=8)  # 2 RL steps x 2 epochs x 2 minibatches
    assert module.episode == 2 * 16
    assert module.last_stats["policy/approxkl_avg"] > 0  # later minibatches see a moved policy
    assert trainer.global_step == 8
    with pytest.raises(ConfigError, match="num_mini_batches=3 does not divide the 16"):
        fit(make_rloo(num_mini_batches=3), steps=1)


@pytest.mark.integration
def test_rloo_raises_the_mean_score_on_the_embedded_default():
    """A short seeded run: the held-out score rises clearly while KL stays in the FAQ's [0, 10]."""
    assert_learns_positivity(make_rloo(response_length=24, optimizer=FAST_LEARNING), rl_steps=15)


def test_fsdp_is_refused_with_a_reason():
    from types import SimpleNamespace

    from lightning.pytorch.strategies import FSDPStrategy

    module = make_rloo()
    module._trainer = SimpleNamespace(strategy=FSDPStrategy.__new__(FSDPStrategy))
    with pytest.raises(ConfigError, match=r"FSDPStrategy \(FSDP1\) cannot gather the weights .*; use trainer=fsdp2"):
        module.setup("fit")


@pytest.mark.integration
def test_gradient_checkpointing_with_lora_gives_the_same_update():
    from tests.conftest import LORA, TINY_PYTHIA

    def trained(checkpointing):
        L.seed_everything(0)
        module = make_rloo(model={"name_or_path": TINY_PYTHIA, "lora": LORA,
                                  "gradient_checkpointing": checkpointing})
        fit(module, steps=2)
        return {k: v for k, v in module.state_dict().items() if "lora_" in k}

    plain, checkpointed = trained(False), trained(True)
    for key in plain:
        torch.testing.assert_close(checkpointed[key], plain[key], atol=1e-6, rtol=1e-5)
    assert any(not torch.equal(v, torch.zeros_like(v)) for k, v in checkpointed.items() if "lora_B" in k)


def test_k2_and_k3_in_the_reward_warn_that_they_do_not_pull_towards_the_reference():
    for estimator in ("k2", "k3"):
        with pytest.warns(UserWarning, match=f"kl_estimator={estimator} is used as a reward penalty"):
            make_rloo(kl_estimator=estimator)
