"""Code that runs inside the vLLM engine's process: vLLM adds WeightReceiver's methods to its worker
(`worker_extension_cls`), and the trainer calls them by name through `LLM.collective_rpc`. Kept free of
lit_rlhf's other imports, so the engine process loads nothing else of ours."""

from __future__ import annotations

import gc

from safetensors.torch import load_file


class WeightReceiver:
    def load_policy_weights(self, path: str) -> int:
        """Load the tensors of a safetensors file (checkpoint names, a subset of the model's) into the running
        model, through vLLM's in-place reload (which redoes any kernel-specific repacking). -> tensors loaded"""
        weights = load_file(path, device=str(self.model_runner.device))
        self.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
        return len(weights)

    def set_idle_spin(self, seconds: float) -> int:
        """How long the worker busy-waits for its scheduler's next message before it sleeps on a socket (vLLM:
        1 s after every message). On CPU that second after each rollout is a core taken from the trainer; a
        few milliseconds cover the gap between two decoding steps. -> message-queue readers changed (0 where
        this vLLM has none of that kind)"""
        try:
            from vllm.distributed.device_communicators.shm_broadcast import SpinCondition
        except ImportError:
            return 0
        readers = [obj for obj in gc.get_objects() if isinstance(obj, SpinCondition) and obj.is_reader]
        for reader in readers:
            reader.busy_loop_s = seconds
        return len(readers)
