"""A mixture-of-experts policy's load-balancing loss (algo.router_aux_loss_coef): from every layout of the logprob
forward (padded full logits, chunked, packed), the loss transformers' own forward computes over the batch's real
tokens (its aux_loss with the attention mask), with its gradient; nothing for a dense model or a coefficient of 0."""

import logging

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from lit_rlhf.models.forwards import response_logprobs_and_entropy, right_padded_logprobs_and_statistics
from lit_rlhf.models.router_load import RouterLoad, router_load_of, routes_tokens_to_experts
from tests.algos.test_padding_free import PAD, batch

SMALL = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=32)
MOE = {
    "qwen3_moe": dict(SMALL, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, head_dim=8),
    "mixtral": dict(SMALL, num_local_experts=4, num_experts_per_tok=2),  # its experts under another config name
}

# families whose routers balance without an auxiliary loss: their configs carry output_router_logits (from transformers
# 5.2x; set here for the earlier ones), their forwards compute no aux_loss
AUX_FREE = {
    "glm4_moe": dict(SMALL, output_router_logits=False, n_routed_experts=4, num_experts_per_tok=2,
                     moe_intermediate_size=16, n_group=1, topk_group=1, first_k_dense_replace=0, head_dim=8),
    "deepseek_v3": dict(SMALL, output_router_logits=False, n_routed_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=16, n_group=1, topk_group=1, first_k_dense_replace=0, kv_lora_rank=8,
                        q_lora_rank=None, num_key_value_heads=2, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8),
}


def tiny(kind: str, **settings) -> torch.nn.Module:
    torch.manual_seed(0)
    config = AutoConfig.for_model(kind, vocab_size=1000, pad_token_id=PAD, bos_token_id=0, eos_token_id=2,
                                  **{**MOE.get(kind, AUX_FREE.get(kind, SMALL)), **settings})
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def transformers_aux_loss(model, queries, query_mask, responses, response_mask) -> torch.Tensor:
    """The model's own aux_loss over the padded batch, its attention mask leaving the padding out."""
    attention_mask = torch.cat([query_mask, response_mask.long()], 1)
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
    out = model(input_ids=torch.cat([queries, responses], 1), attention_mask=attention_mask,
                position_ids=position_ids, output_router_logits=True, use_cache=False)
    return out.aux_loss


@pytest.mark.parametrize("kind", list(MOE))
@pytest.mark.parametrize("chunk_size, pad", [(None, None), (4, None), (4, PAD)], ids=["padded", "chunked", "packed"])
def test_every_layout_collects_the_models_own_aux_loss_over_the_real_tokens(kind, chunk_size, pad):
    model = tiny(kind)
    inputs = batch()  # mixed prompt and response lengths: a packed row ends in filler
    expected = transformers_aux_loss(model, *inputs)
    load = router_load_of(model, 0.001)
    assert isinstance(load, RouterLoad) and (load.experts, load.per_token) == (4, 2)
    response_logprobs_and_entropy(model, *inputs, 0.7, chunk_size, pad, router_load=load)
    collected = load.take()
    torch.testing.assert_close(collected, expected, rtol=1e-5, atol=1e-6)
    assert collected.requires_grad
    assert load.take() is None  # taken once
    ours, = torch.autograd.grad(collected, model.model.layers[0].mlp.gate.weight)
    theirs, = torch.autograd.grad(transformers_aux_loss(model, *inputs), model.model.layers[0].mlp.gate.weight)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("kind", list(AUX_FREE))
def test_a_model_whose_routers_balance_without_an_auxiliary_loss_gets_none_and_says_so(kind, caplog):
    """TRL adds the model's own aux_loss, which these families never compute: there is no load-balancing loss to add,
    and the run says so once."""
    model = tiny(kind)
    assert routes_tokens_to_experts(model)  # the config carries the key
    queries, query_mask, responses, response_mask = batch()
    assert getattr(model(input_ids=torch.cat([queries, responses], 1)), "aux_loss", None) is None
    with caplog.at_level(logging.INFO):
        assert router_load_of(model, 0.001) is None
    assert f"the {kind} model's routers balance without an auxiliary loss" in caplog.text
    logprobs, _ = response_logprobs_and_entropy(model, queries, query_mask, responses, response_mask, 0.7, 4, PAD,
                                                router_load=None)
    assert torch.isfinite(logprobs).all()


def test_padding_takes_no_part():
    """The filler of a packed row and the padding of a padded batch, if counted, would move the loss."""
    model = tiny("qwen3_moe")
    queries, query_mask, responses, response_mask = batch()
    everything = model(input_ids=torch.cat([queries, responses], 1), output_router_logits=True).aux_loss
    assert not torch.allclose(everything, transformers_aux_loss(model, queries, query_mask, responses,
                                                                  response_mask), atol=1e-4)


@pytest.mark.parametrize("chunk_size, pad", [(None, None), (4, PAD)], ids=["padded", "packed"])
def test_the_right_padded_forward_of_dpo_kto_and_sft_collects_it_too(chunk_size, pad):
    model = tiny("qwen3_moe")
    queries, query_mask, responses, response_mask = batch()
    rows = [torch.cat([q[m.bool()], r[s]]) for q, m, r, s in zip(queries, query_mask, responses, response_mask,
                                                                  strict=True)]
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), PAD)
    attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, :len(row)], attention_mask[i, :len(row)] = row, 1
    out = model(input_ids=input_ids, attention_mask=attention_mask, output_router_logits=True)
    load = RouterLoad(model)
    right_padded_logprobs_and_statistics(model, input_ids, attention_mask, attention_mask[:, 1:], chunk_size, pad,
                                         router_load=load)
    torch.testing.assert_close(load.take(), out.aux_loss, rtol=1e-5, atol=1e-6)


def test_a_dense_model_or_a_coefficient_of_0_collects_nothing():
    assert router_load_of(tiny("llama"), 0.001) is None
    assert router_load_of(tiny("qwen3_moe"), 0.0) is None


def test_a_model_that_returns_no_router_logits_is_one_line():
    from types import SimpleNamespace

    from lit_rlhf.errors import ConfigError

    load = router_load_of(tiny("qwen3_moe"), 0.001)
    with pytest.raises(ConfigError) as refused:
        load.add(SimpleNamespace(router_logits=None), torch.ones(1, 4))
    assert str(refused.value) == ("algo.router_aux_loss_coef=0.001: the qwen3_moe model returned no router logits "
                                  "with output_router_logits=True; set algo.router_aux_loss_coef=0.")
