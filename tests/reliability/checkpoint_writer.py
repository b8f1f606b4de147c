"""Writes checkpoints to DIR/last.ckpt in a loop until killed: the subject of the kill -9 test.
Each checkpoint's tensor is filled with its own step, so a reader can tell a complete file."""

import sys

import torch

from lit_rlhf.checkpoint_io import SafeCheckpointIO

if __name__ == "__main__":
    target, io_name = sys.argv[1], sys.argv[2]
    if io_name == "safe":
        io = SafeCheckpointIO()
    else:
        from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

        io = TorchCheckpointIO()
    step = 0
    print("ready", flush=True)
    while True:
        step += 1
        io.save_checkpoint({"state_dict": {"w": torch.full((4_000_000,), float(step))}, "step": step}, target)
