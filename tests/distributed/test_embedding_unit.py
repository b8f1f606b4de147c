"""The input embeddings' FSDP unit: gathered for the forward, never for the backward (a lookup's gradient needs
the indices, not the table), and its gradient still the unsharded model's."""

import torch
from transformers import AutoModelForCausalLM

from lit_rlhf.assets import TINY_PYTHIA


def sharded_backward(port: int) -> dict:
    """One FSDP2 rank (gloo, world size 1) in this process: the all-gathers of the embeddings' unit in the forward
    and in the backward, and the full gradients."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    from lit_rlhf.distributed.sharding import full_tensor, shard

    gathered = {"forward": 0, "backward": 0}
    phase = ["forward"]
    unshard = FSDPParamGroup.unshard

    def counting(group, *args, **kwargs):  # an all-gather started by this call, for the embeddings' unit
        pending = group._all_gather_result is not None
        unshard(group, *args, **kwargs)
        if not pending and group._all_gather_result is not None and any(
                p._module_info.module is embeddings for p in group.fsdp_params):
            gathered[phase[0]] += 1

    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    FSDPParamGroup.unshard = counting
    try:
        model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
        shard(model, init_device_mesh("cpu", (1,)))
        embeddings = model.get_input_embeddings()
        loss = model(torch.arange(1, 13).reshape(2, 6)).logits.float().square().mean()
        phase[0] = "backward"
        loss.backward()
        grads = {name: full_tensor(p.grad).clone() for name, p in model.named_parameters()}
        return {"gathered": gathered, "grads": grads}
    finally:
        FSDPParamGroup.unshard = unshard
        torch.distributed.destroy_process_group()


def test_the_embeddings_are_gathered_for_the_forward_only():
    from tests.distributed.test_fsdp2_train import free_port

    sharded = sharded_backward(free_port())
    assert sharded["gathered"] == {"forward": 1, "backward": 0}
    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    model(torch.arange(1, 13).reshape(2, 6)).logits.float().square().mean().backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(sharded["grads"][name], p.grad, rtol=1e-5, atol=1e-7, msg=name)
