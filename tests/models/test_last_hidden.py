"""The last hidden states the chunked and padding-free forwards multiply by the output layer: read from the decoder,
equal to output_hidden_states' last entry on every architecture, without the model returning every layer's input
(which a sharded model's root returns as FSDP2's views, and FSDP2 warns)."""

import inspect
import warnings

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.models.last_hidden import forward_with_last_hidden
from lit_rlhf.models.packing import last_hidden

SMALL = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=32)
ARCHITECTURES = {  # decoders under different attribute names: model, transformer, model.decoder, language_model
    "llama": SMALL,
    "gemma2": dict(SMALL, head_dim=8, final_logit_softcapping=0.5),
    "gpt2": dict(n_embd=16, n_layer=2, n_head=2),
    "opt": dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, ffn_dim=32, word_embed_proj_dim=16),
    "bloom": dict(hidden_size=16, n_layer=2, n_head=2),
}
LLAMA4 = dict(SMALL, head_dim=8, intermediate_size_mlp=32, num_local_experts=2, num_experts_per_tok=1)
IDS = torch.arange(3, 19).reshape(2, 8)


def tiny(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = AutoConfig.for_model(kind, vocab_size=100, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                  **ARCHITECTURES.get(kind, LLAMA4))
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


@pytest.mark.parametrize("kind", list(ARCHITECTURES))
def test_the_decoders_output_is_the_last_of_output_hidden_states(kind):
    model = tiny(kind)
    out, hidden = forward_with_last_hidden(model, input_ids=IDS, use_cache=False, logits_to_keep=1)
    assert out.hidden_states is None
    expected = model(input_ids=IDS, use_cache=False, output_hidden_states=True)
    torch.testing.assert_close(hidden, expected.hidden_states[-1], rtol=0, atol=0)
    torch.testing.assert_close(out.logits, expected.logits[:, -1:], rtol=0, atol=1e-6)  # one row of the product


def test_a_lora_wrapped_policy_reads_its_base_models_decoder():
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(TINY_PYTHIA),
                           LoraConfig(r=4, target_modules=["query_key_value"], init_lora_weights=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft's own deprecation notices
        _, hidden = forward_with_last_hidden(model, input_ids=IDS, use_cache=False, logits_to_keep=1)
        expected = model(input_ids=IDS, use_cache=False, output_hidden_states=True).hidden_states[-1]
        with model.disable_adapter():
            without_adapters = model(input_ids=IDS, use_cache=False, output_hidden_states=True).hidden_states[-1]
    torch.testing.assert_close(hidden, expected, rtol=0, atol=0)
    assert not torch.allclose(hidden, without_adapters)  # the adapters' decoder, not the base one's


def test_a_lora_wrapped_model_whose_get_decoder_is_the_causal_lm_reads_the_last_hidden_states():
    """Llama 4's get_decoder() is the causal LM itself, output layer included: under peft's wrapper that is not the
    model called, and the decoder's output would be the logits."""
    model = get_peft_model(tiny("llama4_text"), LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False))
    _, hidden = forward_with_last_hidden(model, input_ids=IDS, use_cache=False, logits_to_keep=1)
    expected = model(input_ids=IDS, use_cache=False, output_hidden_states=True).hidden_states[-1]
    torch.testing.assert_close(hidden, expected, rtol=0, atol=0)


def test_a_sharded_models_packed_forward_returns_no_fsdp2_view():
    """A full fine-tune's padding-free forward under trainer=fsdp2 (one gloo rank here): no FSDP2 warning about a
    view tensor, which the same forward with output_hidden_states=True gets, and the unsharded model's states."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp._fully_shard import _fsdp_state as fsdp_state

    from lit_rlhf.distributed.sharding import shard
    from tests.distributed.test_fsdp2_train import free_port

    positions = torch.arange(8).remainder(4).expand(2, 8)  # two packed sequences a row
    expected = last_hidden(AutoModelForCausalLM.from_pretrained(TINY_PYTHIA), IDS, positions)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                                         world_size=1)
    try:
        model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
        shard(model, init_device_mesh("cpu", (1,)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hidden = last_hidden(model, IDS, positions)
            hidden.square().mean().backward()
            ours = [str(w.message) for w in caught]
            model(input_ids=IDS, position_ids=positions, use_cache=False, output_hidden_states=True)
            with_every_layer = [str(w.message) for w in caught[len(ours):]]
    finally:
        torch.distributed.destroy_process_group()
    assert not [m for m in ours if "view tensor" in m]
    if "returned a view tensor" in inspect.getsource(fsdp_state):  # torch's that warn (2.13 does, 2.9 does not)
        assert [m for m in with_every_layer if "view tensor" in m]  # what the flag gives: the layers' inputs
    torch.testing.assert_close(hidden.detach(), expected.detach(), rtol=0, atol=1e-6)
