"""Code that runs inside the vLLM engine's process: vLLM adds WeightReceiver's methods to its worker
(`worker_extension_cls`), and the engine's process calls them by name through `LLM.collective_rpc`. Kept free of
lit_rlhf's other imports, so the engine process loads nothing else of ours."""

from __future__ import annotations

from collections import defaultdict

import torch
from safetensors.torch import load_file


class WeightReceiver:
    def load_policy_weights(self, path: str) -> int:
        """Load the tensors of a safetensors file (checkpoint names, a subset of the model's) into the running
        model, through vLLM's in-place reload (which redoes any kernel-specific repacking). -> tensors loaded"""
        weights = load_file(path, device=str(self.model_runner.device))
        self.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
        if torch.device(self.model_runner.device).type == "cpu":
            repack_tied_layers(self.model_runner.get_model())
        return len(weights)


def repack_tied_layers(model: torch.nn.Module) -> None:
    """Each layer's weight processing redone where layers share one weight (an output layer tied to the input
    embeddings), on a CPU. vLLM's reload redoes it for the layers whose checkpoint names it loaded, and a tied output
    layer has none (its weight is the embeddings'); on a CPU the processing packs a copy of the weight for the matmul
    (a copy that processing again replaces), and the output layer kept computing with the old one."""
    sharing = defaultdict(list)
    for module in model.modules():
        weight = module._parameters.get("weight")
        if weight is not None and hasattr(module, "quant_method"):
            sharing[id(weight)].append(module)
    for modules in sharing.values():
        for module in modules if len(modules) > 1 else ():
            module.quant_method.process_weights_after_loading(module)
