"""A run whose standard output's reader goes away (`python train.py | head -1`) goes on to its end: Rich turned the
BrokenPipeError into exit code 1 without a word, before the first step, and the run left no result.json."""

import io
import json
import os
import subprocess
import sys

import pytest

from lit_rlhf.output_streams import STDOUT_GONE, OutputWhoseReaderMayGo, outputs_survive_their_readers
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
