"""`python train.py trainer=fsdp2` on 2 CPU processes (gloo), as a user runs it: sampling on gathered weights,
sharded checkpoints that resume exactly, export from a sharded checkpoint, and the one-line refusals."""

import csv

import pytest
import torch

from tests.helpers import ROOT, run_script

FSDP2 = ["trainer=fsdp2", "trainer.accelerator=cpu", "trainer.devices=2"]
SHORT = ["algo.response_length=12", "data.batch_size=8", "callbacks.generation_samples=null",
         "callbacks.training_summary=null", "callbacks.evaluation=null", "callbacks.curves=null",
         "callbacks.histograms=null", "trainer.val_check_interval=2", "data.num_eval_prompts=8"]


def train(run_dir, *overrides, timeout=600):
    result = run_script("train.py", f"hydra.run.dir={run_dir}", *SHORT,
                        "+callbacks.dump._target_=tests.helpers.DumpTrainable", f"+callbacks.dump.path={run_dir}/dump",
                        *overrides, cwd=ROOT, timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]
    return torch.load(f"{run_dir}/dump/rank0.pt", weights_only=True)


def metric_rows(run_dir):
    """The logged training metrics per RL step, without wall-clock figures."""
    with open(f"{run_dir}/csv/metrics.csv") as f:
        rows = [row for row in csv.DictReader(f) if row.get("objective/scores")]
    return {int(r["step"]): {k: v for k, v in r.items() if v and k != "eps" and not k.startswith("time/")}
            for r in rows}


@pytest.mark.parametrize("overrides", [[], ["algo=grpo", "model.lora=null"], ["algo=ppo"]],
                         ids=["rloo-lora", "grpo-full", "ppo-lora"])
def test_fsdp2_samples_and_trains_as_ddp_does(overrides, tmp_path):
    """Same seeds, same prompts per rank: sampling on gathered weights draws the tokens DDP's replicas draw, and
    3 RL steps end on the same weights (float32: the two sum the ranks' gradients in another order)."""
    ddp = train(tmp_path / "ddp", "steps=3", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                *overrides)
    fsdp2 = train(tmp_path / "fsdp2", "steps=3", *FSDP2, *overrides)
    assert ddp["trained"].keys() == fsdp2["trained"].keys() and ddp["trained"]
    for name, tensor in ddp["trained"].items():
        torch.testing.assert_close(fsdp2["trained"][name], tensor, atol=1e-4, rtol=0, msg=name)
    ddp_rows, fsdp2_rows = metric_rows(tmp_path / "ddp"), metric_rows(tmp_path / "fsdp2")
    assert len(ddp_rows) == 3 and ddp_rows.keys() == fsdp2_rows.keys()
    for step, row in ddp_rows.items():  # what was sampled and how it scored
        assert float(fsdp2_rows[step]["objective/scores"]) == pytest.approx(float(row["objective/scores"]), abs=1e-6)

