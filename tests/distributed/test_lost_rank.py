"""The line for a collective that failed because another rank died, from the errors gloo and NCCL raise."""

from lit_rlhf.distributed.lost_rank import lost_rank_line

GLOO = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:46471. This is typically caused by a remote worker crashing.")


def test_a_lost_peer_names_the_other_rank_of_two_and_says_another_rank_beyond():
    assert lost_rank_line(RuntimeError(GLOO), rank=0, world_size=2).startswith("rank 0 lost rank 1 of this 2-rank")
    assert lost_rank_line(RuntimeError(GLOO), rank=1, world_size=2).startswith("rank 1 lost rank 0 of this 2-rank")
    assert lost_rank_line(RuntimeError(GLOO), rank=3, world_size=8).startswith("rank 3 lost another rank of this")


def test_other_errors_are_left_alone():
    assert lost_rank_line(RuntimeError("CUDA out of memory"), rank=0, world_size=2) is None
    assert lost_rank_line(ValueError(GLOO), rank=0, world_size=2) is None
    assert lost_rank_line(RuntimeError(GLOO), rank=0, world_size=1) is None
