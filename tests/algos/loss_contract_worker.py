"""`python tests/algos/loss_contract_worker.py DEVICES ALGO OUT LOSS_TYPE [LOSS_TYPE ...]`: for each loss type in
turn, one update on the fixed rollout on DEVICES CPU processes (DDP, gloo), in the same processes (one launch: a
Trainer after the first finds its ranks started and their group joined); rank 0 saves the changes of the trained
tensors to OUT as {loss_type: delta}."""

import sys

import torch

from tests.algos.fixed_rollout import one_step_delta

if __name__ == "__main__":
    devices, algo, out, loss_types = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
    deltas = {loss_type: one_step_delta(algo, devices=devices, loss_type=loss_type) for loss_type in loss_types}
    if int(torch.distributed.get_rank() if torch.distributed.is_initialized() else 0) == 0:
        torch.save(deltas, out)
