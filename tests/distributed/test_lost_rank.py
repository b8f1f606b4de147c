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


def test_the_launching_rank_is_given_time_then_stopped_with_the_lost_rank_line_and_where_to_resume(capsys, caplog):
    """Rank 2 of a 3-rank run dies (SIGKILL) while the launching rank is busy between collectives: after the grace
    the observer says which rank was lost and where to resume, stops the ranks still running (rank 1 here) and
    exits with the user-error code, instead of Lightning's silent SIGKILL within 5 s. Lightning's own line ("...
    Forcefully terminating all other processes"), logged at once, came after the launching rank's line."""
    import logging
    import subprocess
    import time

    from lit_rlhf.distributed.grace_launcher import LostRankObserver
    from lit_rlhf.errors import EXIT_USER_ERROR

    alive, dead = subprocess.Popen(["sleep", "60"]), subprocess.Popen(["sh", "-c", "kill -9 $$"])
    dead.wait()
    exits = []
    observer = LostRankObserver([alive, dead], rank=0, world_size=3, where_to_resume=lambda: "resume with: X",
                                grace_s=0.3, sleep_period=0.01, exit=exits.append)
    started = time.monotonic()
    with caplog.at_level(logging.INFO):
        observer.run()
    assert time.monotonic() - started >= 0.3  # the grace was given
    assert not [record for record in caplog.records if "Child process" in record.getMessage()]
    assert exits == [EXIT_USER_ERROR]
    assert alive.wait(timeout=5) == -9
    assert capsys.readouterr().err == ("error: rank 0 lost rank 2 (exit code -9, SIGKILL) of this 3-rank run (it was "
                                       "killed or crashed; its own output says why), and stopped. resume with: X\n")


def test_the_ddp_launcher_is_replaced_and_a_one_process_run_left_alone():
    from lightning.pytorch import Trainer

    from lit_rlhf.distributed.grace_launcher import GraceLauncher
    from lit_rlhf.distributed.lost_rank import report_lost_ranks

    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    report_lost_ranks(trainer, lambda: "")
    assert isinstance(trainer.strategy.launcher, GraceLauncher) and trainer.strategy.launcher.num_processes == 2
    single = Trainer(accelerator="cpu", devices=1, logger=False)
    report_lost_ranks(single, lambda: "")
    assert single.strategy.launcher is None


def test_a_lightning_without_the_launcher_internals_keeps_its_own_launcher_and_says_so_once(monkeypatch):
    """The observer subclasses a class private to Lightning: a Lightning release without it leaves train.py importable
    and Lightning's own launcher in place, with a warning, instead of an ImportError for every run."""
    import importlib
    import sys

    import lightning.fabric.strategies.launchers.subprocess_script as fabric_launchers
    import pytest
    from lightning.pytorch import Trainer

    import lit_rlhf.distributed.lost_rank

    monkeypatch.delattr(fabric_launchers, "_ChildProcessObserver")
    monkeypatch.delitem(sys.modules, "lit_rlhf.distributed.grace_launcher", raising=False)
    lost_rank = importlib.reload(lit_rlhf.distributed.lost_rank)  # as a fresh `import` of it under that Lightning
    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    launcher = trainer.strategy.launcher
    with pytest.warns(UserWarning, match=r"a lost rank will not be named: .*_ChildProcessObserver.*the run itself is "
                                         r"unaffected"):
        lost_rank.report_lost_ranks(trainer, lambda: "")
    assert trainer.strategy.launcher is launcher


def test_ranks_that_a_ctrl_c_or_sigterm_to_every_process_ended_are_said_as_that_stop(capsys):
    """Ctrl-C in the terminal while the ranks start: the other rank ends on it (exit 130, or -2 by SIGINT's default
    action) while the launching rank waits on it in the process group's set-up, where it cannot hear it. That was
    "lost rank 1 ... killed or crashed", exit 2; it is the Ctrl-C's stop, exit 130 (SIGTERM's: 143)."""
    import subprocess

    from lit_rlhf.distributed.grace_launcher import LostRankObserver
    from lit_rlhf.errors import EXIT_SIGINT, EXIT_SIGTERM, EXIT_USER_ERROR

    def observed(*commands: str) -> tuple[list[int], str]:
        ranks = [subprocess.Popen(["sh", "-c", command]) for command in commands]
        for rank in ranks:
            rank.wait()
        exits = []
        LostRankObserver(ranks, rank=0, world_size=len(ranks) + 1, where_to_resume=lambda: "Stopped before RL step 1.",
                         grace_s=0.0, sleep_period=0.01, exit=exits.append).run()
        return exits, capsys.readouterr().err

    assert observed("exit 130") == ([EXIT_SIGINT], "stopped by Ctrl-C: rank 1 (exit code 130) ended on it while rank "
                                                   "0 waited on it, and rank 0 stops too. Stopped before RL step 1.\n")
    exits, line = observed("kill -INT $$", "exit 130")
    assert exits == [EXIT_SIGINT] and line.startswith("stopped by Ctrl-C: rank 1 (exit code -2, SIGINT), rank 2 (exit "
                                                       "code 130) ended on it while rank 0 waited on them")
    assert observed("exit 143")[0] == [EXIT_SIGTERM]
    exits, line = observed("exit 130", "exit 143")  # not one stop: the lost-rank line
    assert exits == [EXIT_USER_ERROR] and line.startswith("error: rank 0 lost rank 1 (exit code 130), rank 2")
