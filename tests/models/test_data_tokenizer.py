"""The data module's tokenizer must give the model's token ids: another tokenizer's ids are other words to the model,
and a fit with them would train on noise without a word. The RL modules and the pair modules (DPO, KTO, SFT, reward
models) refuse it in one line before any step."""

import lightning as L
import pytest

from lit_rlhf import PromptDataModule
from lit_rlhf.algos.dpo import DPOModule
from lit_rlhf.assets import TINY_ARITHMETIC
from lit_rlhf.data.preference_datamodule import PreferenceDataModule
from lit_rlhf.errors import ConfigError
from lit_rlhf.models.tokenizer import load_tokenizer, token_id_differences
from tests.algos.test_reward_model import separable_pairs
from tests.conftest import LORA, TINY_PYTHIA, make_rloo


def test_token_id_differences_by_hand():
    pythia, again, arithmetic = (load_tokenizer(name) for name in (TINY_PYTHIA, TINY_PYTHIA, TINY_ARITHMETIC))
    assert token_id_differences(pythia, again) == ([], [])  # two loads of one tokenizer
    differ, missing = token_id_differences(pythia, arithmetic)
    assert differ and all(pythia.get_vocab()[t] != arithmetic.get_vocab()[t] for t in differ)
    assert missing == sorted(set(arithmetic.get_vocab()) - set(pythia.get_vocab()))
    again.add_special_tokens({"additional_special_tokens": ["<|extra|>"]})
    assert token_id_differences(again, pythia) == ([], [])  # the model may know more tokens than the data uses
    assert token_id_differences(pythia, again) == ([], ["<|extra|>"])  # the data may not use ids the model lacks


def trainer():
    return L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, max_epochs=1)


@pytest.mark.integration
def test_an_rl_fit_on_prompts_of_another_tokenizer_is_one_line_before_any_step():
    module = make_rloo(response_length=4, rl_steps=1)
    with pytest.raises(ConfigError) as refused:
        trainer().fit(module, PromptDataModule(tokenizer=TINY_ARITHMETIC, batch_size=4, num_eval_prompts=4))
    message = str(refused.value)
    assert "\n" not in message and module.rl_step == 0
    assert message.startswith(f"data.tokenizer={str(TINY_ARITHMETIC)!r} encodes the data with other token ids than the "
                              f"model's tokenizer (model.name_or_path={TINY_PYTHIA!r};"), message
    assert message.endswith(f"give the data the model's tokenizer (data.tokenizer={TINY_PYTHIA!r})."), message


@pytest.mark.integration
def test_a_dpo_fit_on_pairs_of_another_tokenizer_is_one_line(tmp_path):
    data = PreferenceDataModule(tokenizer=TINY_ARITHMETIC, dataset=separable_pairs(tmp_path / "pairs.jsonl", 16),
                                batch_size=8, num_eval_pairs=4)
    module = DPOModule(model={"name_or_path": TINY_PYTHIA, "lora": LORA})
    with pytest.raises(ConfigError, match=r"^data.tokenizer=.*tiny-arithmetic.* encodes the data with other token "):
        trainer().fit(module, data)
    assert module.trainer.global_step == 0
