"""Messages a user cannot act on are silenced one by one (lit_rlhf/noise.py)."""

import warnings

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from lit_rlhf.noise import silence_known_noise


def test_lora_on_gpt2s_conv1d_layers_warns_nothing_a_user_could_act_on():
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("gpt2", vocab_size=100, n_embd=16, n_layer=1,
                                                                  n_head=2))
    silence_known_noise()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", append=True)  # after the silenced messages: every other warning is seen
        get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    assert [str(w.message) for w in caught if "fan_in_fan_out" in str(w.message)] == []
