"""trainer=fsdp2 trains what one process trains: FSDP2 on 2 CPU ranks (gloo) against 1 process on the same global
batch (a fixed rollout, so that sampling on two ranks draws nothing different), the same weights after 3 RL steps
within 1e-5; full fine-tuning and LoRA, RLOO, GRPO and PPO (with its critic) on the global token mean (dapo: the
loss types that average per rank, such as bnpo, depend on the split by design, as with DDP)."""

import pytest
import torch
import yaml

from tests.apps import ROOT, run_app
from tests.distributed.fsdp2_worker import trained_after_three_steps

pytestmark = pytest.mark.multi_rank  # each test starts 2 ranks


def trained(devices, algo, lora, out, *settings):
    """The worker on DEVICES ranks (rank zero in this process, Lightning's launcher starts the others), or, on one,
    its function called here."""
    if devices == 1:
        return trained_after_three_steps(1, algo, lora, **{k: yaml.safe_load(v) for k, v in
                                                            (s.split("=", 1) for s in settings)})
    result = run_app("tests/distributed/fsdp2_worker.py", str(devices), algo, "lora" if lora else "full", str(out),
                     *settings, cwd=ROOT, env={"PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-4000:]
    return torch.load(out, weights_only=True)


@pytest.mark.parametrize("algo, lora, settings", [
    ("rloo", True, ["loss_type=dapo"]),
    ("grpo", True, []),  # GRPO's loss_type is dapo by default
    ("grpo", False, []),
    ("ppo", True, ["num_ppo_epochs=2", "loss_type=dapo"]),  # the critic: a value head on the hidden states
    ("ppo", False, ["num_ppo_epochs=2", "loss_type=dapo"]),
])
def test_two_fsdp2_ranks_train_the_weights_of_one_process(algo, lora, settings, tmp_path):
    from transformers import AutoModelForCausalLM

    from lit_rlhf.assets import TINY_PYTHIA

    one = trained(1, algo, lora, tmp_path / "one.pt", *settings)
    two = trained(2, algo, lora, tmp_path / "two.pt", *settings)
    assert one.keys() == two.keys() and one
    assert all("lora_" in name for name in one if "value_head" not in name) == lora
    assert any("value_head" in name for name in one) == (algo == "ppo")
    for name in one:
        torch.testing.assert_close(two[name], one[name], atol=1e-5, rtol=0, msg=name)
    if not lora:  # training moved the weights well beyond the tolerance
        initial = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA).state_dict()
        moved = max(float((one[f"policy.{name}"] - initial[name]).abs().max()) for name in initial
                    if f"policy.{name}" in one)
        assert moved > 1e-3
