"""The GRPO benchmark's two in-repo implementations run on the embedded default and do the stated work: every step
generates 8 x 4 responses of exactly the forced length, and the floor's loss is GRPO's (dapo + k3)."""

import json
import sys

import pytest
import torch

from tests.apps import ROOT, run_app

BENCH = ROOT / "bench"


@pytest.mark.integration
@pytest.mark.parametrize("script", [["grpo_floor.py"], ["lit_step.py", "--algo", "grpo"]])
@pytest.mark.parametrize("variant", [["--beta", "0.04"], ["--beta", "0", "--full"]])
def test_grpo_benchmark_step_does_the_stated_work(script, variant):
    out = run_app(f"bench/{script[0]}", *script[1:], *variant, "--model", "tiny", "--steps", "1", "--warmup", "0",
                  "--new-tokens", "8", cwd=BENCH)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["algo"] == "grpo" and report["steps"] == 1
    assert report["tokens_per_s"] * report["step_s"] == pytest.approx(8 * 4 * 8)  # 32 responses x 8 tokens
    assert ("reference forward" in report["phases_s"]) == (variant[1] != "0")
    assert report["full"] == ("--full" in variant)


def test_grpo_floor_loss_is_dapo_with_k3_by_hand():
    """The floor's loss on hand-made numbers: two groups of two, one token masked."""
    sys.path.insert(0, str(BENCH))
    try:
        from grpo_floor import grpo_loss
    finally:
        sys.path.remove(str(BENCH))
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -1.5], [-1.0, -1.0], [-2.0, -0.1]], requires_grad=True)
    ref = torch.tensor([[-1.5, -2.0], [-0.5, -1.0], [-1.0, -3.0], [-2.0, -0.1]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1]], dtype=torch.bool)
    scores = torch.tensor([1.0, 0.0, 0.5, 0.5])
    # group 1: mean 0.5, std (unbiased) 0.7071 -> advantages +-0.5/(0.7071+1e-4); group 2: std 0 -> 0
    a = 0.5 / (2 ** -0.5 + 1e-4)
    advantages = [a, -a, 0.0, 0.0]
    beta, total = 0.04, 0.0
    for i in range(4):
        for t in range(2):
            if mask[i, t]:
                d = float(ref[i, t] - logprobs[i, t].detach())
                total += -advantages[i] + beta * (torch.exp(torch.tensor(d)).item() - d - 1)
    loss = grpo_loss(logprobs, ref, scores, mask, k=2, beta=beta)
    assert loss.item() == pytest.approx(total / 7, rel=1e-6)
