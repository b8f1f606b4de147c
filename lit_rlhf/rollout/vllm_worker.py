"""Code that runs inside the vLLM engine's process: vLLM adds WeightReceiver's methods to its worker
(`worker_extension_cls`), and the engine's process calls them by name through `LLM.collective_rpc`. Kept free of
lit_rlhf's other imports, so the engine process loads nothing else of ours."""

from __future__ import annotations

from safetensors.torch import load_file


class WeightReceiver:
    def load_policy_weights(self, path: str) -> int:
        """Load the tensors of a safetensors file (checkpoint names, a subset of the model's) into the running
        model, through vLLM's in-place reload (which redoes any kernel-specific repacking). -> tensors loaded"""
        weights = load_file(path, device=str(self.model_runner.device))
        self.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
        return len(weights)
