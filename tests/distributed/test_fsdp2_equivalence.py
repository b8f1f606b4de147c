"""trainer=fsdp2 trains what one process trains: FSDP2 on 2 CPU ranks (gloo) against 1 process on the same global
batch (a fixed rollout, so that sampling on two ranks draws nothing different), the same weights after 3 RL steps
within 1e-5; full fine-tuning and LoRA, RLOO, GRPO and PPO (with its critic) on the global token mean (dapo: the
loss types that average per rank, such as bnpo, depend on the split by design, as with DDP)."""

import pytest
import torch

from tests.apps import ROOT, run_app
from tests.distributed.fsdp2_worker import parse_case, trained_after_three_steps

pytestmark = [pytest.mark.multi_rank, pytest.mark.integration]  # the module's fixture starts 2 ranks

CASES = {  # ALGO,LORA[,SETTING=VALUE...]: the worker's argument
    "rloo-lora": "rloo,lora,loss_type=dapo",
    "grpo-lora": "grpo,lora",  # GRPO's loss_type is dapo by default
    "grpo-full": "grpo,full",
    "ppo-lora": "ppo,lora,num_ppo_epochs=2,loss_type=dapo",  # the critic: a value head on the hidden states
    "ppo-full": "ppo,full,num_ppo_epochs=2,loss_type=dapo",
}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Every case trained on 2 FSDP2 ranks in one launch of the worker (rank zero in this process, Lightning's
    launcher starts the other): the processes' start-up is paid once, not once per case."""
    out = tmp_path_factory.mktemp("fsdp2") / "two.pt"
    result = run_app("tests/distributed/fsdp2_worker.py", "2", str(out), *CASES.values(), cwd=ROOT,
                     env={"PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-4000:]
    return torch.load(out, weights_only=True)


@pytest.mark.parametrize("case", CASES)
def test_two_fsdp2_ranks_train_the_weights_of_one_process(case, two_ranks):
    from transformers import AutoModelForCausalLM

    from lit_rlhf.assets import TINY_PYTHIA

    algo, lora, settings = parse_case(CASES[case])
    one = trained_after_three_steps(1, algo, lora, **settings)
    two = two_ranks[CASES[case]]
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
