"""model.attn_implementation (TRL's name): transformers' attention implementation for the policy and its reference,
loaded whole or sharded, and for a reward model in training; null keeps the model's default; one that cannot run here
is one line."""

import functools
import json
import shutil

import pytest
import torch

from lit_rlhf import RewardModelModule, RLOOModule
from lit_rlhf.algos.reward_model import reward_model_to_train
from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.checkpoints.resume_checks import check_resume
from lit_rlhf.config import model_config
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.policy import load_causal_lm, load_policy
from lit_rlhf.models.tokenizer import load_tokenizer
from lit_rlhf.rewards import VaderSentiment
from lit_rlhf.teachers.causal_lm import CausalLMTeacher

LORA = {"r": 4, "lora_alpha": 8, "target_modules": "all-linear"}


def attention(model: torch.nn.Module) -> str:
    return model.config._attn_implementation


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(TINY_PYTHIA)


def test_null_keeps_the_models_default_and_a_named_one_reaches_the_policy_and_its_reference(tokenizer):
    policy, _ = load_policy(TINY_PYTHIA, tokenizer, lora=LORA)
    assert attention(policy) == "sdpa"  # transformers' default where the model has it
    policy, _ = load_policy(TINY_PYTHIA, tokenizer, lora=LORA, attn_implementation="eager")
    assert attention(policy) == "eager"
    full, reference = load_policy(TINY_PYTHIA, tokenizer, reference_name_or_path=TINY_PYTHIA,
                                  attn_implementation="eager")
    assert (attention(full), attention(reference.frozen_copy)) == ("eager", "eager")
    assert attention(load_causal_lm(TINY_PYTHIA, "model.name_or_path", "float32", False, empty=True,
                                    attn_implementation="eager")) == "eager"  # sharded loading's placeholders


def test_eager_and_sdpa_give_the_same_logprobs_on_left_padded_prompts(tokenizer):
    batch = tokenizer(["The film was", "Honestly, the direction was slow and"], return_tensors="pt", padding=True)
    logprobs = {}
    for impl in ("eager", "sdpa"):
        model = load_causal_lm(TINY_PYTHIA, "model.name_or_path", "float32", False, empty=False,
                               attn_implementation=impl)
        with torch.no_grad():
            logits = model(**batch).logits
        logprobs[impl] = torch.log_softmax(logits, -1)[batch["attention_mask"].bool()]
    torch.testing.assert_close(logprobs["eager"], logprobs["sdpa"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl, says", [
    ("flashy", 'Specified `attn_implementation="flashy"` is not supported'),
    ("flash_attention_2", "FlashAttention2 has been toggled on, but it cannot be used"),  # flash-attn not installed
])
def test_one_that_cannot_run_here_is_one_line_naming_the_setting(tokenizer, impl, says):
    with pytest.raises(ConfigError) as raised:
        load_policy(TINY_PYTHIA, tokenizer, lora=LORA, attn_implementation=impl)
    line = str(raised.value)
    assert "\n" not in line and line.startswith(f"model.attn_implementation={impl!r} cannot be used here (")
    assert says in line and line.endswith("set model.attn_implementation=sdpa, or null for the model's own default.")
    assert "is a local folder that cannot be loaded" not in line  # the folder is fine


def test_the_setting_reaches_the_modules_models_and_a_non_name_is_refused(tokenizer):
    module = RLOOModule(model={"name_or_path": TINY_PYTHIA, "lora": LORA, "attn_implementation": "eager"},
                        reward=VaderSentiment(), optimizer=functools.partial(torch.optim.AdamW, lr=1e-3))
    module.configure_model()
    assert attention(module.policy) == "eager"
    spec = {"name_or_path": TINY_PYTHIA, "lora": None, "attn_implementation": "eager"}
    assert attention(reward_model_to_train(spec, tokenizer)) == "eager"
    assert RewardModelModule(model=spec).hparams.model["attn_implementation"] == "eager"
    with pytest.raises(ConfigError, match=r"model.attn_implementation=3 must be the name of an attention "):
        model_config({"name_or_path": TINY_PYTHIA, "attn_implementation": 3})


def test_a_folder_whose_config_names_a_hub_kernel_offline_is_one_line_and_the_setting_overrides_it(tokenizer,
                                                                                                   tmp_path):
    pytest.importorskip("kernels", reason="without the kernels package (transformers before 5.25 does not need it), "
                                          "transformers 5.5 refuses such a folder at its first load only")
    folder = tmp_path / "model"
    shutil.copytree(TINY_PYTHIA, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "attn_implementation": "kernels-community/flash-attn2"}))
    with pytest.raises(ConfigError) as raised:  # offline, the kernel is not in the cache
        load_policy(str(folder), tokenizer, lora=LORA)
    line = str(raised.value)
    assert line.startswith(f"model.name_or_path={str(folder)!r}: the attention implementation its config.json names "
                           f"cannot be used here (")
    assert line.endswith("; set model.attn_implementation=sdpa to override it.") and "\n" not in line
    assert attention(load_policy(str(folder), tokenizer, lora=LORA, attn_implementation="sdpa")[0]) == "sdpa"
    with pytest.raises(ConfigError, match=r"^teacher.name_or_path=.*: the attention implementation its config.json "
                                          r"names cannot be used here \(.*; remove attn_implementation from its "
                                          r"config.json.$"):  # a teacher has no setting of its own to override it
        CausalLMTeacher(str(folder)).load(tokenizer)


def test_a_resume_applies_another_attention_implementation_and_says_so():
    saved, now = ({"model": {"name_or_path": TINY_PYTHIA, "attn_implementation": impl}} for impl in ("eager", None))
    assert check_resume(saved, now, None, None) == ["model.attn_implementation 'eager' -> None"]
    before = {"model": {"name_or_path": TINY_PYTHIA}}  # a checkpoint from before the setting
    assert check_resume(before, now, None, None) == []
