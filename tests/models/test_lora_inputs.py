"""LoRA layers over bfloat16 weights hold their inputs in bfloat16, not peft's float32 copies, with peft's values and
gradients to the bit."""

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.models.lora_inputs import hold_lora_inputs_in_their_dtype


def lora_model(dtype: torch.dtype, **lora) -> torch.nn.Module:
    """The tiny model with LoRA on every linear layer (peft keeps the adapters in float32), lora_B non-zero so that
    every adapter gets gradients."""
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(TINY_PYTHIA, dtype=dtype),
                           LoraConfig(r=4, target_modules="all-linear", **lora))
    for name, parameter in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.1)
    return model


def loss_and_grads(model: torch.nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    ids = torch.arange(3, 35).view(2, 16)
    loss = model(input_ids=ids).logits.float().logsumexp(-1).mean()
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters() if p.requires_grad}


def saved_float32_inputs(model: torch.nn.Module, hidden_sizes: set[int]) -> int:
    """How many float32 tensors of a layer input's size (32 tokens x its width) autograd saves in a forward."""
    saved = []

    def pack(tensor):
        width = tensor.shape[-1] if tensor.dim() else 0
        if tensor.dtype == torch.float32 and width in hidden_sizes and tensor.numel() == 32 * width:
            saved.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids=torch.arange(3, 35).view(2, 16))
    return len(saved)


def test_bfloat16_weights_same_bits_without_the_float32_copies():
    peft_way = lora_model(torch.bfloat16)
    held = copy.deepcopy(peft_way)
    layers = hold_lora_inputs_in_their_dtype(held)
    config = peft_way.config
    widths = {config.hidden_size, config.intermediate_size}

    assert layers == 4 * config.num_hidden_layers  # query_key_value, dense, dense_h_to_4h, dense_4h_to_h
    assert saved_float32_inputs(peft_way, widths) == layers  # peft's cast copy of each LoRA layer's input
    assert saved_float32_inputs(held, widths) == 0
    loss, grads = loss_and_grads(peft_way)
    held_loss, held_grads = loss_and_grads(held)
    assert torch.equal(loss, held_loss)
    assert grads.keys() == held_grads.keys() and len(grads) == 2 * layers
    for name, grad in grads.items():
        assert torch.equal(grad, held_grads[name]), name
        assert held_grads[name].dtype == torch.float32 and grad.abs().sum() > 0


def test_float32_weights_are_unchanged():
    peft_way = lora_model(torch.float32)
    held = copy.deepcopy(peft_way)
    hold_lora_inputs_in_their_dtype(held)
    loss, grads = loss_and_grads(peft_way)
    held_loss, held_grads = loss_and_grads(held)
    assert torch.equal(loss, held_loss)
    assert all(torch.equal(grad, held_grads[name]) for name, grad in grads.items())


def test_dropout_keeps_peft_s_cast():
    """With lora_dropout the float32 copy is dropped out before the product: not the same maths in bfloat16."""
    assert hold_lora_inputs_in_their_dtype(lora_model(torch.bfloat16, lora_dropout=0.1)) == 0


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_an_adapter_added_later_gets_peft_s_cast_back_until_held_again(dropout):
    """A layer holds its inputs only while every adapter's first product casts them; one added afterwards (as
    PPO's critic adapter is) gets peft's float32 input, and the same output as without any of this."""
    peft_way = lora_model(torch.bfloat16)
    held = copy.deepcopy(peft_way)
    hold_lora_inputs_in_their_dtype(held)
    for model in (peft_way, held):
        torch.manual_seed(1)
        model.add_adapter("other", LoraConfig(r=4, target_modules="all-linear", lora_dropout=dropout))
        model.base_model.set_adapter(["default", "other"])
    ids = torch.arange(3, 35).view(2, 16)
    torch.manual_seed(2)
    expected = peft_way(input_ids=ids).logits
    torch.manual_seed(2)
    assert torch.equal(held(input_ids=ids).logits, expected)
    assert hold_lora_inputs_in_their_dtype(held) == (4 * held.config.num_hidden_layers if dropout == 0 else 0)


def test_the_policy_and_its_critic_adapter_are_built_holding_their_inputs():
    from lit_rlhf.models import load_policy, load_tokenizer
    from lit_rlhf.models.lora_inputs import CastInputLinear, is_lora_linear
    from lit_rlhf.models.value import CRITIC_ADAPTER, add_critic_adapter

    lora = {"r": 4, "lora_alpha": 8, "target_modules": "all-linear"}
    policy, _ = load_policy(TINY_PYTHIA, load_tokenizer(TINY_PYTHIA), dtype="bfloat16", lora=lora)
    config = policy.config
    widths = {config.hidden_size, config.intermediate_size}
    assert saved_float32_inputs(policy, widths) == 0
    add_critic_adapter(policy, lora)
    layers = [m for m in policy.modules() if is_lora_linear(m)]
    assert len(layers) == 4 * config.num_hidden_layers
    assert all(type(layer.lora_A[CRITIC_ADAPTER]) is CastInputLinear for layer in layers)
    with policy.disable_adapter():  # the reference: no adapter runs
        assert saved_float32_inputs(policy, widths) == 0
