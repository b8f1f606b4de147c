"""A model folder's generation_config.json (Qwen2.5's instruct models ship repetition_penalty=1.05, temperature=0.7,
top_p=0.8, top_k=20) fills every setting that generate()'s own config leaves unset: its repetition penalty, min_p or
suppressed tokens would make the rollouts sample from another distribution than the logprobs describe, without a word.
The rollouts of a folder with such a file are those of the same weights without it, for both token samplers, and the
model keeps its generation_config (an export writes it as it came)."""

import json
import shutil

import pytest
import torch

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.rollout import HFEngine
from lit_rlhf.rollout.sampling import sampling_defaults_only
from tests.conftest import LORA, make_rloo
from tests.rollout.test_inverse_cdf import sample

BIASING = {"repetition_penalty": 1.3, "no_repeat_ngram_size": 2, "min_p": 0.2, "temperature": 0.7, "top_p": 0.8,
           "top_k": 20, "suppress_tokens": list(range(20, 400)),
           "return_dict_in_generate": True}


def folder_with_generation_defaults(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(TINY_PYTHIA, folder)
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, **BIASING}))
    return str(folder)


@pytest.mark.parametrize("token_sampler", ["inverse_cdf", "generate"])
def test_rollouts_ignore_the_sampling_settings_of_the_model_s_generation_config(token_sampler, tmp_path):
    plain = make_rloo(response_length=12)
    biased = make_rloo(model={"name_or_path": folder_with_generation_defaults(tmp_path), "lora": LORA},
                       response_length=12)
    responses = []
    for module in (plain, biased):
        torch.manual_seed(0)  # the same LoRA initialization
        module.configure_model()
        responses.append(sample(module, HFEngine(token_sampler=token_sampler), seed=3))
    assert responses[0].shape == (8, 12) and torch.equal(responses[0], responses[1])
    own = biased.policy.get_base_model().generation_config
    assert own.repetition_penalty == 1.3 and own.suppress_tokens == BIASING["suppress_tokens"]  # given back


def test_the_model_s_own_generation_config_comes_back_after_the_last_of_overlapping_calls():
    module = make_rloo()
    module.configure_model()
    owner = module.policy.get_base_model()
    own = owner.generation_config
    with sampling_defaults_only(module.policy):
        with sampling_defaults_only(module.policy):  # e.g. the async producer's draw beside the trainer's
            assert owner.generation_config is not own
            assert owner.generation_config.pad_token_id == own.pad_token_id  # the token ids stay
        assert owner.generation_config is not own
    assert owner.generation_config is own
