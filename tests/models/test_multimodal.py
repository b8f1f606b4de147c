"""A multimodal checkpoint (Gemma 3's loads as Gemma3ForConditionalGeneration) trains on text prompts: its training
forward, which at transformers 5.5 raises without marks of which tokens are image tokens, gets them marked as text;
PPO's value head and the compiled decoding's context read the sizes its text config holds. One whose towers need a
package that is not installed (Gemma 3n's, timm) is one line naming it."""

import copy
import importlib.util

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoConfig

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.errors import ConfigError
from lit_rlhf.models import load_policy, load_tokenizer
from lit_rlhf.rollout.compiled_decoding import model_context
from tests.conftest import LORA, make_ppo
from tests.models.test_lora_targets import tiny_gemma3_with_vision


@pytest.fixture
def gemma3_folder(tmp_path):
    tiny_gemma3_with_vision().save_pretrained(tmp_path / "gemma3")
    load_tokenizer(TINY_PYTHIA).save_pretrained(tmp_path / "gemma3")
    return str(tmp_path / "gemma3")


@pytest.mark.parametrize("lora", [LORA, None], ids=["lora", "full fine-tune"])
def test_a_training_forward_on_text_marks_every_token_as_text(gemma3_folder, lora):
    """The logits of a training forward given no marks are those given all-text marks (zeros); the frozen reference
    of a full fine-tune, a deep copy, keeps the marking; an evaluation forward is left as it is."""
    policy, reference = load_policy(gemma3_folder, load_tokenizer(TINY_PYTHIA), lora=lora)
    input_ids = torch.tensor([[1, 5, 7, 9], [2, 4, 6, 8]])
    text = torch.zeros_like(input_ids)
    policy.train()
    torch.testing.assert_close(policy(input_ids=input_ids).logits,
                               policy(input_ids=input_ids, token_type_ids=text).logits, rtol=0, atol=0)
    copied = copy.deepcopy(policy).train()
    torch.testing.assert_close(copied(input_ids=input_ids).logits, policy(input_ids=input_ids).logits, rtol=0, atol=0)
    policy.eval()
    torch.testing.assert_close(policy(input_ids=input_ids).logits,
                               policy(input_ids=input_ids, token_type_ids=text).logits, rtol=0, atol=0)


def test_ppos_value_head_and_the_decoding_context_read_the_text_config(gemma3_folder):
    module = make_ppo(model={"name_or_path": gemma3_folder, "lora": LORA})
    module.configure_model()
    text_config = module.policy.config.get_text_config()
    assert text_config is not module.policy.config  # the sizes are not at the top level
    assert module.value_head.summary.in_features == text_config.hidden_size == 16
    assert model_context(module.policy) == text_config.max_position_embeddings


@pytest.mark.skipif(importlib.util.find_spec("timm") is not None, reason="timm is installed here")
def test_a_checkpoint_whose_model_needs_a_package_not_installed_is_one_line(tmp_path):
    AutoConfig.for_model("gemma3n").save_pretrained(tmp_path)  # its vision tower is timm's
    save_file({"unread": torch.zeros(1)}, tmp_path / "model.safetensors")  # the class is built before weights are read
    tokenizer = load_tokenizer(TINY_PYTHIA)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=rf"^model.name_or_path='{tmp_path}' cannot be loaded in this environment: "
                                          r"TimmWrapperModel requires the timm library but it was not found in your "
                                          r"environment; install it \(`pip install timm`\) and run again.$"):
        load_policy(str(tmp_path), tokenizer, lora=LORA)
