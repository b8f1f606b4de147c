"""`python tests/reliability/checkpoint_writer.py TARGET safe|torch`: the subject of the kill -9 test.

It imports once, then answers commands on stdin, a line each: `fork` starts a writer (a forked child that writes
checkpoints to TARGET in a loop until killed; each checkpoint's tensor is filled with its own step, so a reader can
tell a complete file) and prints its pid; `wait PID` reaps it and prints `done`. Forking from this one-thread
process spares each writer the seconds of importing torch and Lightning."""

import os
import sys

import torch


def write_forever(target: str, io_name: str) -> None:
    if io_name == "safe":
        from lit_rlhf.checkpoints.loading import SafeCheckpointIO

        io = SafeCheckpointIO()
    else:
        from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

        io = TorchCheckpointIO()
    step = 0
    while True:
        step += 1
        io.save_checkpoint({"state_dict": {"w": torch.full((4_000_000,), float(step))}, "step": step}, target)


if __name__ == "__main__":
    torch.set_num_threads(1)  # no thread pool for a forked child to inherit half-alive
    target, io_name = sys.argv[1], sys.argv[2]
    import lightning.fabric.plugins.io.torch_io  # noqa: F401  (imported before forking, once)

    import lit_rlhf.checkpoints.loading  # noqa: F401

    print("ready", flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        if command == "fork":
            pid = os.fork()
            if pid == 0:
                write_forever(target, io_name)
            print(pid, flush=True)
        elif command == "wait":
            os.waitpid(int(args[0]), 0)
            print("done", flush=True)
