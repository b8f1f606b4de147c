"""How the launching rank of a one-node distributed run watches the ranks it started: Lightning's launcher and its
observer thread, with a grace for the launching rank to say the lost rank itself (lost_rank.py). Built on names
private to Lightning, so lost_rank.report_lost_ranks imports it only for a run that starts ranks, and keeps
Lightning's own launcher where a Lightning release lacks them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from lightning.fabric.strategies.launchers.subprocess_script import _ChildProcessObserver
from lightning.fabric.utilities.distributed import _set_num_threads_if_needed
from lightning.pytorch.strategies.launchers.subprocess_script import (
    _SubprocessScriptLauncher as SubprocessScriptLauncher,
)

from lit_rlhf.errors import EXIT_SIGINT, EXIT_SIGTERM, EXIT_USER_ERROR, said
from lit_rlhf.terminal import printable


class LostRankObserver(_ChildProcessObserver):
    """Lightning's watch over the ranks its launcher started (a thread of the launching rank, polling every few
    seconds). Lightning's own SIGKILLs the launching rank as soon as another rank is gone, so a launching rank busy
    between collectives (sampling, writing a checkpoint) would die without a word. This one gives it `grace_s` to
    reach its next collective, fail there and say the lost rank itself (the process then ends, and this thread with
    it); one still going after that (NCCL may wait on a dead peer for its whole timeout) is stopped here with the
    same line. Ranks that a Ctrl-C or SIGTERM to every process ended (exit 130 or 143, or the signal's) while this one
    waited on them where it cannot hear it (the process group's set-up) are said as that stop, with its exit code."""

    def __init__(self, child_processes: list[subprocess.Popen], rank: int, world_size: int,
                 where_to_resume: Callable[[], str], grace_s: float = 20.0, sleep_period: float = 5.0,
                 exit: Callable[[int], None] = os._exit) -> None:
        super().__init__(main_pid=os.getpid(), child_processes=child_processes, sleep_period=sleep_period)
        self.rank, self.world_size, self.where_to_resume = rank, world_size, where_to_resume
        self.grace_s, self.exit = grace_s, exit

    def _run(self) -> bool:
        """One poll of the ranks, as Lightning's, without its line "Child process ... terminated ... Forcefully
        terminating all other processes" (logged at once, while nothing is terminated during the grace): it came
        after the launching rank's own line, as the last line the user saw."""
        for proc in self._child_processes:
            proc.poll()
        codes = [proc.returncode for proc in self._child_processes]
        if all(code == 0 for code in codes):
            return True
        if any(codes):
            self._terminate_all()
            return True
        return False

    def _terminate_all(self) -> None:
        time.sleep(self.grace_s)
        lost = [(rank, proc.returncode) for rank, proc in enumerate(self._child_processes, start=self.rank + 1)
                if proc.returncode]
        named = ", ".join(f"rank {rank} (exit code {exit_code_name(code)})" for rank, code in lost)
        try:
            resume = self.where_to_resume()
        except Exception as err:  # noqa: BLE001 (the line must reach the user even if the checkpoint lookup fails)
            resume = f"(where to resume is unknown: {type(err).__name__})"
        stops = {STOPPED_BY.get(code) for _, code in lost}
        if len(stops) == 1 and None not in stops:  # a Ctrl-C or SIGTERM to every process, which the lost ranks heard
            signal_name = stops.pop()  # while this one waited on them inside a call that does not hear it
            line = (f"stopped by {said(signal_name)}: {named} ended on it while "
                    f"rank {self.rank} waited on {'it' if len(lost) == 1 else 'them'}, and rank {self.rank} stops too. "
                    f"{resume}")
            code = EXIT_SIGINT if signal_name == "SIGINT" else EXIT_SIGTERM
        else:
            line = (f"error: rank {self.rank} lost {named} of this {self.world_size}-rank run (it was killed or "
                    f"crashed; its own output says why), and stopped. {resume}")
            code = EXIT_USER_ERROR
        print(printable(line, one_line=True), file=sys.stderr, flush=True)
        for proc in self._child_processes:  # a rank blocked in a collective ignores SIGTERM
            if proc.poll() is None:
                proc.kill()
        self.exit(code)


# the exit codes of a rank that a Ctrl-C or SIGTERM stopped: the apps' own, or the signal's default action
STOPPED_BY = {EXIT_SIGINT: "SIGINT", -signal.SIGINT: "SIGINT", EXIT_SIGTERM: "SIGTERM", -signal.SIGTERM: "SIGTERM"}


def exit_code_name(code: int) -> str:
    return f"{code}, {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals() else str(code)


class GraceLauncher(SubprocessScriptLauncher):
    """Lightning's launcher of the other ranks (trainer=ddp, trainer=fsdp2 on one node), watched by LostRankObserver."""

    @classmethod
    def replacing(cls, launcher: SubprocessScriptLauncher, where_to_resume: Callable[[], str]) -> GraceLauncher:
        grace = cls(launcher.cluster_environment, launcher.num_processes, launcher.num_nodes)
        grace.where_to_resume = where_to_resume
        return grace

    def launch(self, function: Callable, *args: Any, trainer=None, **kwargs: Any) -> Any:
        # Lightning's launch, with LostRankObserver in place of its observer
        self.cluster_environment.validate_settings(num_devices=self.num_processes, num_nodes=self.num_nodes)
        if not self.cluster_environment.creates_processes_externally:
            self._call_children_scripts()
            rank = self.cluster_environment.node_rank() * self.num_processes  # the ranks started here follow it
            LostRankObserver(self.procs, rank, self.num_processes * self.num_nodes, self.where_to_resume).start()
        _set_num_threads_if_needed(num_processes=self.num_processes)
        return function(*args, **kwargs)
