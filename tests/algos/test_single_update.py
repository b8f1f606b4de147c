"""The single-update path: with one optimizer step on the whole rollout and no dropout, the update's
forward runs inside the rollout and replaces the no-grad old-logprob forward."""

import functools

import lightning as L
import pytest
import torch

import lit_rlhf.algos.forwards as forwards_module
import lit_rlhf.models.forwards as rollout_module
from tests.conftest import LORA, make_datamodule, make_ppo, make_rloo


def train(module, steps=2):
    L.seed_everything(0)
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    trainer.fit(module, make_datamodule())
    return {k: v.detach().clone() for k, v in module.state_dict().items() if k in module.trained_state_keys()}


def count_forwards(monkeypatch):
    """Records, for every forward of the policy or the reference on the responses, whether it ran with grad."""
    calls = []
    original = rollout_module.response_logprobs_and_entropy

    def counting(*args, **kwargs):
        calls.append(torch.is_grad_enabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(rollout_module, "response_logprobs_and_entropy", counting)
    monkeypatch.setattr(forwards_module, "response_logprobs_and_entropy", counting)
    return calls


@pytest.mark.integration
def test_single_update_trains_the_same_weights_as_the_full_path_with_one_forward_less(monkeypatch):
    sgd = functools.partial(torch.optim.SGD, lr=0.5)
    calls = count_forwards(monkeypatch)
    fast = make_rloo(optimizer=sgd)
    fast_weights = train(fast)
    assert fast.single_update and calls == [False, True] * 2  # reference (no grad), policy with grad
    calls.clear()
    full = make_rloo(optimizer=sgd, reuse_rollout_forward=False)
    full_weights = train(full)
    assert calls == [False, False, True] * 2  # old logprobs, reference, update
    assert fast_weights.keys() == full_weights.keys()
    for name, weight in fast_weights.items():
        torch.testing.assert_close(weight, full_weights[name], atol=1e-6, rtol=1e-5)
    assert any((w.abs() > 1e-3).any() for k, w in fast_weights.items() if "lora_B" in k)  # it did train
    assert fast.last_stats["val/ratio"] == 1.0 and fast.last_stats["policy/clipfrac_avg"] == 0.0


def make_grpo(**settings):
    from lit_rlhf import GRPOModule
    from lit_rlhf.assets import TINY_PYTHIA
    from lit_rlhf.rewards import VaderSentiment

    return GRPOModule(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, reward=VaderSentiment(), **settings)


@pytest.mark.parametrize("make, overrides", [
    (make_rloo, {"reuse_rollout_forward": False}),
    (make_rloo, {"num_ppo_epochs": 2}),
    (make_rloo, {"num_mini_batches": 2}),
    (make_rloo, {"gradient_accumulation_steps": 2}),
    (make_rloo, {"model": {"name_or_path": None, "lora": {**LORA, "lora_dropout": 0.1}}}),
    (make_ppo, {"num_ppo_epochs": 1}),
    (make_grpo, {"entropy_coef": 0.01}),  # the bonus runs its own forward
])
def test_settings_that_need_the_old_logprob_forward_keep_it(make, overrides, tiny_path):
    if "model" in overrides:
        overrides["model"]["name_or_path"] = tiny_path
    module = make(**overrides)
    module.configure_model()
    assert not module.single_update


def tiny_opt_with_config_dropout(path, tiny_path):
    """A 1-layer OPT whose dropout is only config.dropout (applied functionally, as in released OPT models)."""
    from transformers import AutoTokenizer, OPTConfig, OPTForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    torch.manual_seed(0)
    config = OPTConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, ffn_dim=64,
                       num_attention_heads=2, max_position_embeddings=128, word_embed_proj_dim=32, dropout=0.1,
                       attention_dropout=0.0, bos_token_id=tokenizer.bos_token_id or 0,
                       eos_token_id=tokenizer.eos_token_id, pad_token_id=1)
    OPTForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.mark.integration
def test_dropout_applied_from_the_config_is_detected_and_the_first_kl_is_exactly_zero(tmp_path, tiny_path):
    import lightning as L

    from tests.conftest import make_datamodule

    path = tiny_opt_with_config_dropout(tmp_path / "opt", tiny_path)
    module = make_rloo(model={"name_or_path": path, "lora": LORA})
    module.configure_model()
    assert not any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in module.policy.modules())  # no module shows it
    assert not module.single_update
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    trainer.fit(module, make_datamodule(tokenizer=path))
    assert module.last_stats["objective/kl"] == 0.0  # policy == reference at step 1, and rollouts had no dropout
