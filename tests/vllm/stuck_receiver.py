"""A weight receiver whose load never finishes: the engine must give up after rollout.sync_timeout_s."""

import time


class StuckReceiver:
    def load_policy_weights(self, path: str) -> int:
        time.sleep(3600)
        return 0
