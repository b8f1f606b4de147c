"""trainer=ddp_spawn (and Lightning's ddp_spawn in Python): the ranks train in spawned processes, and Lightning hands
rank zero's state_dict back to the main process's module with `load_state_dict(state_dict, strict=False)`. The
modules build their models in configure_model, which ran only in the ranks: the main process's module builds them
when that state_dict arrives, so the module the user fitted holds the trained weights (it dropped every key without a
word). The app exports such a run from its final checkpoint, which holds the RL counters the model card states."""

import functools

import lightning as L
import pytest
import torch

from lit_rlhf.algos.dpo import DPOModule
from lit_rlhf.cli.train import spawned_fit
from lit_rlhf.data.preference_datamodule import PreferenceDataModule
from tests.algos.test_reward_model import separable_pairs
from tests.conftest import LORA, TINY_PYTHIA, make_datamodule, make_rloo


def fitted_and_fresh(kind, tmp_path):
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, max_steps=1, limit_val_batches=0)
    if kind == "rloo":
        fitted, fresh = (make_rloo(response_length=4, rl_steps=1) for _ in range(2))
        trainer.fit(fitted, make_datamodule())
    else:
        fitted, fresh = (DPOModule(model={"name_or_path": TINY_PYTHIA, "lora": LORA},
                                   optimizer=functools.partial(torch.optim.AdamW, lr=1e-2)) for _ in range(2))
        trainer.fit(fitted, PreferenceDataModule(tokenizer=TINY_PYTHIA, batch_size=8, num_eval_pairs=0,
                                                 dataset=separable_pairs(tmp_path / "pairs.jsonl", 16)))
    return fitted, fresh


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["rloo", "dpo"])
def test_a_module_whose_ranks_were_spawned_receives_rank_zero_s_trained_weights(kind, tmp_path):
    fitted, fresh = fitted_and_fresh(kind, tmp_path)
    assert next(fresh.parameters(), None) is None  # configure_model ran only where the fit ran
    fresh.load_state_dict(fitted.state_dict(), strict=False)  # what Lightning's spawn launcher does at the end
    trained = dict(fitted.named_parameters())
    assert dict(fresh.named_parameters()).keys() == trained.keys()
    assert all(torch.equal(p, trained[name]) for name, p in fresh.named_parameters())
    lora = [name for name, p in fitted.named_parameters() if p.requires_grad]
    assert lora and any(not torch.equal(trained[name], torch.zeros_like(trained[name])) for name in lora)


def test_the_app_knows_a_fit_in_spawned_processes_from_one_in_its_own():
    def trainer(strategy):
        return L.Trainer(accelerator="cpu", devices=2, strategy=strategy, logger=False)

    assert spawned_fit(trainer("ddp_spawn")) and spawned_fit(trainer("ddp_fork"))
    assert not spawned_fit(trainer("ddp")) and not spawned_fit(L.Trainer(accelerator="cpu", logger=False))
