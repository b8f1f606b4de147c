"""Ctrl-C or SIGTERM after training finished stops the end-of-run reports at once, records the run as
interrupted in result.json, and leaves the final checkpoint complete."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.helpers import FAST, ROOT


@pytest.mark.parametrize("signame, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_during_the_end_of_run_evaluation_stops_it_and_records_the_run(signame, code, tmp_path):
    run_dir = tmp_path / "run"
    reports = [a for a in FAST if not a.startswith("callbacks.evaluation")]
    # a long end-of-run evaluation: 256 completions per held-out prompt and side
    args = [str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", *reports, "callbacks.evaluation.samples_per_prompt=256"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    last = run_dir / "checkpoints" / "last.ckpt"
    while not last.exists() and process.poll() is None:  # written when training finishes
        time.sleep(0.05)
    time.sleep(0.5)  # into the evaluation
    process.send_signal(getattr(signal, signame))
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr[-3000:]
    assert f"stopped by {signame} during the end-of-run reports" in stderr.strip().splitlines()[-1]
    assert "Traceback" not in stderr
    assert not (run_dir / "evaluation" / "evaluation.json").exists()  # the reports were cut short
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "interrupted"
    assert torch.load(last, weights_only=True)["rlhf_state"]["rl_step"] == 1
