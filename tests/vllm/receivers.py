"""Weight receivers for the tests: ones that misbehave (the engine must give up after rollout.sync_timeout_s, or
report the failure), and one that also reports how the worker computes."""

import gc
import time

import torch

from lit_rlhf.rollout.vllm_worker import WeightReceiver


class StuckReceiver(WeightReceiver):
    def load_policy_weights(self, path: str) -> int:
        time.sleep(3600)
        return 0


class FailingReceiver(WeightReceiver):
    def load_policy_weights(self, path: str) -> int:
        raise RuntimeError("shape mismatch for gpt_neox.layers.0.attention.query_key_value.weight")


class InspectedReceiver(WeightReceiver):
    def compute_settings(self) -> dict:
        """torch's threads in the worker, and how long its message-queue readers busy-wait."""
        spins = {obj.busy_loop_s for obj in gc.get_objects()
                 if type(obj).__name__ == "SpinCondition" and getattr(obj, "is_reader", False)}
        return {"threads": torch.get_num_threads(), "idle_spin_s": sorted(spins)}
