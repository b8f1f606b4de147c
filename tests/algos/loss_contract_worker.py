"""`python tests/algos/loss_contract_worker.py DEVICES ALGO OUT CASE [CASE ...]`: for each case in turn (a loss
type, with other settings after commas: `dapo,top_entropy_quantile=0.3`, a value that is no number a string), one
update on the fixed rollout on DEVICES CPU processes (DDP, gloo), in the same processes (one launch: a Trainer after
the first finds its ranks started and their group joined); rank 0 saves the changes of the trained tensors to OUT as
{case: delta}."""

import sys

import torch

from tests.algos.fixed_rollout import one_step_delta


def number_or_text(value: str) -> float | str:
    try:
        return float(value)
    except ValueError:
        return value


if __name__ == "__main__":
    devices, algo, out, cases = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
    deltas = {}
    for case in cases:
        loss_type, *settings = case.split(",")
        extra = {key: number_or_text(value) for key, value in (setting.split("=") for setting in settings)}
        deltas[case] = one_step_delta(algo, devices=devices, loss_type=loss_type, **extra)
    if int(torch.distributed.get_rank() if torch.distributed.is_initialized() else 0) == 0:
        torch.save(deltas, out)
