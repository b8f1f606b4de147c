"""transformers (from 5.25, with the `kernels` package it then requires) swaps some layers of a model it loads for
kernels from the Hub, and again at every train()/eval(), some for inference only. Every model lit_rlhf loads to
train, sample from or score with keeps transformers' own PyTorch layers, through those switches too."""

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel

from lit_rlhf.algos.reward_model import reward_model_to_train
from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.models.policy import load_policy
from lit_rlhf.models.tokenizer import load_tokenizer
from lit_rlhf.models.value import load_reward_model_critic
from lit_rlhf.rewards.local_judge import LocalJudgeModel
from lit_rlhf.rewards.reward_model import SequenceClassifierReward
from lit_rlhf.teachers.causal_lm import CausalLMTeacher

LORA = {"r": 4, "lora_alpha": 8, "target_modules": "all-linear"}


def kernelized(model: torch.nn.Module) -> list[str]:
    """The transformers models inside `model` (a peft wrapper holds one) whose layers are swapped for Hub kernels,
    checked after a switch to training and back, the switches that re-kernelize."""
    found = []
    for mode in (None, True, False):
        if mode is not None:
            model.train(mode)
        found += [type(m).__name__ for m in model.modules() if isinstance(m, PreTrainedModel) and m.use_kernels]
    return found


@pytest.fixture(scope="module")
def reward_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reward")
    AutoModelForSequenceClassification.from_pretrained(TINY_PYTHIA, num_labels=1, use_kernels=False).save_pretrained(
        folder)
    AutoTokenizer.from_pretrained(TINY_PYTHIA).save_pretrained(folder)
    return str(folder)


def loaded_models(reward_folder: str) -> dict[str, torch.nn.Module]:
    tokenizer = load_tokenizer(TINY_PYTHIA)
    policy, _ = load_policy(TINY_PYTHIA, tokenizer, lora=LORA)
    full_policy, reference = load_policy(TINY_PYTHIA, tokenizer, reference_name_or_path=TINY_PYTHIA)
    teacher = CausalLMTeacher(TINY_PYTHIA)
    teacher.load(tokenizer)
    reward = SequenceClassifierReward(reward_folder)
    reward.load()
    return {
        "the policy (LoRA; its reference is the same model)": policy,
        "a full fine-tune and its separate reference": torch.nn.ModuleList([full_policy, reference.frozen_copy]),
        "PPO's reward-model critic": load_reward_model_critic(reward_folder, "float32", LORA)[0],
        "the distillation teacher": teacher.model,
        "a reward model": reward.model,
        "a local judge": LocalJudgeModel(TINY_PYTHIA, max_new_tokens=4, batch_size=2, device=None).model,
        "RewardModelModule's model": reward_model_to_train({"name_or_path": TINY_PYTHIA}, tokenizer),
    }


def test_every_model_lit_rlhf_loads_keeps_transformers_own_layers(reward_folder):
    swapped = {what: names for what, model in loaded_models(reward_folder).items() if (names := kernelized(model))}
    assert not swapped, swapped
