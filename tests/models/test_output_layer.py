"""Models that change their logits after the output layer (Gemma 2's softcap, Granite's and Cohere's scales): the
chunked logprob paths see it and take the model's own logits, and the full-vocabulary divergence refuses them."""

import warnings

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from lit_rlhf.algos.distill import check_output_layer
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.forwards import response_logprobs_and_entropy
from lit_rlhf.models.output_layer import logits_are_the_output_layers
from tests.algos.test_padding_free import PAD, batch

SMALL = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=32)
ARCHITECTURES = {  # the transform set where a random model's logits (about 1) feel it
    "gemma2": dict(SMALL, head_dim=8, final_logit_softcapping=0.5),
    "granite": dict(SMALL, logits_scaling=8.0),
    "cohere": dict(SMALL, logit_scale=0.25),
    "llama": SMALL,
}
PLAIN = {"gemma2": False, "granite": False, "cohere": False, "llama": True}


def tiny(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = AutoConfig.for_model(kind, vocab_size=1000, pad_token_id=PAD, bos_token_id=0, eos_token_id=2,
                                  **ARCHITECTURES[kind])
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


@pytest.mark.parametrize("kind", list(ARCHITECTURES))
def test_chunked_and_padding_free_logprobs_are_the_models_own(kind):
    """Without the probe, the chunked logprobs of the three transformed models were those of the untransformed
    logits: up to 0.2 nats off here, 8 to 11 on logits of a trained model's size (the output layer's weights x 40)."""
    model = tiny(kind)
    inputs = batch()
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        full, full_entropy = response_logprobs_and_entropy(model, *inputs, 0.7, None, None)
        for chunk_size, pad in ((4, None), (4, PAD)):
            chunked, entropy = response_logprobs_and_entropy(model, *inputs, 0.7, chunk_size, pad)
            torch.testing.assert_close(chunked, full, atol=1e-5, rtol=0)
            torch.testing.assert_close(entropy, full_entropy, atol=1e-5, rtol=0)
    assert logits_are_the_output_layers(model) is PLAIN[kind]
    messages = [str(w.message) for w in caught if "logits_chunk_size" in str(w.message)]
    assert messages == ([] if PLAIN[kind] else [
        f"algo.logits_chunk_size: the {kind} model changes its logits after its output layer (e.g. a softcap or a "
        f"scale), so its logprobs come from its own forward's full logits, (sequences, positions, vocabulary) at "
        f"once: lower algo.forward_batch_size if they do not fit."])


def test_the_full_vocabulary_divergence_refuses_a_model_that_changes_its_logits():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_output_layer(tiny("llama"), "teacher")
        with pytest.raises(ConfigError) as refused:
            check_output_layer(tiny("gemma2"), "teacher")
    assert str(refused.value) == ("algo.divergence=generalized_jsd: the teacher (gemma2) changes its logits after its "
                                  "output layer (e.g. a softcap or a scale), which the chunked full-vocabulary "
                                  "divergence does not apply; use algo.divergence=sampled_token.")
