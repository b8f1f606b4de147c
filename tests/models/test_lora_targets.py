"""LoRA on models that subclass nn.Linear for layers that are not linear maps (Llama 4's and Phi-MoE's routers): those
layers get no adapter, the run says so, and the model trains; every plain linear map still gets one."""

import logging
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, Gemma3Config
from transformers.models.falcon.modeling_falcon import FalconLinear
from transformers.models.llama4.modeling_llama4 import Llama4Router
from transformers.models.phimoe.modeling_phimoe import PhimoeTopKRouter

from lit_rlhf.algos.gradient_reach import unreached_layers
from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.errors import ConfigError
from lit_rlhf.models import load_policy, load_tokenizer, lora_targets
from lit_rlhf.models.lora_targets import computes_a_linear_map, layers_lora_cannot_adapt
from lit_rlhf.models.output_layer import Float32OutputLayer
from lit_rlhf.models.policy import with_lora

ROUTER_CONFIG = SimpleNamespace(hidden_size=8, num_local_experts=4, num_experts_per_tok=2, router_jitter_noise=0.0,
                                input_jitter_noise=0.0)
LORA = dict(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear")


class GroupedLinear(torch.nn.Linear):
    """Each of 2 groups of inputs projected by its own block of rows (DeepSeek-V4's grouped output projection)."""

    def forward(self, x):
        w = self.weight.view(2, -1, self.in_features).transpose(1, 2)
        return torch.bmm(x.reshape(-1, 2, self.in_features).transpose(0, 1), w).transpose(0, 1).reshape(-1, 2,
                                                                                                         w.shape[-1])


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("layer, is_linear_map", [
    (lambda: torch.nn.Linear(8, 4), True),
    (lambda: FalconLinear(8, 4, bias=True), True),  # its own forward, computing x·Wᵀ + b
    (lambda: Float32OutputLayer(8, 4), True),  # the same under autocast set for its input's device
    (lambda: Llama4Router(ROUTER_CONFIG), False),  # (scores, logits)
    (lambda: PhimoeTopKRouter(ROUTER_CONFIG), False),  # (logits, weights, experts)
    (lambda: GroupedLinear(8, 4), False),  # a tensor of another shape
], ids=["Linear", "FalconLinear", "Float32OutputLayer", "Llama4Router", "PhimoeTopKRouter", "grouped"])
def test_a_layer_is_a_linear_map_when_its_forward_gives_one_tensor_of_that_shape(layer, is_linear_map, device):
    with torch.device(device):  # meta: a layer not yet read under sharded loading
        assert computes_a_linear_map(layer()) is is_linear_map


def tiny_llama4() -> torch.nn.Module:
    torch.manual_seed(0)
    config = AutoConfig.for_model("llama4_text", vocab_size=100, hidden_size=16, num_hidden_layers=2,
                                  num_attention_heads=2, num_key_value_heads=1, head_dim=8, intermediate_size=32,
                                  intermediate_size_mlp=32, num_local_experts=4, num_experts_per_tok=1)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def test_llama4_trains_with_all_linear_adapters_and_its_routers_left_out(caplog, monkeypatch):
    monkeypatch.setattr(lora_targets, "_said", set())  # said once a process
    model = tiny_llama4()
    routers = [name for name, module in model.named_modules() if isinstance(module, Llama4Router)]
    assert list(layers_lora_cannot_adapt(model)) == routers and len(routers) == 2
    input_ids = torch.tensor([[1, 5, 7, 9, 11]])
    with torch.no_grad():
        base_logits = model(input_ids=input_ids).logits
    with caplog.at_level(logging.INFO):
        policy = with_lora(model, dict(LORA), "CAUSAL_LM", "tiny-llama4")
    assert f"LoRA leaves out 2 layers (Llama4Router: its forward is not a linear map), e.g. {routers[0]}." in \
        caplog.text
    adapted = {name.removeprefix("base_model.model.").removesuffix(".lora_A.default")
               for name, _ in policy.named_modules() if name.endswith(".lora_A.default")}
    assert not adapted & set(routers)
    assert {"model.layers.0.self_attn.q_proj", "model.layers.0.feed_forward.shared_expert.down_proj"} <= adapted
    assert isinstance(policy.get_submodule(f"base_model.model.{routers[0]}"), Llama4Router)  # not wrapped
    assert trains_from_the_base_model(policy, input_ids, base_logits) == []


def trains_from_the_base_model(policy, input_ids, base_logits) -> list[str]:
    """Checks the adapted model's logits at the start, backpropagates; -> the layers whose adapters got no gradient."""
    logits = policy(input_ids=input_ids).logits
    torch.testing.assert_close(logits, base_logits)  # B starts at zero: the adapted model is the base model
    logits.logsumexp(-1).sum().backward()
    return unreached_layers(policy)


@pytest.mark.parametrize("kind, settings", [
    ("mamba", dict(hidden_size=16, num_hidden_layers=2, state_size=4)),
    ("falcon_h1", dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                       intermediate_size=32, mamba_d_ssm=16, mamba_n_heads=2, mamba_d_head=8, mamba_d_state=4,
                       mamba_n_groups=1)),
])
def test_a_mamba_based_model_trains_with_all_linear_adapters_but_on_the_out_projection_peft_refuses(
        kind, settings, caplog, monkeypatch):
    """peft raises for an adapter on a Mamba mixer's out_proj (its fused kernels read the weight directly), all-linear
    included: those are left out, the mixer's other projections (and Falcon-H1's attention) get adapters."""
    monkeypatch.setattr(lora_targets, "_said", set())
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, vocab_size=100, **settings))
    out_projections = [name for name, _ in model.named_modules() if name.endswith(".out_proj")]
    assert list(layers_lora_cannot_adapt(model)) == out_projections and len(out_projections) == 2
    input_ids = torch.tensor([[1, 5, 7, 9, 11]])
    with torch.no_grad():
        base_logits = model(input_ids=input_ids).logits
    with caplog.at_level(logging.INFO):
        policy = with_lora(model, dict(LORA), "CAUSAL_LM", f"tiny-{kind}")
    assert f"LoRA leaves out 2 layers (out_proj: peft adapts none on a {kind} model), e.g. " in caplog.text
    adapted = {name.removeprefix("base_model.model.").removesuffix(".lora_A.default").rsplit(".", 1)[-1]
               for name, _ in policy.named_modules() if name.endswith(".lora_A.default")}
    assert "in_proj" in adapted and "out_proj" not in adapted
    assert kind != "falcon_h1" or {"q_proj", "o_proj", "down_proj"} <= adapted
    trains_from_the_base_model(policy, input_ids, base_logits)  # dt_proj's adapters: tests/algos/test_gradient_reach.py


def tiny_gemma3_with_vision() -> torch.nn.Module:
    """As Gemma 3's checkpoints load: Gemma3ForConditionalGeneration, a vision tower beside the text decoder."""
    torch.manual_seed(0)
    config = Gemma3Config(text_config=dict(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                           num_key_value_heads=1, intermediate_size=32, head_dim=8),
                          vision_config=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=32, image_size=28, patch_size=14), mm_tokens_per_image=4)
    model = AutoModelForCausalLM.from_config(config).eval()  # in training, transformers 5.5 asks for token_type_ids
    assert type(model).__name__ == "Gemma3ForConditionalGeneration"
    return model


def test_a_multimodal_checkpoints_vision_tower_gets_no_adapters_and_every_adapter_trains(caplog, monkeypatch):
    """Text prompts never reach the vision tower, whose adapters would get no gradient (and stop trainer=ddp on
    unused parameters)."""
    monkeypatch.setattr(lora_targets, "_said", set())
    model = tiny_gemma3_with_vision()
    vision = [name for name, module in model.named_modules()
              if isinstance(module, torch.nn.Linear) and ".vision_tower." in f".{name}"]
    assert vision and list(layers_lora_cannot_adapt(model)) == vision
    input_ids = torch.tensor([[1, 5, 7, 9, 11]])
    with torch.no_grad():
        base_logits = model(input_ids=input_ids).logits
    with caplog.at_level(logging.INFO):
        policy = with_lora(model, dict(LORA), "CAUSAL_LM", "tiny-gemma3")
    assert f"LoRA leaves out {len(vision)} layers (vision_tower: outside the text decoder, which the prompts go " \
           f"through), e.g. {vision[0]}." in caplog.text
    assert any(".language_model." in name for name, _ in policy.named_modules() if name.endswith(".lora_A.default"))
    assert trains_from_the_base_model(policy, input_ids, base_logits) == []


def test_a_full_fine_tune_of_a_multimodal_checkpoint_trains_all_but_its_vision_tower(tmp_path, caplog):
    model = tiny_gemma3_with_vision()
    model.save_pretrained(tmp_path / "gemma3")
    load_tokenizer(TINY_PYTHIA).save_pretrained(tmp_path / "gemma3")
    with caplog.at_level(logging.INFO):
        policy, _ = load_policy(str(tmp_path / "gemma3"), load_tokenizer(TINY_PYTHIA), lora=None)
    assert "model.lora=null: the model's vision_tower, multi_modal_projector stay frozen" in caplog.text
    trained = {name for name, param in policy.named_parameters() if param.requires_grad}
    assert trained and not any(".vision_tower." in name or ".multi_modal_projector." in name for name in trained)
    assert all(".language_model." in name or name.startswith("lm_head.") for name in trained)
    policy.eval()(input_ids=torch.tensor([[1, 5, 7]])).logits.sum().backward()
    assert unreached_layers(policy) == []


def test_target_modules_that_name_only_layers_left_out_are_one_line():
    with pytest.raises(ConfigError, match=r"^model.lora.target_modules=\['router'\] names only layers LoRA leaves out "
                                          r"on tiny-llama4 \(e.g. model.layers.0.feed_forward.router, said above\); "
                                          r"name others, e.g. \["):
        with_lora(tiny_llama4(), dict(LORA, target_modules=["router"]), "CAUSAL_LM", "tiny-llama4")


@pytest.mark.parametrize("modules", [[], "", ["query_key_value", 5]])
def test_target_modules_that_name_no_module_are_one_line_before_peft_reads_them(modules):
    """[] or an empty value was peft's NoMatchingPeftModuleError traceback, a number in the list an AttributeError."""
    from lit_rlhf.config.model import LoraSettings

    with pytest.raises(ConfigError) as err:
        LoraSettings(target_modules=modules)
    assert str(err.value) == (f"model.lora.target_modules={modules!r} must be all-linear or a non-empty list of module "
                              f"names (e.g. [query_key_value]); model.lora=null trains every weight instead.")
    assert LoraSettings(target_modules=("query_key_value",)).target_modules == ["query_key_value"]
    with pytest.raises(ConfigError, match=r"^model.lora.lora_dropout='abc' must be a number in \[0, 1\)\.$"):
        LoraSettings(lora_dropout="abc")  # a TypeError from Python
