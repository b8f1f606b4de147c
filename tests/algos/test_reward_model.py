"""RewardModelModule: the Bradley-Terry loss and metrics against hand-computed values, a tiny backbone that learns
separable pairs, and the saved folder that `reward=reward_model` loads as it is (same scores, normalization)."""

import functools
import json
import math
import random

import lightning as L
import pytest
import torch

from lit_rlhf.algos.reward_model import RewardModelModule, bradley_terry_loss, pair_metrics
from lit_rlhf.data.preference_datamodule import PreferenceDataModule
from lit_rlhf.errors import ConfigError
from lit_rlhf.rewards.reward_model import SequenceClassifierReward
from tests.conftest import LORA, TINY_PYTHIA
from tests.helpers import assert_readable_as_umask_allows


def log_sigmoid(x):
    return math.log(1 / (1 + math.exp(-x)))


def test_bradley_terry_loss_with_margin_and_centering_matches_hand_computed_values():
    chosen, rejected = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    margin = torch.tensor([0.5, 0.0])
    plain = -(log_sigmoid(1.0) + log_sigmoid(-1.0)) / 2
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx(plain)
    with_margin = -(log_sigmoid(0.5) + log_sigmoid(-1.0)) / 2
    assert bradley_terry_loss(chosen, rejected, margin).item() == pytest.approx(with_margin)
    centered = with_margin + 0.01 * ((1.0 + 0.0) ** 2 + (0.0 + 1.0) ** 2) / 2
    assert bradley_terry_loss(chosen, rejected, margin, 0.01).item() == pytest.approx(centered)


def test_pair_metrics_match_hand_computed_values():
    metrics = pair_metrics(torch.tensor([2.0, 0.0, 1.0]), torch.tensor([1.0, 1.0, -1.0]))
    assert metrics["accuracy"].item() == pytest.approx(2 / 3)
    assert metrics["margin"].item() == pytest.approx((1 - 1 + 2) / 3)
    both = [2.0, 0.0, 1.0, 1.0, 1.0, -1.0]
    mean = sum(both) / 6
    assert metrics["reward_mean"].item() == pytest.approx(mean)
    assert metrics["reward_std"].item() == pytest.approx(math.sqrt(sum((b - mean) ** 2 for b in both) / 6))


def separable_pairs(path, n=160):
    rng = random.Random(0)
    good = ["I love this, wonderful.", "Great and happy day.", "This is excellent!", "Lovely, nice work."]
    bad = ["I hate this, awful.", "Terrible and sad day.", "This is horrible!", "Ugly, bad work."]
    rows = [{"prompt": f"Review {i}:", "chosen": " " + rng.choice(good), "rejected": " " + rng.choice(bad)}
            for i in range(n)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


@pytest.mark.integration
@pytest.mark.parametrize("lora", [LORA, None], ids=["lora", "full"])
def test_a_tiny_reward_model_learns_separable_pairs_and_its_folder_scores_the_same(tmp_path, lora):
    L.seed_everything(0)
    data = PreferenceDataModule(tokenizer=TINY_PYTHIA, dataset=separable_pairs(tmp_path / "pairs.jsonl"),
                                batch_size=16, num_eval_pairs=32)
    module = RewardModelModule(model={"name_or_path": TINY_PYTHIA, "lora": lora},
                               optimizer=functools.partial(torch.optim.AdamW, lr=3e-3 if lora else 1e-3))
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.validate(module, data)
    loss_before = float(trainer.callback_metrics["val/loss"])
    trainer.fit(module, data)
    assert float(trainer.callback_metrics["val/accuracy"]) >= 0.9
    assert float(trainer.callback_metrics["val/loss"]) < loss_before / 2
    assert {"train/loss", "train/accuracy", "train/margin"} <= set(trainer.callback_metrics)  # per step, no suffix
    assert not any(name.endswith(("_step", "_epoch")) for name in trainer.callback_metrics)
    folder = module.save_reward_model(tmp_path / "rm")
    assert not any(p.name.startswith("adapter") for p in folder.iterdir())  # merged: a plain model folder
    assert_readable_as_umask_allows(folder)
    stats = json.loads((folder / "reward_stats.json").read_text())
    assert stats["count"] == 64 and stats["std"] > 0  # 32 held-out pairs, both responses

    # finished completions (they ended with the stop token): scored with EOS after them, as the pairs were built
    prompts, completions = ["Review 1:", "Review 1:"], [" I love this, wonderful.", " I hate this, awful."]
    loaded = SequenceClassifierReward(str(folder))(prompts, completions, stopped=[True, True])
    module.eval()
    eos = data.tokenizer.eos_token
    batch = data.val_dataloader().collate_fn([{"chosen": data.tokenizer(p + c + eos)["input_ids"],
                                               "rejected": data.tokenizer(p + c + eos)["input_ids"], "margin": 0.0}
                                              for p, c in zip(prompts, completions, strict=True)])
    with torch.no_grad():
        own, _ = module.rewards(batch)
    torch.testing.assert_close(loaded, own, atol=1e-4, rtol=1e-4)
    assert loaded[0] > loaded[1]
    normalized = SequenceClassifierReward(str(folder), normalize=True)(prompts, completions, stopped=[True, True])
    torch.testing.assert_close(normalized, (loaded - stats["mean"]) / stats["std"])


def test_normalize_without_saved_stats_is_one_line(tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    AutoModelForSequenceClassification.from_pretrained(TINY_PYTHIA, num_labels=1).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(TINY_PYTHIA).save_pretrained(tmp_path)  # a head, and no reward_stats.json
    with pytest.raises(ConfigError, match="reward.normalize=true reads the reward's mean and std from") as err:
        SequenceClassifierReward(str(tmp_path), normalize=True)(["a"], [" b"])
    assert "\n" not in str(err.value)


def test_a_negative_centering_coefficient_is_refused():
    with pytest.raises(ConfigError, match="algo.center_rewards_coefficient=-0.1 must be a finite number >= 0"):
        RewardModelModule(model={"name_or_path": TINY_PYTHIA}, center_rewards_coefficient=-0.1)


class LoadsWholeModels(RewardModelModule):
    """A PairModule of one's own whose configure_model shards nothing."""

    shards = False


@pytest.mark.integration
def test_a_sharding_strategy_is_refused_before_a_module_that_shards_nothing_loads(tmp_path):
    """Lightning's ModelParallelStrategy (trainer=fsdp2's FSDP2Strategy) leaves the sharding to the module's
    configure_model: one that loads whole models would have each rank train a copy of its own, its gradients never
    shared, and rank zero's saved."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    data = PreferenceDataModule(tokenizer=TINY_PYTHIA, dataset=separable_pairs(tmp_path / "pairs.jsonl", n=24),
                                num_eval_pairs=8)
    module = LoadsWholeModels(model={"name_or_path": TINY_PYTHIA, "lora": LORA})
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, strategy=ModelParallelStrategy(), logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(ConfigError, match="trainer=fsdp2 shards the models of train.py, train_dpo.py, train_kto.py, "
                                          "train_sft.py and train_reward_model.py, not LoadsWholeModels's; train on "
                                          "several ranks with trainer=ddp"):
        trainer.fit(module, datamodule=data)
    assert module.backbone is None  # refused in setup, before configure_model loaded anything


def test_a_causal_lms_folder_starts_the_score_head_quietly_and_a_lacking_backbone_weight_is_one_warning(tmp_path,
                                                                                                         capfd):
    """A causal LM's folder holds no score head (from_pretrained starts it) and an LM head the classifier does not
    read: transformers' load report said so on every run, a table in terminal colour codes. A folder that lacks a
    weight of the backbone itself is one warning naming it."""
    import shutil
    import warnings

    from safetensors.torch import load_file, save_file

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RewardModelModule(model={"name_or_path": TINY_PYTHIA, "lora": None}).configure_model()
    assert "LOAD REPORT" not in capfd.readouterr().err
    assert not [w for w in caught if "backbone's weights" in str(w.message)]

    folder = tmp_path / "damaged"
    shutil.copytree(TINY_PYTHIA, folder)
    weights = load_file(folder / "model.safetensors")
    lost = next(key for key in weights if "layers.1.mlp" in key)
    save_file({k: v for k, v in weights.items() if k != lost}, folder / "model.safetensors", metadata={"format": "pt"})
    expected = (f"model.name_or_path=.* lacks 1 of the backbone's weights \\(e.g. '{lost}'\\), which start from "
                f"random values; give a folder saved whole by save_pretrained")
    with pytest.warns(UserWarning, match=expected):
        RewardModelModule(model={"name_or_path": str(folder), "lora": None}).configure_model()
    assert "LOAD REPORT" not in capfd.readouterr().err
