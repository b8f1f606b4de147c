"""algo.router_aux_loss_coef in the modules: a mixture-of-experts policy's update adds coefficient x its routers'
load-balancing loss (each micro-batch's, weighted by its share of the optimizer step), and DPO's, KTO's and SFT's
steps add it to their loss; it is logged as aux_loss. The loss itself is checked in tests/models/test_router_load.py."""

import functools

import lightning as L
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.data.preferences import collate_pairs
from lit_rlhf.models import load_tokenizer
from lit_rlhf.models.router_load import RouterLoad
from tests.conftest import LORA, make_datamodule, make_ppo, make_rloo

COEF = 0.5  # large, so that a missing or doubled term shows


def save_tiny_moe(path):
    """A tiny Qwen3-MoE (4 experts, 2 a token) on the tiny pythia's tokenizer, saved with it to path."""
    tokenizer = load_tokenizer(TINY_PYTHIA)
    config = AutoConfig.for_model("qwen3_moe", vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, num_key_value_heads=1, intermediate_size=64, num_experts=4,
                                  num_experts_per_tok=2, moe_intermediate_size=32, head_dim=16,
                                  bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                  pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def recording(monkeypatch, module):
    """Each micro-batch's loss from minibatch_loss, its routers' loss taken after it, and the loss backpropagated."""
    base, taken, backward = [], [], []
    minibatch_loss, take = module.minibatch_loss, RouterLoad.take

    def recorded_minibatch_loss(*args, **kwargs):
        loss, stats = minibatch_loss(*args, **kwargs)
        base.append(loss.detach())
        return loss, stats

    def recorded_take(self):
        aux = take(self)
        taken.append(aux)
        return aux

    monkeypatch.setattr(module, "minibatch_loss", recorded_minibatch_loss)
    monkeypatch.setattr(RouterLoad, "take", recorded_take)
    monkeypatch.setattr(module, "manual_backward", lambda loss, *a, **k: backward.append(loss.detach()))
    return base, taken, backward


@pytest.mark.integration
@pytest.mark.parametrize("make, settings, share", [
    (make_rloo, {}, 1.0), (make_rloo, {"gradient_accumulation_steps": 2}, 0.5),
    (make_ppo, {"num_ppo_epochs": 1}, 1.0), (make_ppo, {"num_ppo_epochs": 1, "critic_warmup_steps": 1}, None),
], ids=["rloo_single_update", "rloo_two_micro_batches", "ppo", "ppo_critic_warmup"])
def test_the_update_adds_the_coefficient_times_each_micro_batchs_aux_loss(tmp_path, monkeypatch, make, settings,
                                                                           share):
    """PPO's critic warm-up trains the critic alone: no router loss reaches the policy then."""
    module = make(model={"name_or_path": save_tiny_moe(tmp_path / "moe"), "lora": LORA},
                  optimizer=functools.partial(torch.optim.SGD, lr=0.1), router_aux_loss_coef=COEF, **settings)
    base, taken, backward = recording(monkeypatch, module)
    L.seed_everything(0)
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    trainer.fit(module, make_datamodule(tokenizer=tmp_path / "moe"))
    if share is None:
        assert taken == [None] and base == backward and "aux_loss" not in module.last_stats
        return
    assert module.single_update is (make is make_rloo and share == 1.0)
    assert len(base) == len(taken) == len(backward) == round(1 / share)
    for loss, aux, total in zip(base, taken, backward, strict=True):
        assert aux is not None and 1.0 < float(aux.detach()) < 4.0  # top-2 of 4 experts: 2 when balanced
        torch.testing.assert_close(total, loss + COEF * aux.detach() * share)
    assert module.last_stats["aux_loss"] == pytest.approx(float(torch.stack(taken).mean()), rel=1e-6)


@pytest.mark.parametrize("app", ["dpo", "kto", "sft"])
def test_dpo_kto_and_sft_add_it_to_their_loss(tmp_path, monkeypatch, app):
    from lit_rlhf.algos.dpo import DPOModule
    from lit_rlhf.algos.kto import KTOModule
    from lit_rlhf.algos.sft import SFTModule

    path = save_tiny_moe(tmp_path / "moe")
    cls = {"dpo": DPOModule, "kto": KTOModule, "sft": SFTModule}[app]
    module = cls(model={"name_or_path": path, "lora": LORA}, router_aux_loss_coef=COEF)
    module.configure_model()
    logged = {}
    monkeypatch.setattr(module, "log_metrics", lambda metrics, batch_size, stage: logged.update(metrics))
    monkeypatch.setattr(module, "log_token_means", lambda means, stage: {})
    items = [{"chosen": ([5, 6, 7, 8, 9], 2), "rejected": ([5, 6, 11, 12], 2), "margin": 0.0},
             {"chosen": ([21, 22, 23], 1), "rejected": ([21, 24, 25, 26, 27, 28], 1), "margin": 0.0}]
    batch = collate_pairs(items, pad_token_id=module.tokenizer.pad_token_id)
    if app == "kto":  # the pairs' chosen rows as desirable, rejected ones as not; kl rows as the rows themselves
        batch = {**batch, "label": torch.tensor([True, True, False, False]),
                 **{f"kl_{key}": batch[key] for key in ("input_ids", "attention_mask", "response_mask")}}
    if app == "sft":  # its training loss is a token mean over the accumulation window: one micro-batch here
        monkeypatch.setattr(module, "count_tokens", lambda mask: None)
        monkeypatch.setattr(module, "log", lambda *args, **kwargs: None)
    load = module.router_load
    with torch.no_grad():
        out = module.policy(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                            output_router_logits=True)
        for stage in ("val", "train") if app == "sft" else ("val",):
            module.router_load = load
            with_aux = module.step(batch, stage)
            module.router_load = None  # what a dense policy or a coefficient of 0 gives
            without = module.step(batch, stage)
            torch.testing.assert_close(with_aux - without, COEF * out.aux_loss, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(logged["eval/aux_loss"], out.aux_loss, rtol=1e-5, atol=1e-6)
