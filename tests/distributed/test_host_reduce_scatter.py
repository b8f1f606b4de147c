"""Gradient reduce-scatter between CPU ranks in pieces: the same numbers as gloo's own reduce-scatter (two ranks:
to the last bit), and trainer=fsdp2 on CPU reduce-scatters every unit's gradients through it."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from lit_rlhf.assets import TINY_PYTHIA
from tests.distributed.ranks import run_two_ranks

pytestmark = pytest.mark.multi_rank  # each test starts 2 ranks


def worker(rank: int, init_method: str, out: str) -> None:
    from lit_rlhf.distributed import host_reduce_scatter

    torch.distributed.init_process_group("gloo", init_method=init_method, rank=rank, world_size=2)
    patched = {name: getattr(host_reduce_scatter, name) for name in ("PIECE_BYTES", "reduce_scatter_in_pieces")}
    try:
        compare_and_train(rank, out)
    finally:
        for name, value in patched.items():
            setattr(host_reduce_scatter, name, value)
        torch.distributed.destroy_process_group()


def compare_and_train(rank: int, out: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from lit_rlhf.distributed import host_reduce_scatter
    from lit_rlhf.distributed.sharding import full_tensor, shard

    host_reduce_scatter.PIECE_BYTES = 7 * 4  # 7 floats a piece: a chunk of 23 takes 4 exchanges, the last short
    torch.manual_seed(rank)
    ops = {"sum": torch.distributed.ReduceOp.SUM, "avg": torch.distributed.ReduceOp.AVG}
    same = {}
    for name, op in ops.items():
        gradient = torch.randn(2 * 23)
        ours, gloos = torch.empty(23), torch.empty(23)
        host_reduce_scatter.PiecewiseReduceScatter()(ours, gradient.clone(), None, op)
        host_reduce_scatter.torch_reduce_scatter(gloos, gradient.clone(), op=op)
        same[name] = torch.equal(ours, gloos)
    # any other reduction is torch's own: rank r holds (r + 1) * (0..45), so the max is rank 1's
    largest = torch.empty(23)
    host_reduce_scatter.PiecewiseReduceScatter()(largest, torch.arange(46.0) * (rank + 1), None,
                                                  torch.distributed.ReduceOp.MAX)
    same["max"] = torch.equal(largest, torch.arange(46.0).view(2, 23)[rank] * 2)

    calls = []
    original = host_reduce_scatter.reduce_scatter_in_pieces
    host_reduce_scatter.reduce_scatter_in_pieces = lambda output, *args, **kw: (calls.append(output.numel()),
                                                                              original(output, *args, **kw))
    host_reduce_scatter.PIECE_BYTES = 2**20
    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    shard(model, init_device_mesh("cpu", (2,)))
    tokens = torch.arange(1, 13).reshape(2, 6) + 6 * rank  # each rank its own batch: the gradients differ
    model(tokens).logits.float().square().mean().backward()
    grads = {name: full_tensor(p.grad).clone() for name, p in model.named_parameters()}
    torch.save({"same": same, "calls": calls, "grads": grads}, f"{out}/rank{rank}.pt")


def test_pieces_give_gloos_numbers_and_fsdp2_reduces_through_them(tmp_path):
    run_two_ranks(worker, str(tmp_path))
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    for rank in ranks:
        assert rank["same"] == {"sum": True, "avg": True, "max": True}
        # one reduce-scatter per unit with gradients: every block, the input embeddings, the root
        units = model.config.num_hidden_layers + 2
        assert len(rank["calls"]) == units
    both = torch.cat([torch.arange(1, 13).reshape(2, 6), torch.arange(1, 13).reshape(2, 6) + 6])
    model(both).logits.float().square().mean().backward()  # the mean over both ranks' batches
    # two half-batch backwards summed against one whole-batch backward: float32 sums in another order, apart by a few
    # float32 roundings of the tensor's largest entry (the pieces' own exactness is the torch.equal with gloo above)
    for name, p in model.named_parameters():
        scale = float(p.grad.abs().max())
        torch.testing.assert_close(ranks[0]["grads"][name], p.grad, rtol=1e-5, atol=1e-6 * scale, msg=name)
