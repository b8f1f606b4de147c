"""The weights a rollout engine receives: the policy's trained tensors under the base checkpoint's names, LoRA
merged, equal to peft's own merge; the policy itself untouched."""

import copy

import torch

from lit_rlhf.models import load_policy, load_tokenizer
from lit_rlhf.rollout.weights import checkpoint_name, trained_weights
from tests.conftest import LORA


def randomize_lora(policy):
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_()


def test_lora_weights_equal_peft_merge_and_unload(tiny_path):
    policy, _ = load_policy(tiny_path, load_tokenizer(tiny_path), lora=LORA)
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
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert set(weights) == trainable and "gpt_neox.embed_in.weight" not in weights


def test_checkpoint_names_drop_peft_wrappers():
    assert checkpoint_name("model.layers.0.q.base_layer.weight") == "model.layers.0.q.weight"
    assert checkpoint_name("lm_head.modules_to_save.default.weight") == "lm_head.weight"
    assert checkpoint_name("model.base_layerx.weight") == "model.base_layerx.weight"
