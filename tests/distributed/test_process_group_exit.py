"""A run's process groups are destroyed when its process exits, while the interpreter is whole: left to the
interpreter's finalization, gloo's may end a finished run with SIGABRT."""

import os
import subprocess
import sys

import lightning as L
import pytest

from lit_rlhf.distributed import process_group_exit
from tests.apps import ROOT
from tests.conftest import make_rloo

pytestmark = pytest.mark.integration  # a process of its own; a Trainer

# the handler registered first runs last: it sees what the one the module registers left
AT_EXIT = """
import atexit, sys
import torch.distributed as dist
from lit_rlhf.distributed.process_group_exit import destroy_process_group_at_exit

atexit.register(lambda: print("a process group at exit:", dist.is_initialized()))
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
before = atexit._ncallbacks()
destroy_process_group_at_exit()
destroy_process_group_at_exit()
print("handlers registered:", atexit._ncallbacks() - before)
"""


def test_a_process_group_left_at_the_end_of_a_process_is_destroyed_at_its_exit(tmp_path):
    result = subprocess.run([sys.executable, "-c", AT_EXIT, str(tmp_path / "store")], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["handlers registered: 1", "a process group at exit: False"]


def test_the_rl_and_pair_modules_register_it_when_a_run_sets_them_up(monkeypatch):
    from lit_rlhf.algos.sft import SFTModule
    from lit_rlhf.assets import TINY_PYTHIA

    registered = []
    monkeypatch.setattr(process_group_exit.atexit, "register", registered.append)
    for module in (make_rloo(), SFTModule(model={"name_or_path": TINY_PYTHIA, "lora": None})):
        monkeypatch.setattr(process_group_exit, "_registered", False)
        module.trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False)
        module.setup("fit")
    assert registered == [process_group_exit.destroy_process_groups] * 2


def test_the_destroyed_groups_workers_get_the_interpreter_before_it_is_torn_down(monkeypatch):
    """gloo's worker thread frees its last collective's tensors after the collective returned, and that takes the GIL;
    asked for during finalization, the process aborts. After destroying the groups, the handler gives the GIL up for a
    while: here a thread that is woken by the destroy and needs the GIL runs before the handler returns, though
    the switch interval never takes the GIL from this thread on its own."""
    import threading

    destroyed, ran = threading.Event(), []
    monkeypatch.setattr(process_group_exit.torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(process_group_exit.torch.distributed, "destroy_process_group", destroyed.set)
    worker = threading.Thread(target=lambda: ran.append(destroyed.wait(timeout=60)))
    worker.start()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(100)
    try:
        process_group_exit.destroy_process_groups()
        freed_before_return = list(ran)
    finally:
        sys.setswitchinterval(interval)
        worker.join()
    assert freed_before_return == [True]
