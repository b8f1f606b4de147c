"""Trained parameters the loss never reaches (a layer whose weight the model reads without calling it, as Mamba's mixer
reads dt_proj's) are one warning after the fit's first backward, naming their layers; every other backward says
nothing. pyproject.toml makes the warning an error everywhere else in the suite: no algorithm's step may raise it."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from lit_rlhf.algos.gradient_reach import ChecksGradientReach, layer_of, say_unreached_layers, unreached_layers
from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.models import load_tokenizer
from lit_rlhf.models.policy import with_lora
from tests.apps import run_app
from tests.helpers import FAST, one_line_error


@pytest.mark.parametrize("parameter, layer", [
    ("policy.base_model.model.backbone.layers.0.mixer.dt_proj.lora_A.default.weight",
     "backbone.layers.0.mixer.dt_proj"),
    ("policy.base_model.model.model.layers.1.self_attn.q_proj.lora_magnitude_vector.default.weight",
     "model.layers.1.self_attn.q_proj"),
    ("policy.model.layers.0.mlp.up_proj.bias", "model.layers.0.mlp.up_proj"),  # a full fine-tune
    ("value_head.summary.weight", "value_head.summary"),
])
def test_a_parameter_is_named_by_its_layer(parameter, layer):
    assert layer_of(parameter) == layer


class ReadsAWeight(ChecksGradientReach, torch.nn.Module):
    """`direct`'s weight multiplied without calling the layer, as Mamba's mixer does dt_proj's (calls_it: called)."""

    def __init__(self, calls_it: bool = False):
        super().__init__()
        self.called, self.direct = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        self.calls_it = calls_it

    def forward(self, x):
        return self.direct(self.called(x)) if self.calls_it else self.called(x) @ self.direct.weight.detach().T


def test_the_first_backward_names_the_layers_no_gradient_reached():
    module = ReadsAWeight()
    module(torch.ones(2, 4)).sum().backward()
    assert unreached_layers(module) == ["direct"]
    with pytest.warns(UserWarning, match=r"^No gradient reached the trained parameters of 1 layers \(e.g. direct\): "
                                         r"the loss does not use them .* leave them out of "
                                         r"model.lora.target_modules, or with trainer=ddp set "
                                         r"trainer.strategy=ddp_find_unused_parameters_true.$"):
        module.on_after_backward()  # Lightning's hook, after every backward


def test_only_the_first_backward_of_a_fit_is_checked():
    module = ReadsAWeight(calls_it=True)
    module(torch.ones(2, 4)).sum().backward()
    module.on_after_backward()  # every layer reached
    module.zero_grad(set_to_none=True)
    module.calls_it = False
    module(torch.ones(2, 4)).sum().backward()
    assert unreached_layers(module) == ["direct"]
    module.on_after_backward()  # not checked again: an error here (pyproject.toml) if it warned


def test_a_backward_that_reached_every_layer_or_none_says_nothing():
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    assert unreached_layers(module) == []  # no backward yet: nothing to judge
    module(torch.ones(2, 4)).sum().backward()
    assert unreached_layers(module) == []
    say_unreached_layers(module)  # an error here (pyproject.toml) if it warned


def linear_layers_not_called(model: torch.nn.Module, input_ids: torch.Tensor) -> list[str]:
    """The model's Linear layers whose forward its forward never calls (forward hooks)."""
    called = set()
    layers = {name: module for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    hooks = [module.register_forward_hook(lambda module, args, output, name=name: called.add(name))
             for name, module in layers.items()]
    with torch.no_grad():
        model(input_ids=input_ids)
    for hook in hooks:
        hook.remove()
    return [name for name in layers if name not in called]


def test_mambas_adapters_that_the_forward_never_calls_are_named_after_a_backward():
    """Mamba's mixer multiplies by dt_proj's weight itself in recent transformers (5.5 still calls it): the
    layers named are the ones its forward does not call, whichever the installed release."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("mamba", vocab_size=50, hidden_size=16,
                                                                  num_hidden_layers=1, state_size=4))
    input_ids = torch.tensor([[1, 2, 3]])
    not_called = [name for name in linear_layers_not_called(model, input_ids) if name.endswith(("x_proj", "dt_proj"))]
    policy = with_lora(model, dict(r=2, lora_alpha=4, target_modules=["in_proj", "x_proj", "dt_proj"]), "CAUSAL_LM",
                       "tiny-mamba")
    policy(input_ids=input_ids).logits.sum().backward()
    assert unreached_layers(policy) == not_called


@pytest.mark.integration  # runs train.py
def test_under_ddp_a_layer_the_loss_never_reaches_stops_the_first_step_in_one_line(tmp_path):
    """trainer=ddp (one device: the same DDP wrapper) with an adapter on Mamba's dt_proj, which the mixer reads
    without calling: one line naming the layer and both fixes, exit 2, in place of DDP's traceback a step later. With
    the adapters on layers the forward calls, the run trains, and its held-out evaluation leaves Lightning nothing to
    warn about (sync_dist)."""
    tokenizer = load_tokenizer(TINY_PYTHIA)
    config = AutoConfig.for_model("mamba", vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1,
                                  state_size=4, eos_token_id=tokenizer.eos_token_id)
    model = AutoModelForCausalLM.from_config(config)
    if not linear_layers_not_called(model, torch.tensor([[1, 2, 3]])):
        pytest.skip("this transformers release's Mamba calls dt_proj (5.5 does)")
    model.save_pretrained(tmp_path / "mamba")
    tokenizer.save_pretrained(tmp_path / "mamba")
    run = [*[a for a in FAST if not a.startswith("steps=")], "steps=2", "trainer=ddp", "trainer.accelerator=cpu",
           "trainer.devices=1", f"model.name_or_path={tmp_path / 'mamba'}", "algo.padding_free=false"]

    stopped = run_app("train.py", *run, "model.lora.target_modules=[in_proj,dt_proj]", f"hydra.run.dir={tmp_path}/a",
                      cwd=tmp_path)
    assert one_line_error(stopped) == (
        "error: No gradient reached the trained parameters of 1 layers (e.g. backbone.layers.0.mixer.dt_proj): the "
        "loss does not use them (a model may read a layer's weight without calling it), so they never train, and "
        "trainer=ddp stops on them; leave them out of model.lora.target_modules, or set "
        "trainer.strategy=ddp_find_unused_parameters_true.")

    trained = run_app("train.py", *run, "model.lora.target_modules=[in_proj,x_proj]", f"hydra.run.dir={tmp_path}/b",
                      cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "eval/scores" in (tmp_path / "b" / "csv" / "metrics.csv").read_text().splitlines()[0]  # evaluated
    assert "sync_dist" not in trained.stderr
