"""on_rank_zero: rank zero's work and its outcome on every rank (what rollout=vllm_server's weight sync relies on
under trainer=ddp and trainer=fsdp2): the result comes from rank zero alone, and an error there stops every rank
with rank zero's line instead of leaving the others waiting."""

import pytest
import torch

from tests.distributed.ranks import run_two_ranks


def worker(rank: int, init_method: str, out: str) -> None:
    from lit_rlhf.distributed.ranks import on_rank_zero
    from lit_rlhf.errors import ConfigError, UnavailableError

    torch.distributed.init_process_group("gloo", init_method=init_method, rank=rank, world_size=2)
    calls = []

    def outcome(action):
        try:
            return ("result", on_rank_zero(action))
        except (ConfigError, UnavailableError, RuntimeError) as err:
            return (type(err).__name__, str(err))

    def named(value):
        calls.append(rank)
        return value

    def config_error():
        calls.append(rank)
        raise ConfigError(f"rank {rank}: the server at http://x refused the weights")

    def crash():
        calls.append(rank)
        raise RuntimeError("disk gone")

    try:
        seen = [outcome(lambda: named(f"prefix-of-rank-{rank}")), outcome(config_error), outcome(crash)]
        torch.save({"seen": seen, "calls": calls}, f"{out}/rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.multi_rank  # starts 2 ranks
def test_rank_zero_acts_alone_and_every_rank_gets_its_result_or_its_error_line(tmp_path):
    run_two_ranks(worker, str(tmp_path))
    zero, one = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert zero["calls"] == [0, 0, 0] and one["calls"] == []  # the action runs on rank zero only
    assert zero["seen"][0] == one["seen"][0] == ("result", "prefix-of-rank-0")
    line = "rank 0: the server at http://x refused the weights"
    assert zero["seen"][1] == one["seen"][1] == ("ConfigError", line)  # rank zero's own line, on both
    assert zero["seen"][2] == ("RuntimeError", "disk gone")  # rank zero raises its own exception
    assert one["seen"][2] == ("UnavailableError", "rank 0 failed (RuntimeError: disk gone)")


def test_one_process_runs_the_action_itself():
    from lit_rlhf.distributed.ranks import on_rank_zero

    assert not torch.distributed.is_initialized()
    assert on_rank_zero(lambda: 42) == 42
