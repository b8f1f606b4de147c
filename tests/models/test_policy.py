import re

import pytest
import torch
from transformers import AutoModelForCausalLM

from lit_rlhf.errors import ConfigError, UnavailableError
from lit_rlhf.models import load_policy, load_tokenizer
from tests.conftest import LORA


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.fixture
def ids(tiny_path):
    tokenizer = load_tokenizer(tiny_path)
    return tokenizer(["The movie was really", "I loved this"], return_tensors="pt", padding=True)["input_ids"]


def perturb_lora(model, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name and p.requires_grad:
                p.add_(torch.randn_like(p) * 0.5)
            if "lora_magnitude_vector" in name and p.requires_grad:  # DoRA's
                p.mul_(1.5)


@pytest.mark.parametrize("variant", [{}, {"use_rslora": True}, {"use_dora": True}], ids=["lora", "rslora", "dora"])
def test_lora_reference_is_the_policy_with_adapters_disabled_and_no_second_copy(variant, tiny_path, ids):
    tokenizer = load_tokenizer(tiny_path)
    base = AutoModelForCausalLM.from_pretrained(tiny_path)
    policy, reference = load_policy(tiny_path, tokenizer, lora={**LORA, **variant})
    assert reference.kind == "adapters_disabled" and reference.frozen_copy is None
    perturb_lora(policy)
    with reference.active() as ref:
        assert ref is policy
        torch.testing.assert_close(logits(ref, ids), logits(base, ids), rtol=0, atol=0)
    assert not torch.allclose(logits(policy, ids), logits(base, ids))  # adapters back on after the block
    base_numel = sum(p.numel() for p in base.parameters())
    lora_numel = sum(p.numel() for n, p in policy.named_parameters() if "lora_" in n)
    assert sum(p.numel() for p in policy.parameters()) == base_numel + lora_numel


def test_trained_adapter_start_uses_a_frozen_copy_of_that_adapter(tiny_path, ids, tmp_path):
    tokenizer = load_tokenizer(tiny_path)
    trained, _ = load_policy(tiny_path, tokenizer, lora=LORA)
    perturb_lora(trained)
    trained.save_pretrained(tmp_path / "adapter")
    expected = logits(trained, ids)

    policy, reference = load_policy(tiny_path, tokenizer, adapter_path=str(tmp_path / "adapter"))
    assert reference.kind == "reference_adapter"
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all(".default." in n for n in trainable)
    perturb_lora(policy, seed=1)  # training moves the trainable adapter only
    with reference.active() as ref:
        torch.testing.assert_close(logits(ref, ids), expected, rtol=0, atol=0)
    assert [n for n, p in policy.named_parameters() if p.requires_grad] == trainable
    assert not torch.allclose(logits(policy, ids), expected)


def test_full_finetuning_reference_is_a_frozen_copy(tiny_path, ids):
    tokenizer = load_tokenizer(tiny_path)
    policy, reference = load_policy(tiny_path, tokenizer, lora=None)
    assert reference.kind == "frozen_copy"
    assert all(p.requires_grad for p in policy.parameters())
    assert not any(p.requires_grad for p in reference.frozen_copy.parameters())
    before = logits(reference.frozen_copy, ids)
    with torch.no_grad():
        next(policy.parameters()).add_(1.0)
    with reference.active() as ref:
        torch.testing.assert_close(logits(ref, ids), before, rtol=0, atol=0)


def test_pad_token_is_distinct_from_eos(tiny_path):
    tokenizer = load_tokenizer(tiny_path)
    assert tokenizer.pad_token == "<|padding|>" and tokenizer.pad_token_id != tokenizer.eos_token_id
    assert tokenizer.padding_side == "left"


def test_a_tokenizer_without_padding_token_gets_one_and_the_model_grows(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

    vocab = {"<eos>": 0, "good": 1, "bad": 2, "movie": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>").save_pretrained(tmp_path)
    config = GPTNeoXConfig(vocab_size=4, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32)
    GPTNeoXForCausalLM(config).save_pretrained(tmp_path)
    tokenizer = load_tokenizer(str(tmp_path))
    assert tokenizer.pad_token_id == 4 != tokenizer.eos_token_id
    policy, _ = load_policy(str(tmp_path), tokenizer, lora=LORA)
    assert policy.get_input_embeddings().num_embeddings == 5


def test_unavailable_model_fails_with_one_clear_line():
    with pytest.raises(UnavailableError) as err:
        load_tokenizer("EleutherAI/pythia-14m-not-a-model")
    message = str(err.value)
    assert "\n" not in message and "EleutherAI/pythia-14m-not-a-model" in message and "hf download" in message


def test_a_model_path_that_is_no_folder_is_refused_by_the_key_that_set_it_without_a_hub_lookup(tiny_path):
    from lit_rlhf.models.tokenizer import tokenizer_source

    spec = {"name_or_path": "/no/such/model", "tokenizer_name_or_path": "/no/such/model"}  # the configs' default
    assert tokenizer_source(spec) == ("/no/such/model", "model.name_or_path")
    own_tokenizer = {**spec, "tokenizer_name_or_path": tiny_path}
    assert tokenizer_source(own_tokenizer) == (tiny_path, "model.tokenizer_name_or_path")
    assert tokenizer_source({"name_or_path": tiny_path}, "reward") == (tiny_path, "reward.name_or_path")
    path, key = tokenizer_source(spec)
    with pytest.raises(ConfigError, match=r"^model.name_or_path='/no/such/model' is no folder here, and not a Hugging "
                                          r"Face Hub name \(owner/name\) either; give the path of a folder"):
        load_tokenizer(path, key=key)
    with pytest.raises(ConfigError, match=r"^model.reference_name_or_path='\./reference' is no folder here"):
        load_policy(tiny_path, load_tokenizer(tiny_path), lora=None, reference_name_or_path="./reference")


def test_reference_name_or_path_loads_the_frozen_reference_from_another_model(tiny_path):
    tokenizer = load_tokenizer(tiny_path)
    policy, reference = load_policy(tiny_path, tokenizer, lora=None, reference_name_or_path=tiny_path)
    assert reference.kind == "frozen_copy" and reference.frozen_copy is not policy
    assert not any(p.requires_grad for p in reference.frozen_copy.parameters())
    with pytest.raises(ConfigError, match="model.reference_name_or_path=.* needs model.lora=null"):
        load_policy(tiny_path, tokenizer, lora={"r": 4}, reference_name_or_path=tiny_path)


def test_peft_s_lora_variants_reach_its_layers_and_dora_is_refused_before_sharded_loading(tiny_path):
    tokenizer = load_tokenizer(tiny_path)
    rslora, _ = load_policy(tiny_path, tokenizer, lora={**LORA, "use_rslora": True})
    layer = rslora.get_base_model().gpt_neox.layers[0].attention.query_key_value
    assert layer.scaling["default"] == pytest.approx(LORA["lora_alpha"] / LORA["r"] ** 0.5)
    dora, _ = load_policy(tiny_path, tokenizer, lora={**LORA, "use_dora": True})
    assert "default" in dora.get_base_model().gpt_neox.layers[0].attention.query_key_value.lora_magnitude_vector
    with pytest.raises(ConfigError, match=r"^model.lora.use_dora=true: DoRA's magnitudes are computed from the "
                                          r"weights .* set trainer.strategy.sharded_loading=false"):
        load_policy(tiny_path, tokenizer, lora={**LORA, "use_dora": True}, empty=True)


def test_a_folder_lacking_weights_of_the_causal_lm_is_refused_not_trained_from_a_random_layer(tiny_path, tmp_path,
                                                                                              caplog):
    """A reward model's folder (train_reward_model.py's) as the policy: from_pretrained started its output layer at
    random, printed its load report, and the run trained a policy that samples noise."""
    from transformers import AutoModelForSequenceClassification

    AutoModelForSequenceClassification.from_pretrained(tiny_path, num_labels=1).save_pretrained(tmp_path / "rm")
    caplog.clear()  # the load report of that conversion
    with pytest.raises(ConfigError) as refused:
        load_policy(str(tmp_path / "rm"), load_tokenizer(tiny_path), lora=LORA)
    head = "(lm_head|embed_out)"  # the output layer's name in the newer transformers releases, and in the older
    assert re.fullmatch(
        re.escape(f"model.name_or_path='{tmp_path / 'rm'}' has no weights for '") + head + re.escape(
            ".weight' (of 1 missing), which would start at random (its config.json names "
            "GPTNeoXForSequenceClassification, not a causal LM); give a causal LM folder saved whole by "
            "save_pretrained (a policy that train_sft.py, train_dpo.py or python -m lit_rlhf.export wrote)."),
        str(refused.value))
    assert "LOAD REPORT" not in caplog.text  # transformers' table, with its colour codes: the line says it
    with pytest.raises(ConfigError, match=rf"^model.reference_name_or_path='.*' has no weights for '{head}.weight'"):
        load_policy(tiny_path, load_tokenizer(tiny_path), lora=None, reference_name_or_path=str(tmp_path / "rm"))
