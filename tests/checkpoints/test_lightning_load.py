"""Lightning's `Module.load_from_checkpoint(path)` on lit_rlhf's modules, as a plain Lightning script calls it: the
trained module back (no reward needed, no warning about the frozen weights the file leaves out), a checkpoint of
another module in one line, and the model's own code enabled by the caller alone, never by the file."""

import functools
import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_rlhf import PPOModule, RLOOModule
from lit_rlhf.algos import RLHFModule
from lit_rlhf.algos.dpo import DPOModule
from lit_rlhf.algos.sft import SFTModule
from lit_rlhf.data.preference_datamodule import PreferenceDataModule
from lit_rlhf.errors import ConfigError
from tests.algos.test_reward_model import separable_pairs
from tests.conftest import LORA, TINY_PYTHIA, make_datamodule, make_rloo

pytestmark = pytest.mark.integration  # runs a Trainer


def fit_and_checkpoint(module, data, tmp_path, **trainer_settings):
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "checkpoints", filename="last")
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, callbacks=[checkpoints], default_root_dir=tmp_path, **trainer_settings)
    trainer.fit(module, data)
    return tmp_path / "checkpoints" / "last.ckpt"


@pytest.fixture(scope="module")
def rloo_run(tmp_path_factory):
    L.seed_everything(0)
    module = make_rloo(rl_steps=1)
    return module, fit_and_checkpoint(module, make_datamodule(), tmp_path_factory.mktemp("rloo"))


@pytest.fixture(scope="module")
def dpo_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dpo")
    L.seed_everything(0)
    module = DPOModule(model={"name_or_path": TINY_PYTHIA, "lora": LORA},
                       optimizer=functools.partial(torch.optim.AdamW, lr=3e-3))
    data = PreferenceDataModule(tokenizer=TINY_PYTHIA, dataset=separable_pairs(tmp / "pairs.jsonl", n=48),
                                batch_size=8, num_eval_pairs=8)
    return module, fit_and_checkpoint(module, data, tmp, max_steps=2)


def assert_same_weights(loaded, trained):
    trained_state = trained.state_dict()
    assert set(loaded.state_dict()) == set(trained_state)
    assert all(torch.equal(tensor, trained_state[name]) for name, tensor in loaded.state_dict().items())


def test_an_rl_module_loads_its_checkpoint_as_lightning_users_call_it(rloo_run):
    trained, ckpt = rloo_run
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = RLOOModule.load_from_checkpoint(ckpt)  # no reward: evaluating or exporting needs none
    assert not [w for w in caught if "Found keys" in str(w.message)]
    assert type(loaded) is RLOOModule and loaded.training  # as Lightning's loader returns a module
    assert loaded.rl_step == trained.rl_step == 1 and loaded.episode == trained.episode
    assert_same_weights(loaded, trained)
    assert type(RLHFModule.load_from_checkpoint(ckpt, response_length=5)) is RLOOModule
    assert RLOOModule.load_from_checkpoint(ckpt, response_length=5).hparams.response_length == 5


@pytest.mark.parametrize("call, expected", [
    (lambda ckpt: PPOModule.load_from_checkpoint(ckpt), "is a checkpoint of RLOOModule, not PPOModule; load it with "
                                                        "RLOOModule.load_from_checkpoint"),
    (lambda ckpt: DPOModule.load_from_checkpoint(ckpt), "is not a checkpoint of DPOModule (it was written by "
                                                        "RLOOModule of train.py)"),
    (lambda ckpt: RLOOModule.load_from_checkpoint(ckpt, strict=True), "RLOOModule.load_from_checkpoint(strict=True): "
                                                                      "a lit_rlhf checkpoint holds the trained tensors "
                                                                      "only"),
    (lambda ckpt: RLOOModule.load_from_checkpoint(ckpt, weights_only=False), "(weights_only=False): a checkpoint is "
                                                                             "read weights-only"),
    (lambda ckpt: RLOOModule.load_from_checkpoint(ckpt, hparams_file="h.yaml"), "(hparams_file='h.yaml'): the "
                                                                                "settings are the checkpoint's"),
])
def test_a_load_the_checkpoint_cannot_serve_is_one_line(rloo_run, call, expected):
    with pytest.raises(ConfigError) as err:
        call(rloo_run[1])
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_a_preference_module_loads_its_checkpoint_and_refuses_another_modules(dpo_run):
    trained, ckpt = dpo_run
    loaded = DPOModule.load_from_checkpoint(ckpt)
    assert loaded.training and loaded.num_tokens == trained.num_tokens > 0
    assert_same_weights(loaded, trained)
    assert DPOModule.load_from_checkpoint(ckpt, beta=0.3).hparams.beta == 0.3
    with pytest.raises(ConfigError, match=r"is not a checkpoint of SFTModule \(it was written by DPOModule\)"):
        SFTModule.load_from_checkpoint(ckpt)


@pytest.mark.parametrize("run, cls", [("rloo_run", RLOOModule), ("dpo_run", DPOModule)])
def test_a_checkpoint_never_turns_on_the_models_own_code(run, cls, request, tmp_path):
    """Lightning's own loader would build the model with the file's model.trust_remote_code."""
    checkpoint = torch.load(request.getfixturevalue(run)[1], weights_only=True)
    checkpoint["hyper_parameters"]["model"]["trust_remote_code"] = True
    torch.save(checkpoint, tmp_path / "crafted.ckpt")
    assert cls.load_from_checkpoint(tmp_path / "crafted.ckpt").hparams.model["trust_remote_code"] is False
    assert cls.load_from_checkpoint(tmp_path / "crafted.ckpt", trust_remote_code=True).hparams.model[
        "trust_remote_code"] is True
