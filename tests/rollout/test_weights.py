"""The weights a rollout engine receives: the policy's trained tensors under the base checkpoint's names, LoRA
merged, equal to peft's own merge; the policy itself untouched."""

import copy

import pytest
import torch
from safetensors.torch import load_file

from lit_rlhf.models import load_policy, load_tokenizer
from lit_rlhf.rollout.weights import checkpoint_name, trained_weights
from tests.conftest import LORA


def randomize_lora(policy):
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_()
            if "lora_magnitude_vector" in name:  # DoRA's magnitudes, away from the norms they start at
                param.mul_(1.5)


@pytest.mark.parametrize("variant", [{}, {"use_rslora": True}, {"use_dora": True}], ids=["lora", "rslora", "dora"])
def test_lora_weights_equal_peft_merge_and_unload(variant, tiny_path):
    policy, _ = load_policy(tiny_path, load_tokenizer(tiny_path), lora={**LORA, **variant})
    randomize_lora(policy)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    weights = trained_weights(policy)
    merged = copy.deepcopy(policy).merge_and_unload().state_dict()
    assert weights and set(weights) <= set(merged)
    assert any(k.endswith("attention.query_key_value.weight") for k in weights)
    for name, tensor in weights.items():
        torch.testing.assert_close(tensor, merged[name], rtol=0, atol=1e-6)
    base = policy.get_base_model().gpt_neox.layers[0].attention.query_key_value.base_layer.weight
    assert not torch.allclose(weights["gpt_neox.layers.0.attention.query_key_value.weight"], base)  # merged
    for key, value in policy.state_dict().items():  # nothing merged into the policy in place
        assert torch.equal(value, before[key])


def test_full_fine_tuning_sends_every_trainable_parameter(tiny_path):
    policy, _ = load_policy(tiny_path, load_tokenizer(tiny_path), lora=None)
    policy.gpt_neox.embed_in.requires_grad_(False)
    weights = trained_weights(policy)
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    saved = load_file(f"{tiny_path}/model.safetensors")  # under the checkpoint's names (pythia's head: embed_out)
    assert len(weights) == len(trainable) and set(weights) <= set(saved) and "gpt_neox.embed_in.weight" not in weights
    for name, tensor in weights.items():
        assert torch.equal(tensor, saved[name]), name


def test_checkpoint_names_drop_peft_wrappers():
    assert checkpoint_name("model.layers.0.q.base_layer.weight") == "model.layers.0.q.weight"
    assert checkpoint_name("lm_head.modules_to_save.default.weight") == "lm_head.weight"
    assert checkpoint_name("model.base_layerx.weight") == "model.base_layerx.weight"


def test_adapter_only_sync_refuses_what_an_adapter_file_cannot_carry(tiny_path, tmp_path):
    """rollout.weight_sync=adapter: a policy without LoRA, or one that also trains weights outside its adapters
    (peft's bias="all"), or DoRA adapters, are refused in one line naming the setting that works, before anything is
    sent."""
    from lit_rlhf.errors import ConfigError
    from lit_rlhf.rollout.context import SamplingContext
    from lit_rlhf.rollout.vllm_server import VLLMServerEngine
    from lit_rlhf.rollout.weights import trained_outside_lora

    with pytest.raises(ConfigError, match=r"rollout.weight_sync='whole' is not one of merged, adapter"):
        VLLMServerEngine(urls="http://127.0.0.1:1", weight_sync="whole")
    engine = VLLMServerEngine(urls="http://127.0.0.1:1", weight_sync="adapter", weights_dir=str(tmp_path))
    tokenizer = load_tokenizer(tiny_path)
    full, _ = load_policy(tiny_path, tokenizer, lora=None)
    with pytest.raises(ConfigError, match=r"this policy has none \(model.lora=null\): use rollout.weight_sync=merged"):
        engine.sync(SamplingContext(settings=None, tokenizer=tokenizer, policy=full))
    lora, _ = load_policy(tiny_path, tokenizer, lora=LORA)
    assert trained_outside_lora(lora) == []
    with_biases, _ = load_policy(tiny_path, tokenizer, lora={**LORA, "bias": "all"})
    assert trained_outside_lora(with_biases)[0] == "base_model.model.gpt_neox.layers.0.input_layernorm.bias"
    assert all(name.endswith(".bias") for name in trained_outside_lora(with_biases))
    with pytest.raises(ConfigError, match=r"also trains .*input_layernorm\.bias.*: use rollout.weight_sync="):
        engine.sync(SamplingContext(settings=None, tokenizer=tokenizer, policy=with_biases))
    dora, _ = load_policy(tiny_path, tokenizer, lora={**LORA, "use_dora": True})
    with pytest.raises(ConfigError, match=r"vLLM does not serve DoRA adapters \(model.lora.use_dora=true\): use "
                                          r"rollout.weight_sync=merged.$"):
        engine.sync(SamplingContext(settings=None, tokenizer=tokenizer, policy=dora))
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("lora", [LORA, None], ids=["lora", "full"])
def test_a_mixture_of_experts_is_sent_in_its_checkpoints_layout(lora, tmp_path):
    """Qwen3-MoE holds its experts stacked (transformers' loading conversion) and its files one tensor per expert: the
    engine gets what save_pretrained writes of the merged policy, names and tensors. The experts' adapters are peft's
    parameter wrappers, whose merge is of the stacked tensor, not of a weight (the sync stopped with "'Qwen3MoeExperts'
    object has no attribute 'weight'"); without LoRA the stacked names were sent, which no engine loads."""
    from tests.algos.test_router_aux_loss import save_tiny_moe

    path = save_tiny_moe(tmp_path / "moe")
    policy, _ = load_policy(path, load_tokenizer(path), lora=lora)
    randomize_lora(policy)
    weights = trained_weights(policy)
    merged = copy.deepcopy(policy).merge_and_unload() if lora else policy
    merged.save_pretrained(tmp_path / "merged")
    saved = load_file(tmp_path / "merged" / "model.safetensors")
    assert "model.layers.0.mlp.experts.3.gate_proj.weight" in weights
    assert set(weights) <= set(saved) and (lora or set(weights) == set(saved))
    for name, tensor in weights.items():
        torch.testing.assert_close(tensor, saved[name], rtol=0, atol=1e-6)
    if lora:
        untouched = load_file(f"{path}/model.safetensors")["model.layers.0.mlp.experts.3.down_proj.weight"]
        assert not torch.allclose(weights["model.layers.0.mlp.experts.3.down_proj.weight"], untouched)  # merged
