"""`python tests/algos/loss_contract_worker.py DEVICES ALGO LOSS_TYPE OUT`: one update on the fixed rollout,
on DEVICES CPU processes (DDP, gloo); rank 0 saves the change of the trained tensors to OUT."""

import sys

import torch

from tests.algos.fixed_rollout import one_step_delta

if __name__ == "__main__":
    devices, algo, loss_type, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    delta = one_step_delta(algo, devices=devices, loss_type=loss_type)
    if int(torch.distributed.get_rank() if torch.distributed.is_initialized() else 0) == 0:
        torch.save(delta, out)
