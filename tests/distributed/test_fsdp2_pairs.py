"""train_dpo.py, train_kto.py, train_sft.py and train_reward_model.py with trainer=fsdp2 on 2 CPU processes (gloo), as a
user types them: the sharded fit trains what DDP's replicas train, resumes exactly from its sharded checkpoint, and
saves the model gathered whole."""

import json
import re

import pytest
import torch
from safetensors.torch import load_file

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.checkpoints.sharded import read_sharded_checkpoint
from tests.apps import run_app

pytestmark = [pytest.mark.multi_rank, pytest.mark.integration]  # each test starts 2 ranks

FSDP2 = ["trainer=fsdp2", "trainer.accelerator=cpu", "trainer.devices=2"]
DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]


def fit(script: str, run_dir, *overrides, cwd):
    result = run_app(script, f"hydra.run.dir={run_dir}", *overrides, cwd=cwd)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def saved_weights(run_dir) -> dict[str, torch.Tensor]:
    return load_file(f"{run_dir}/policy/model.safetensors")


def held_out_figures(result) -> list[float]:
    """The figures of the printed `Held-out ...` line (the saved weights' on the held-out rows)."""
    line = re.search(r"Held-out \w+ \(\d+\): .*", result.stdout).group(0)
    return [float(number) for number in re.findall(r"[-+]?\d+\.\d+", line)]


def test_dpo_under_fsdp2_cut_and_resumed_saves_the_policy_ddp_trains(tmp_path):
    """train_dpo.py (LoRA, the reference the policy with its adapters disabled) stopped after 6 of its 14 steps and
    resumed from its sharded last.ckpt saves the weights DDP's uninterrupted fit saves, with the same held-out
    figures: the ranks' gradients are averaged as DDP averages them, and the resume reads back every trained shard."""
    cut = fit("train_dpo.py", tmp_path / "fsdp2", *FSDP2, "trainer.max_steps=6", cwd=tmp_path)
    assert "FSDP2 over 2 ranks, 1 model sharded: each rank read only its shards" in cut.stdout + cut.stderr
    checkpoint = tmp_path / "fsdp2" / "checkpoints" / "last.ckpt"
    assert checkpoint.is_dir()  # sharded: one file per rank
    saved = read_sharded_checkpoint(checkpoint)["state_dict"]  # the adapters alone: the base reloads from its files
    assert saved and all(".lora_" in name for name in saved), sorted(saved)[:3]
    resumed = fit("train_dpo.py", tmp_path / "fsdp2", *FSDP2, "ckpt_path=last", cwd=tmp_path)
    ddp = fit("train_dpo.py", tmp_path / "ddp", *DDP, cwd=tmp_path)

    fsdp2_weights, ddp_weights = saved_weights(tmp_path / "fsdp2"), saved_weights(tmp_path / "ddp")
    start = load_file(f"{TINY_PYTHIA}/model.safetensors")
    assert fsdp2_weights.keys() == ddp_weights.keys() == start.keys()
    assert max(float((ddp_weights[k] - start[k]).abs().max()) for k in start) > 1e-3  # LoRA merged: it trained
    for name, tensor in ddp_weights.items():
        torch.testing.assert_close(fsdp2_weights[name], tensor, rtol=0, atol=1e-6, msg=name)
    assert held_out_figures(resumed) == pytest.approx(held_out_figures(ddp), abs=1e-4)


@pytest.mark.parametrize("script", ["train_kto.py", "train_sft.py"])
def test_a_full_fine_tune_under_fsdp2_trains_what_ddp_trains(script, tmp_path):
    """model.lora=null: the whole policy sharded and trained (KTO: beside its frozen reference copy, sharded too, whose
    reference point is the mean over both ranks' KL rows; SFT: over a window of 2 accumulated batches, each rank's
    gradient shards rescaled to the window's tokens, the gathered root's included). 4 steps at lr 1e-3 move the
    weights far more than the two fits differ (they sum the ranks' gradients in another order)."""
    settings = ["model.lora=null", "trainer.max_steps=4", "algo.optimizer.lr=1e-3", "+algo.optimizer.eps=1e-6"]
    if script == "train_sft.py":
        settings.append("+trainer.accumulate_grad_batches=2")
    sharded = fit(script, tmp_path / "fsdp2", *FSDP2, *settings, cwd=tmp_path)
    ddp = fit(script, tmp_path / "ddp", *DDP, *settings, cwd=tmp_path)
    models = 2 if script == "train_kto.py" else 1
    assert f"FSDP2 over 2 ranks, {models} model{'s' if models > 1 else ''} sharded" in sharded.stdout + sharded.stderr

    fsdp2_weights, ddp_weights = saved_weights(tmp_path / "fsdp2"), saved_weights(tmp_path / "ddp")
    start = load_file(f"{TINY_PYTHIA}/model.safetensors")
    moved = max(float((ddp_weights[k] - start[k]).abs().max()) for k in start)
    apart = max(float((fsdp2_weights[k] - ddp_weights[k]).abs().max()) for k in start)
    assert moved > 3e-3 and apart < moved / 100, (moved, apart)
    assert held_out_figures(sharded) == pytest.approx(held_out_figures(ddp), abs=1e-3)


def test_a_reward_model_under_fsdp2_cut_and_resumed_saves_the_classifier_ddp_trains(tmp_path):
    """train_reward_model.py with LoRA (~reward_model_tuning: train_reward_model.yaml's adapters, not the embedded
    model's full fine-tune), each rank reading its shards of the classifier (its score head started as
    from_pretrained starts it), stopped after 2 of 4 steps and resumed: the saved classifier (LoRA merged) and its
    reward statistics are those of DDP's uninterrupted fit."""
    tuning = ["~reward_model_tuning", "algo.optimizer.lr=1e-3", "+algo.optimizer.eps=1e-6"]
    cut = fit("train_reward_model.py", tmp_path / "fsdp2", *FSDP2, *tuning, "trainer.max_steps=2", cwd=tmp_path)
    assert "FSDP2 over 2 ranks, 1 model sharded: each rank read only its shards" in cut.stdout + cut.stderr
    saved = read_sharded_checkpoint(tmp_path / "fsdp2" / "checkpoints" / "last.ckpt")["state_dict"]
    assert saved and all(".lora_" in name or ".score." in name for name in saved), sorted(saved)[:3]
    resumed = fit("train_reward_model.py", tmp_path / "fsdp2", *FSDP2, *tuning, "trainer.max_steps=4",
                  "ckpt_path=last", cwd=tmp_path)
    ddp = fit("train_reward_model.py", tmp_path / "ddp", *DDP, *tuning, "trainer.max_steps=4", cwd=tmp_path)

    fsdp2_weights, ddp_weights = (load_file(f"{tmp_path / run}/reward_model/model.safetensors") for run in
                                  ("fsdp2", "ddp"))
    start = load_file(f"{TINY_PYTHIA}/model.safetensors")
    assert fsdp2_weights.keys() == ddp_weights.keys() and "score.weight" in ddp_weights
    assert max(float((ddp_weights[k] - start[k]).abs().max()) for k in start if k in ddp_weights) > 1e-3  # trained
    for name, tensor in ddp_weights.items():
        torch.testing.assert_close(fsdp2_weights[name], tensor, rtol=0, atol=1e-6, msg=name)
    stats = [json.loads((tmp_path / run / "reward_model" / "reward_stats.json").read_text())
             for run in ("fsdp2", "ddp")]
    assert stats[0] == pytest.approx(stats[1], abs=1e-5) and stats[1]["count"] == 128
    assert held_out_figures(resumed) == pytest.approx(held_out_figures(ddp), abs=1e-4)
