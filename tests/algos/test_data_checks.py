"""A fit checks the data module it is given before any step: its batches are of the kind the module trains on (an RL
module fitted with preference pairs trained on the pairs' token ids as if they were prompts; DPO fitted with prompts
ended in KeyError 'response_mask'), and its tokenizer gives the model's token ids (another tokenizer's ids are other
words to the model, and trained on as noise without a word)."""

import functools

import lightning as L
import pytest
import torch

from lit_rlhf import PromptDataModule
from lit_rlhf.algos.dpo import DPOModule
from lit_rlhf.algos.kto import KTOModule
from lit_rlhf.algos.sft import SFTModule
from lit_rlhf.assets import TINY_ARITHMETIC
from lit_rlhf.data.preference_datamodule import PreferenceDataModule
from lit_rlhf.errors import ConfigError
from tests.algos.test_reward_model import separable_pairs
from tests.conftest import LORA, TINY_PYTHIA, make_datamodule, make_rloo

pytestmark = pytest.mark.integration  # fits with a Trainer (refused at its start)


def trainer():
    return L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, max_epochs=1)


def pairs(tmp_path, tokenizer=TINY_PYTHIA):
    return PreferenceDataModule(tokenizer=tokenizer, dataset=separable_pairs(tmp_path / "pairs.jsonl", 16),
                                batch_size=8, num_eval_pairs=4)


def policy_pair_module(cls):
    return cls(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, optimizer=functools.partial(torch.optim.AdamW))


@pytest.mark.parametrize("make_module, make_data, expected", [
    (lambda: make_rloo(response_length=4, rl_steps=1), pairs,
     "RLOOModule trains on prompts (PromptDataModule), and the fit's PreferenceDataModule gives preference pairs, "
     "which DPOModule or RewardModelModule trains on; pass a PromptDataModule."),
    (lambda: policy_pair_module(DPOModule), lambda tmp_path: make_datamodule(),
     "DPOModule trains on preference pairs (PreferenceDataModule), and the fit's PromptDataModule gives prompts, "
     "which an RL module (RLOOModule, GRPOModule, PPOModule, ...) trains on; pass a PreferenceDataModule."),
    (lambda: policy_pair_module(KTOModule), pairs,
     "KTOModule trains on labelled completions (LabeledCompletionDataModule), and the fit's PreferenceDataModule "
     "gives preference pairs, which DPOModule or RewardModelModule trains on; pass a LabeledCompletionDataModule."),
    (lambda: policy_pair_module(SFTModule), pairs,
     "SFTModule trains on completions (CompletionDataModule), and the fit's PreferenceDataModule gives preference "
     "pairs, which DPOModule or RewardModelModule trains on; pass a CompletionDataModule."),
], ids=["rloo-on-pairs", "dpo-on-prompts", "kto-on-pairs", "sft-on-pairs"])
def test_a_data_module_of_another_kind_is_one_line_before_any_step(make_module, make_data, expected, tmp_path):
    module = make_module()
    with pytest.raises(ConfigError) as refused:
        trainer().fit(module, make_data(tmp_path))
    assert str(refused.value) == expected
    assert module.trainer.global_step == 0


def test_an_rl_fit_on_prompts_of_another_tokenizer_is_one_line_before_any_step():
    module = make_rloo(response_length=4, rl_steps=1)
    with pytest.raises(ConfigError) as refused:
        trainer().fit(module, PromptDataModule(tokenizer=TINY_ARITHMETIC, batch_size=4, num_eval_prompts=4))
    message = str(refused.value)
    assert "\n" not in message and module.rl_step == 0
    assert message.startswith(f"data.tokenizer={str(TINY_ARITHMETIC)!r} encodes the data with other token ids than "
                              f"the model's tokenizer (model.name_or_path={TINY_PYTHIA!r};"), message
    assert message.endswith(f"give the data the model's tokenizer (data.tokenizer={TINY_PYTHIA!r})."), message


def test_a_dpo_fit_on_pairs_of_another_tokenizer_is_one_line(tmp_path):
    module = policy_pair_module(DPOModule)
    with pytest.raises(ConfigError, match=r"^data.tokenizer=.*tiny-arithmetic.* encodes the data with other token "):
        trainer().fit(module, pairs(tmp_path, TINY_ARITHMETIC))
    assert module.trainer.global_step == 0
