"""A run whose standard output's reader goes away (`python train.py | head -1`) goes on to its end: Rich turned the
BrokenPipeError into exit code 1 without a word, before the first step, and the run left no result.json. A run whose
terminal closes (SIGHUP, then EIO on every write) stops as on SIGTERM, with its checkpoint: SIGHUP's default action
ended it where it stood."""

import errno
import fcntl
import io
import json
import os
import signal
import subprocess
import sys
import termios

import pytest

from lit_rlhf.output_streams import (
    HUNG_UP,
    STDOUT_GONE,
    OutputWhoseReaderMayGo,
    hung_up,
    outputs_survive_their_readers,
    take_hangup_for_sigterm,
)
from tests.apps import BASE_ENV
from tests.helpers import FAST, ROOT


def pipe_stream() -> tuple[int, io.TextIOWrapper]:
    """The read end's descriptor and a text stream on the write end, block-buffered as a pipe's stdout is."""
    read_fd, write_fd = os.pipe()
    return read_fd, io.TextIOWrapper(io.FileIO(write_fd, "w"), encoding="utf-8")


def test_writes_after_the_reader_has_gone_go_nowhere_and_it_is_said_once():
    read_fd, stream = pipe_stream()
    said = []
    output = OutputWhoseReaderMayGo(stream, lambda: said.append(True))
    output.write("first line\n")
    output.flush()
    assert os.read(read_fd, 100) == b"first line\n"  # while the reader is there, everything reaches it
    os.close(read_fd)
    output.write("x" * 100_000)  # past the buffer: the write itself meets the closed pipe
    output.writelines(["more\n", "lines\n"])
    output.flush()
    assert said == [True] and output.reader_gone
    assert os.path.samestat(os.fstat(output.fileno()), os.stat(os.devnull))  # where the interpreter's last flush goes
    stream.close()  # what was still buffered goes too, without an error


def test_a_flush_that_meets_the_closed_pipe_goes_on_alike():
    read_fd, stream = pipe_stream()
    said = []
    output = OutputWhoseReaderMayGo(stream, lambda: said.append(True))
    os.close(read_fd)
    output.write("a short line, still buffered\n")
    output.flush()
    output.flush()
    assert said == [True]
    stream.close()


class FailingWrites(io.RawIOBase):
    """A descriptor whose writes fail with `code` (EIO: a terminal after its hang-up; ENOSPC: a full disk) until it is
    redirected to os.devnull. Its descriptor is a pipe's, for the redirection."""

    def __init__(self, code: int):
        self.code = code
        self.read_fd, self.write_fd = os.pipe()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if os.path.samestat(os.fstat(self.write_fd), os.stat(os.devnull)):
            return len(data)
        raise OSError(self.code, os.strerror(self.code))

    def fileno(self) -> int:
        return self.write_fd

    def close(self) -> None:
        if not self.closed:
            os.close(self.read_fd)
            os.close(self.write_fd)
        super().close()


def test_a_terminal_that_hung_up_is_a_reader_gone_and_other_errors_still_raise():
    said = []
    output = OutputWhoseReaderMayGo(io.TextIOWrapper(FailingWrites(errno.EIO)), lambda: said.append(True))
    output.write("a line\n")
    output.flush()
    assert said == [True]

    full = OutputWhoseReaderMayGo(io.TextIOWrapper(FailingWrites(errno.ENOSPC)), lambda: said.append(True))
    full.write("a line\n")
    with pytest.raises(OSError, match=os.strerror(errno.ENOSPC)):  # not a reader that has gone: the error stands
        full.flush()
    assert said == [True]
    output.close()


def test_sighup_runs_what_sigterm_runs_unless_it_is_ignored():
    heard = []
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGHUP, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGTERM, lambda signum, frame: heard.append(signum))
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup's
        take_hangup_for_sigterm()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        take_hangup_for_sigterm()
        assert not hung_up()
        signal.raise_signal(signal.SIGHUP)
        assert heard == [signal.SIGTERM] and hung_up()  # the stop's line names the hang-up
    finally:
        take_hangup_for_sigterm()  # as the next app run in this process does: hung_up() starts false again
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_the_process_streams_are_wrapped_and_streams_another_program_put_in_place_are_not(monkeypatch):
    read_fd, stream = pipe_stream()
    monkeypatch.setattr(sys, "__stdout__", stream)
    monkeypatch.setattr(sys, "stdout", stream)
    captured = io.StringIO()  # a test's capture, a notebook's stream: no descriptor, not the process's own
    monkeypatch.setattr(sys, "stderr", captured)
    outputs_survive_their_readers()
    assert isinstance(sys.stdout, OutputWhoseReaderMayGo) and sys.stderr is captured
    wrapped = sys.stdout
    outputs_survive_their_readers()  # again in the task: not wrapped twice
    assert sys.stdout is wrapped
    os.close(read_fd)
    print("after the reader has gone", flush=True)
    assert captured.getvalue() == STDOUT_GONE + "\n"
    stream.close()


@pytest.mark.integration
def test_a_run_whose_stdout_reader_has_gone_trains_to_its_end(tmp_path):
    """`python train.py | head -1`: the reader goes after the first line (here before it: the same for the lines
    after). The run trains to its end, writes its result.json, exits 0, and stderr says so once, without a traceback."""
    env = {**os.environ, **BASE_ENV, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *FAST], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()
    stderr = process.stderr.read()
    assert process.wait(timeout=300) == 0, stderr[-3000:]
    assert stderr.count(STDOUT_GONE) == 1 and "Traceback" not in stderr, stderr[-3000:]
    (run_dir,) = (tmp_path / "logs" / "train" / "runs").iterdir()
    assert json.loads((run_dir / "result.json").read_text())["status"] == "ok"
    assert (run_dir / "checkpoints" / "last.ckpt").exists()


@pytest.mark.integration
def test_a_run_whose_terminal_closes_stops_as_on_sigterm_with_its_checkpoint(tmp_path):
    """An ssh session that drops: the kernel hangs up the run's terminal, SIGHUP reaches the run and its writes fail
    with EIO. It finishes the step in progress, writes interrupted.ckpt, and records itself as interrupted."""
    master, terminal = os.openpty()

    def terminal_of_its_own():  # the run's session has the terminal as its controlling one, as a login shell's does
        fcntl.ioctl(1, termios.TIOCSCTTY, 0)

    fast = [a for a in FAST if not a.startswith("steps=")]
    args = [*fast, "steps=6", "callbacks.progress_lines.every_n_steps=1",
            "callbacks.progress_lines.only_without_terminal=false"]
    env = {**os.environ, **BASE_ENV, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], cwd=tmp_path, env=env,
                               stdin=terminal, stdout=terminal, stderr=terminal, start_new_session=True,
                               preexec_fn=terminal_of_its_own)
    os.close(terminal)
    shown = b""
    while b"RL step 1/6" not in shown:
        shown += os.read(master, 4096)
    os.close(master)  # the hang-up
    assert process.wait(timeout=300) == 143
    (run_dir,) = (tmp_path / "logs" / "train" / "runs").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "interrupted", result
    assert result["error"].startswith(f"{HUNG_UP}stopped by SIGTERM after a complete RL step"), result
    assert (run_dir / "checkpoints" / "interrupted.ckpt").exists()
