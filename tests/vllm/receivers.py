"""Weight receivers that misbehave: the engine must give up after rollout.sync_timeout_s, or report the failure."""

import time


class StuckReceiver:
    def load_policy_weights(self, path: str) -> int:
        time.sleep(3600)
        return 0


class FailingReceiver:
    def load_policy_weights(self, path: str) -> int:
        raise RuntimeError("shape mismatch for gpt_neox.layers.0.attention.query_key_value.weight")
