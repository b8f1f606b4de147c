"""bench/gpu.py's CPU path: every implementation runs the stated work on the embedded model and lands in the table;
without a CUDA device the GPU run is one line."""

import json
import subprocess
import sys

import pytest
import torch

from tests.helpers import ROOT


def test_the_cpu_path_measures_every_implementation_of_both_algorithms(tmp_path):
    done = subprocess.run([sys.executable, "bench/gpu.py", "--device", "cpu", "--shapes", "tiny", "--steps", "1",
                           "--warmup", "0", "--new-tokens", "8", "--compiled-shapes", "tiny", "--skip-checks", "--out",
                           str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    measured = {(run["algo"], run["impl"]): run["result"] for run in data["runs"]}
    assert {("rloo", "lit_rlhf"), ("rloo", "floor"), ("grpo", "lit_rlhf"), ("grpo", "lit_rlhf compiled"),
            ("grpo", "floor")} <= measured.keys()
    for (algo, impl), result in measured.items():
        assert "error" not in result, (algo, impl, result)
        assert result["device"] == "cpu" and result["algo"] == algo
        assert result["tokens_per_s"] * result["step_s"] == pytest.approx(8 * 4 * 8)  # 32 responses x 8 tokens
    table = (tmp_path / "gpu_check.md").read_text()
    assert table.count("| tiny |") == len(measured) and "1.00x" in table  # each floor against itself


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_the_gpu_run_without_a_gpu_is_one_line():
    done = subprocess.run([sys.executable, "bench/gpu.py"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().startswith("error: --device cuda, but torch sees no CUDA device")
