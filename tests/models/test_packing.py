"""Padding-free forwards on architectures other than the embedded GPT-NeoX: where transformers keeps the sequences of
a packed row apart the packed logprobs are the padded ones, and where it does not (OPT, BLOOM) the probe sees it and
the padded layout is used."""

import warnings

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from lit_rlhf.models.forwards import response_logprobs_and_entropy
from lit_rlhf.models.packing import keeps_packed_sequences_apart
from tests.algos.test_padding_free import PAD, batch

# tiny random models of each family: 2 layers, hidden 16, vocabulary 1000 (batch()'s ids are below 900)
ARCHITECTURES = {
    "gpt_neox": dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32),
    "llama": dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                  intermediate_size=32),
    "qwen2": dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                  intermediate_size=32),
    "gpt2": dict(n_embd=16, n_layer=2, n_head=2),
    "opt": dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, ffn_dim=32, word_embed_proj_dim=16),
    "bloom": dict(hidden_size=16, n_layer=2, n_head=2),
}
KEEP_APART = {"gpt_neox": True, "llama": True, "qwen2": True, "gpt2": True, "opt": False, "bloom": False}


def tiny(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = AutoConfig.for_model(kind, vocab_size=1000, pad_token_id=PAD, bos_token_id=0, eos_token_id=2,
                                  **ARCHITECTURES[kind])
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


@pytest.mark.parametrize("kind", list(ARCHITECTURES))
def test_padding_free_logprobs_are_the_padded_ones_on_every_architecture(kind):
    """Without the probe, OPT's packed logprobs were 3e-3 away from its padded ones and BLOOM's 2e-4: each sequence
    saw the ones packed before it."""
    model = tiny(kind).eval()
    inputs = batch()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            padded, padded_entropy = response_logprobs_and_entropy(model, *inputs, 0.7, None, None)
            packed, packed_entropy = response_logprobs_and_entropy(model, *inputs, 0.7, 4, PAD)
    torch.testing.assert_close(packed, padded, atol=1e-5, rtol=0)
    torch.testing.assert_close(packed_entropy, padded_entropy, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", list(ARCHITECTURES))
def test_the_probe_tells_the_architectures_that_keep_packed_sequences_apart_and_warns_once(kind):
    model = tiny(kind).train()
    forwards = []
    model.register_forward_hook(lambda *_: forwards.append(1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        verdicts = [keeps_packed_sequences_apart(model) for _ in range(2)]
    assert verdicts == [KEEP_APART[kind]] * 2
    assert len(forwards) == 2  # measured once (two forwards), then remembered
    assert model.training and all(m.training for m in model.modules())  # the mode it had
    messages = [str(w.message) for w in caught if "padding_free" in str(w.message)]
    if KEEP_APART[kind]:
        assert messages == []
    else:
        assert messages == [f"algo.padding_free: the {kind} model lets a sequence packed into a row attend to the ones "
                            f"before it (its attention mask is not built from the restarting position ids), so its "
                            f"forwards use the padded layout; set algo.padding_free=false to skip this check."]

