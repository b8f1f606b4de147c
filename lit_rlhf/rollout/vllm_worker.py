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
        on_cpu = torch.device(self.model_runner.device).type == "cpu"
        experts = expert_layers(self.model_runner.get_model()) if on_cpu else {}
        self.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
        if on_cpu:
            repack_tied_layers(self.model_runner.get_model())
            repack_reloaded_experts(experts)
        return len(weights)


def expert_layers(model: torch.nn.Module) -> dict[torch.nn.Module, torch.Tensor]:
    """The mixture-of-experts layers whose CPU kernel reads its weights prepacked, each with a copy of its first
    expert's fused gate and up projections as they are now (before a reload)."""
    layers = {}
    for module in model.modules():
        if "w13_weight" in module._parameters and "w2_weight" in module._parameters:
            kernel = prepacking_kernel(module)
            if kernel is not None and not getattr(kernel, "_use_zentorch", False):
                layers[module] = module.w13_weight[0].detach().clone()
    return layers


def prepacking_kernel(layer: torch.nn.Module, depth: int = 4):
    """The CPU kernel object under the layer's quant_method that prepacks its experts' weights (it has the `isa` the
    packing is for), or None."""
    pending, seen = [(getattr(layer, "quant_method", None), 0)], set()
    while pending:
        obj, level = pending.pop()
        if obj is None or id(obj) in seen or level > depth:
            continue
        seen.add(id(obj))
        if isinstance(getattr(obj, "isa", None), str) and type(obj).__name__.startswith("CPU"):
            return obj
        pending += [(value, level + 1) for value in vars(obj).values() if hasattr(value, "__dict__")] \
            if hasattr(obj, "__dict__") else []
    return None


def repack_reloaded_experts(layers: dict[torch.nn.Module, torch.Tensor]) -> None:
    """The experts' weights of each layer the reload wrote, packed in place for the CPU kernel, on a CPU. vLLM's
    in-place reload writes a mixture of experts' weights as the checkpoint lays them out into the tensors its CPU
    kernel reads prepacked, and does not pack them again: after a weight sync that kernel computed with the raw
    layout (the sampler's logprobs 0.02 from the trainer's on average, before any update). A layer the sync did not
    write (its first expert unchanged) keeps its packed weights."""
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import cpu_prepack_moe_weight

    with torch.no_grad():
        for layer, first_expert in layers.items():
            if torch.equal(layer.w13_weight[0], first_expert):
                continue
            isa = prepacking_kernel(layer).isa
            for name in ("w13_weight", "w2_weight"):
                weight = getattr(layer, name)
                weight.copy_(cpu_prepack_moe_weight(weight.detach().clone(), isa))


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
