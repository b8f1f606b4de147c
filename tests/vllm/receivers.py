"""Weight receivers for the tests: ones that misbehave (the engine must give up after rollout.sync_timeout_s, or
report the failure), and one that also reports how the worker computes."""

import os
import time

import torch

from lit_rlhf.rollout.vllm_worker import WeightReceiver


class FailingThenStuckReceiver(WeightReceiver):
    """Its first weight sync fails (the engine lives on), every later one never returns."""

    calls = 0

    def load_policy_weights(self, path: str) -> int:
        FailingThenStuckReceiver.calls += 1
        if FailingThenStuckReceiver.calls == 1:
            raise RuntimeError("shape mismatch for gpt_neox.layers.0.attention.query_key_value.weight")
        time.sleep(3600)
        return 0


class InspectedReceiver(WeightReceiver):
    def compute_settings(self) -> dict:
        """torch's threads in the engine, the cores it may run on, and its process."""
        return {"threads": torch.get_num_threads(), "cores": sorted(os.sched_getaffinity(0)), "pid": os.getpid()}
