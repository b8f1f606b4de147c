"""model.cast_lm_head_to_fp32 (TRL's cast_lm_head_to_fp32): a bfloat16 model's output layer kept and computed in
float32, through the model's forward, generate(), and the chunked logprob paths, for the policy and its reference."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.errors import ConfigError
from lit_rlhf.models import load_policy, load_tokenizer
from lit_rlhf.models.forwards import last_tokens_logprobs_and_entropy, sequence_inputs
from lit_rlhf.models.output_layer import Float32OutputLayer, cast_output_layer_to_float32
from tests.conftest import LORA


def tiny_llama(tied: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    config = AutoConfig.for_model("llama", vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  num_key_value_heads=1, intermediate_size=32, tie_word_embeddings=tied)
    return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_the_logits_are_the_float32_product_of_the_last_hidden_states(tied):
    model = tiny_llama(tied)
    weight = model.lm_head.weight.detach().float().clone()  # the bfloat16 values, exactly, in float32
    ids = torch.tensor([[5, 17, 3, 42]])
    with torch.no_grad():
        before = model(input_ids=ids).logits
    cast_output_layer_to_float32(model, "model.name_or_path")
    assert type(model.lm_head) is Float32OutputLayer and model.lm_head.weight.dtype == torch.float32
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied  # tying kept
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast does not bring bfloat16 logits back
            under_autocast = model(input_ids=ids).logits
    assert before.dtype == torch.bfloat16 and out.logits.dtype == under_autocast.dtype == torch.float32
    assert out.hidden_states[0].dtype == out.hidden_states[-1].dtype == torch.bfloat16  # the rest stays bfloat16
    torch.testing.assert_close(out.logits, out.hidden_states[-1].float() @ weight.T, rtol=0, atol=0)
    torch.testing.assert_close(under_autocast, out.logits, rtol=0, atol=0)
    assert not torch.equal(out.logits, before.float())  # bfloat16 logits round what float32 keeps
    torch.testing.assert_close(out.logits, before.float(), rtol=0, atol=0.02)


def perturbed_policy(**spec):
    tokenizer = load_tokenizer(TINY_PYTHIA)
    policy, reference = load_policy(TINY_PYTHIA, tokenizer, dtype="bfloat16", **spec)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn_like(param) * 0.1)
    return policy, reference


def logprobs_and_lora_gradient(policy, chunk_size):
    torch.manual_seed(2)
    queries, responses = torch.randint(10, 900, (3, 5)), torch.randint(10, 900, (3, 7))
    query_mask, response_mask = torch.ones_like(queries), torch.arange(7) < torch.tensor([[7], [4], [1]])
    inputs = sequence_inputs(queries, query_mask, responses, response_mask)
    logprobs, _ = last_tokens_logprobs_and_entropy(policy, inputs, responses, response_mask, 0.7, chunk_size)
    policy.zero_grad()
    logprobs.sum().backward()
    grads = {name: param.grad.float().clone() for name, param in policy.named_parameters() if param.grad is not None}
    return logprobs.detach(), grads


@pytest.mark.parametrize("autocast", [False, True], ids=["bfloat16", "bfloat16_autocast"])
def test_chunked_logprobs_are_those_of_the_float32_logits_with_their_gradient(autocast):
    """The chunked path multiplies the last hidden states with the layer's float32 weights (without the cast, bfloat16
    hidden states and float32 weights fail there); its logprobs and LoRA gradients are the full float32 logits'."""
    policy, _ = perturbed_policy(lora=LORA, cast_lm_head_to_fp32=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        chunked, chunked_grads = logprobs_and_lora_gradient(policy, chunk_size=4)
        full, full_grads = logprobs_and_lora_gradient(policy, chunk_size=None)
    assert chunked.dtype == torch.float32 and chunked_grads.keys() == full_grads.keys() and full_grads
    torch.testing.assert_close(chunked, full, rtol=0, atol=1e-5)
    for name, grad in full_grads.items():  # equal without autocast; under it, bfloat16 backward matmuls round both
        tolerance = 0.03 * float(grad.abs().max()) if autocast else 0.0
        torch.testing.assert_close(chunked_grads[name], grad, rtol=0, atol=tolerance, msg=name)
    plain, _ = perturbed_policy(lora=LORA)
    bfloat16_logprobs, _ = logprobs_and_lora_gradient(plain, chunk_size=4)
    assert (bfloat16_logprobs - full).abs().max() > 1e-4  # the setting changes what is computed


def test_the_reference_has_the_float32_layer_too():
    policy, reference = perturbed_policy(lora=None, cast_lm_head_to_fp32=True)
    assert type(policy.get_output_embeddings()) is Float32OutputLayer
    assert type(reference.frozen_copy.get_output_embeddings()) is Float32OutputLayer
    lora_policy, lora_reference = perturbed_policy(lora=LORA, cast_lm_head_to_fp32=True)
    with lora_reference.active() as ref:  # the policy with adapters off: its own layer
        assert type(ref.get_output_embeddings()) is Float32OutputLayer


def test_an_adapter_on_the_output_layer_and_sharded_loading_are_refused_in_one_line():
    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    head = next(name for name, module in model.named_modules() if module is model.get_output_embeddings())
    # lm_head, or embed_out under the transformers releases that named GPT-NeoX's head so
    with pytest.raises(ConfigError, match=r"^model.cast_lm_head_to_fp32=true with a LoRA adapter on the output layer "
                                          r"\(model.lora.target_modules names it\): remove it"):
        perturbed_policy(lora={**LORA, "target_modules": ["query_key_value", head]}, cast_lm_head_to_fp32=True)
    with pytest.raises(ConfigError, match=r"^model.cast_lm_head_to_fp32=true is not supported with trainer=fsdp2"):
        perturbed_policy(lora=LORA, cast_lm_head_to_fp32=True, empty=True)
    from lit_rlhf.distributed.sharding import shard

    policy, _ = perturbed_policy(lora=LORA, cast_lm_head_to_fp32=True)
    with pytest.raises(ConfigError, match=r"^model.cast_lm_head_to_fp32=true is not supported with trainer=fsdp2"):
        shard(policy, mesh=None)  # refused before anything is sharded


@pytest.mark.integration
def test_a_bfloat16_grpo_step_samples_and_trains_with_the_float32_layer():
    """model.cast_lm_head_to_fp32 reaches the module's policy from its model spec, and a step of sampling (generate())
    and training runs on it: its first update is on-policy (ratio 1), its KL to the reference (the same layer, adapters
    off) 0, its statistics finite."""
    import lightning as L

    from tests.algos.test_grpo import make
    from tests.conftest import make_datamodule

    module = make(model={"name_or_path": TINY_PYTHIA, "lora": LORA, "dtype": "bfloat16", "cast_lm_head_to_fp32": True})
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    trainer.fit(module, make_datamodule())
    assert type(module.policy.get_output_embeddings()) is Float32OutputLayer
    metrics = trainer.callback_metrics
    assert all(torch.isfinite(value).all() for value in metrics.values())
    assert float(metrics["val/ratio"]) == pytest.approx(1.0, abs=1e-3)
    assert float(metrics["objective/kl"]) == pytest.approx(0.0, abs=1e-6)  # LoRA's B starts at 0: the reference
