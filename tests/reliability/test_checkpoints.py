"""Checkpoint files: atomic under kill -9 with $TMPDIR on another filesystem, weights-only from files and
URLs (a pickled payload never runs), non-finite weights never written, unusable files refused in one line."""

import functools
import http.server
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from lit_rlhf.checkpoints.loading import SafeCheckpointIO
from lit_rlhf.errors import ConfigError
from tests.apps import run_app
from tests.helpers import FAST, ROOT, one_line_error


@pytest.mark.integration
def test_a_writer_killed_at_random_points_never_leaves_a_broken_checkpoint(tmp_path):
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else str(tmp_path / "other_tmp")
    other_tmp = os.path.join(shm, f"lit_rlhf_test_{os.getpid()}")
    os.makedirs(other_tmp, exist_ok=True)
    env = {**os.environ, "TMPDIR": other_tmp, "PYTHONPATH": str(ROOT)}
    target = tmp_path / "checkpoints" / "last.ckpt"
    rng = random.Random(0)
    # "safe": lit_rlhf's writer; "torch" (Lightning's own) fails this test
    forks = subprocess.Popen([sys.executable, str(ROOT / "tests" / "reliability" / "checkpoint_writer.py"),
                              str(target), "safe"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert forks.stdout.readline() == "ready\n"
    # what the harness made there itself, importing torch (torch 2.9 makes a temporary directory at import)
    harness_own = sorted(os.listdir(other_tmp))

    def ask(command: str) -> str:
        forks.stdin.write(command + "\n")
        forks.stdin.flush()
        return forks.stdout.readline().strip()

    try:
        for _ in range(8):
            writer = int(ask("fork"))
            while not target.exists():
                time.sleep(0.01)
            time.sleep(rng.uniform(0.05, 1.0))
            os.kill(writer, signal.SIGKILL)
            assert ask(f"wait {writer}") == "done"
            checkpoint = torch.load(target, weights_only=True)  # complete: every value is the step it was saved at
            assert (checkpoint["state_dict"]["w"] == checkpoint["step"]).all()
            assert sorted(os.listdir(other_tmp)) == harness_own  # no writer wrote to (or orphaned in) $TMPDIR
        forks.stdin.close()  # the harness ends normally, removing what it made
        assert forks.wait(timeout=60) == 0
    finally:
        forks.kill()
        forks.wait()
    assert os.listdir(other_tmp) == []
    SafeCheckpointIO().save_checkpoint({"state_dict": {"w": torch.zeros(2)}}, target)
    assert os.listdir(target.parent) == ["last.ckpt"]  # partial files of killed writers are cleaned up
    os.rmdir(other_tmp)


def test_non_finite_weights_are_never_written_and_the_previous_checkpoint_stays(tmp_path):
    target = tmp_path / "last.ckpt"
    io = SafeCheckpointIO()
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}}, target)
    with pytest.raises(ConfigError, match="1 trained tensors hold NaN or inf"):
        io.save_checkpoint({"state_dict": {"w": torch.tensor([1.0, float("nan"), 2.0])}}, target)
    assert torch.load(target, weights_only=True)["state_dict"]["w"].tolist() == [1.0, 1.0, 1.0]


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture
def evil_url(tmp_path):
    """A pickled os.system call in a .ckpt, served over loopback."""
    served = tmp_path / "served"
    served.mkdir()
    marker = tmp_path / "PWNED"
    torch.save({"state_dict": {}, "payload": Payload(marker)}, served / "evil.ckpt")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/evil.ckpt", marker
    server.shutdown()


@pytest.mark.integration
@pytest.mark.parametrize("command", ["train", "evaluate", "export"])
def test_a_pickled_payload_behind_a_url_is_refused_and_never_runs(command, evil_url, tmp_path):
    url, marker = evil_url
    env = {"TORCH_HOME": str(tmp_path / "torch_home")}
    if command == "export":
        result = run_app("lit_rlhf.export", url, str(tmp_path / "out"), cwd=tmp_path, env=env, module=True)
    else:
        result = run_app(f"{command}.py", f"ckpt_path={url}", *(FAST if command == "train" else []),
                         cwd=tmp_path, env=env)
    assert "was refused" in one_line_error(result) and "weights-only" in result.stderr
    assert not marker.exists()


def bad_checkpoints(tmp_path, good):
    data = good.read_bytes()
    files = {"empty": b"", "truncated": data[: len(data) // 2], "random": random.Random(0).randbytes(4096)}
    paths = {}
    for name, content in files.items():
        paths[name] = tmp_path / f"{name}.ckpt"
        paths[name].write_bytes(content)
    paths["not_lightning"] = tmp_path / "not_lightning.ckpt"
    torch.save({"weights": torch.ones(2)}, paths["not_lightning"])
    paths["missing"] = tmp_path / "no_such.ckpt"
    return paths


@pytest.mark.integration
def test_unusable_checkpoint_files_are_one_line_errors_in_train_evaluate_and_export(tmp_path):
    first = run_app("train.py", f"hydra.run.dir={tmp_path / 'run'}", *FAST, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    for name, path in bad_checkpoints(tmp_path, tmp_path / "run" / "checkpoints" / "last.ckpt").items():
        line = one_line_error(run_app("train.py", f"ckpt_path={path}", *FAST, cwd=tmp_path))
        assert line.startswith(f"error: ckpt_path='{path}'"), (name, line)
        if name in ("empty", "truncated"):
            line = one_line_error(run_app("evaluate.py", f"ckpt_path={path}", cwd=tmp_path))
            assert line.startswith(f"error: ckpt_path='{path}'"), (name, line)
            export = run_app("lit_rlhf.export", str(path), str(tmp_path / "x"), cwd=tmp_path, module=True)
            assert export.returncode != 0 and export.stderr.strip().startswith(f"error: ckpt_path='{path}'")
            assert "Traceback" not in export.stderr


def test_a_directory_that_is_no_checkpoint_is_refused_with_the_checkpoint_inside_it(tmp_path):
    """Trainer.fit(ckpt_path=...) reads through SafeCheckpointIO: a run directory, its checkpoints folder or any
    other directory is not taken for a sharded checkpoint (only one with meta.pt is)."""
    run = tmp_path / "run"
    last = run / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    torch.save({"state_dict": {}}, last)
    (tmp_path / "sharded.ckpt").mkdir()
    (tmp_path / "sharded.ckpt" / "meta.pt").write_bytes(b"")
    io = SafeCheckpointIO()
    for given in (run, run / "checkpoints"):
        with pytest.raises(ConfigError, match=f"^ckpt_path='{given}' is a directory that holds checkpoints, not one; "
                                              f"give one of them, e.g. ckpt_path={last}$"):
            io.load_checkpoint(given)
    with pytest.raises(ConfigError, match=f"^ckpt_path='{tmp_path}' is a directory without meta.pt, not a checkpoint"):
        io.load_checkpoint(tmp_path)
    with pytest.raises(ConfigError, match=r"is a sharded checkpoint \(trainer=fsdp2\)"):
        io.load_checkpoint(tmp_path / "sharded.ckpt")
    assert io.load_checkpoint(last) == {"state_dict": {}}


def test_a_full_disk_keeps_the_previous_checkpoint_and_is_one_line(tmp_path, monkeypatch):
    import errno

    from lit_rlhf.cli.errors import user_error

    target = tmp_path / "last.ckpt"
    io = SafeCheckpointIO()
    io.save_checkpoint({"state_dict": {"w": torch.ones(2)}}, target)

    def disk_full(obj, f):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError) as raised:
        io.save_checkpoint({"state_dict": {"w": torch.zeros(2)}}, target)
    monkeypatch.undo()
    assert torch.load(target, weights_only=True)["state_dict"]["w"].tolist() == [1.0, 1.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    assert user_error(raised.value).startswith(f"no space left writing {target}")
