"""The input embeddings' FSDP unit: gathered for the forward, never for the backward (a lookup's gradient needs
the indices, not the table), and its gradient still the unsharded model's."""

import os

import torch
import torch.multiprocessing as mp
from transformers import AutoModelForCausalLM

from lit_rlhf.assets import TINY_PYTHIA


def backward_worker(rank: int, port: int, out: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    from lit_rlhf.distributed.sharding import full_tensor, shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=1)
    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    shard(model, init_device_mesh("cpu", (1,)))
    embeddings = model.get_input_embeddings()
    gathered = {"forward": 0, "backward": 0}
    phase = ["forward"]
    unshard = FSDPParamGroup.unshard

    def counting(group, *args, **kwargs):  # an all-gather started by this call, for the embeddings' unit
        pending = group._all_gather_result is not None
        unshard(group, *args, **kwargs)
        if not pending and group._all_gather_result is not None and any(
                p._module_info.module is embeddings for p in group.fsdp_params):
            gathered[phase[0]] += 1

    FSDPParamGroup.unshard = counting
    loss = model(torch.arange(1, 13).reshape(2, 6)).logits.float().square().mean()
    phase[0] = "backward"
    loss.backward()
    grads = {name: full_tensor(p.grad).clone() for name, p in model.named_parameters()}
    torch.save({"gathered": gathered, "grads": grads}, f"{out}/rank{rank}.pt")
    torch.distributed.destroy_process_group()


def test_the_embeddings_are_gathered_for_the_forward_only(tmp_path):
    from tests.distributed.test_fsdp2_train import free_port

    mp.spawn(backward_worker, args=(free_port(), str(tmp_path)), nprocs=1)
    sharded = torch.load(tmp_path / "rank0.pt", weights_only=True)
    assert sharded["gathered"] == {"forward": 1, "backward": 0}
    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    model(torch.arange(1, 13).reshape(2, 6)).logits.float().square().mean().backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(sharded["grads"][name], p.grad, rtol=1e-5, atol=1e-7, msg=name)
