"""A multimodal checkpoint (Gemma 3's loads as Gemma3ForConditionalGeneration) trains on text prompts: its training
forward, which at transformers 5.5 raises without marks of which tokens are image tokens, gets them marked as text;
PPO's value head and the compiled decoding's context read the sizes its text config holds."""

import copy

import pytest
import torch

from lit_rlhf.assets import TINY_PYTHIA
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
