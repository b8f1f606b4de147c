"""Checkpoints, model folders, datasets and URLs are untrusted: none of them may run code or reach the
terminal as control sequences or markup, and a download never hangs or returns another URL's file."""

import http.server
import json
import shutil
import socket
import threading

import pytest
import torch

from lit_rlhf.terminal import printable
from tests.apps import run_app
from tests.helpers import FAST, ROOT, one_line_error

EVIL_MODULE = """import pathlib
pathlib.Path({marker!r}).write_text("ran")
from transformers import GPTNeoXConfig as EvilConfig, GPTNeoXForCausalLM as EvilModel
from transformers import PreTrainedTokenizerFast as EvilTokenizer
"""


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("trained")
    result = run_app("train.py", "hydra.run.dir=run", *FAST, cwd=directory)
    assert result.returncode == 0, result.stderr[-3000:]
    return directory / "run"


def remote_code_model(directory, marker):
    """The tiny model, whose config and tokenizer config ask for a Python file of the folder."""
    model = directory / "evil_model"
    shutil.copytree(ROOT / "lit_rlhf" / "assets" / "tiny-pythia", model)
    (model / "evil.py").write_text(EVIL_MODULE.format(marker=str(marker)))
    for name, auto_map in (("config.json", {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}),
                           ("tokenizer_config.json", {"AutoTokenizer": [None, "evil.EvilTokenizer"]})):
        config = json.loads((model / name).read_text())
        config["auto_map"] = auto_map
        if name == "config.json":
            config["model_type"] = "evil_arch"  # no class of transformers' own: only the folder's code loads it
        (model / name).write_text(json.dumps(config))
    return model


@pytest.mark.integration
@pytest.mark.parametrize("command", ["evaluate", "export"])
def test_a_checkpoint_cannot_enable_remote_code(command, trained_run, tmp_path):
    marker = tmp_path / "PWNED"
    checkpoint = torch.load(trained_run / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["model"].update(name_or_path=str(remote_code_model(tmp_path, marker)),
                                                   trust_remote_code=True)
    torch.save(checkpoint, tmp_path / "crafted.ckpt")
    if command == "export":
        result = run_app("lit_rlhf.export", "crafted.ckpt", "out", cwd=tmp_path, module=True)
        flag = "--trust-remote-code"
    else:
        result = run_app("evaluate.py", "ckpt_path=crafted.ckpt", cwd=tmp_path)
        flag = "trust_remote_code=true"
    line = one_line_error(result)
    assert "needs to run its own Python code" in line and flag in line, line
    assert "a checkpoint cannot enable remote code" in result.stderr
    assert not marker.exists()


@pytest.mark.integration
def test_a_checkpoint_with_settings_lit_rlhf_never_writes_is_one_line(trained_run, tmp_path):
    checkpoint = torch.load(trained_run / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["reward"] = {"_target_": "os.system"}
    torch.save(checkpoint, tmp_path / "crafted.ckpt")
    line = one_line_error(run_app("evaluate.py", "ckpt_path=crafted.ckpt", cwd=tmp_path))
    assert "holds a 'reward' setting, which lit_rlhf never writes" in line


HOSTILE_PROMPT = "The movie \x1b]0;retitled\x07 was \x1b[2J [/] [bold]loud[/bold] :smile: \u202eeno"


@pytest.mark.integration
def test_prompts_with_escape_sequences_and_markup_print_as_escaped_text(tmp_path):
    rows = [{"prompt": HOSTILE_PROMPT if i % 2 == 0 else f"The film number {i} was"} for i in range(24)]
    (tmp_path / "hostile.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = [a for a in FAST if not a.startswith("callbacks.training_summary")]
    result = run_app("train.py", *args, "data=files", "data.dataset=hostile.jsonl",
                     "callbacks.training_summary.num_samples=4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "\x1b" not in result.stdout + result.stderr and "\u202e" not in result.stdout
    assert "\\x1b[2J" in result.stdout and "[/]" in result.stdout and "\\u202e" in result.stdout


def test_printable_escapes_control_characters_and_keeps_text():
    assert printable("a\x1b[2Jb\x07\u202ec\x9b") == "a\\x1b[2Jb\\x07\\u202ec\\x9b"
    assert printable("two\nlines\tand [/] :smile: é") == "two\nlines\tand [/] :smile: é"
    assert printable("two\nlines", one_line=True) == "two\\x0alines"


@pytest.fixture
def silent_server():
    """A TCP server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/last.ckpt"
    server.close()


@pytest.mark.integration
def test_a_checkpoint_url_whose_server_never_answers_is_one_line_after_the_timeout(silent_server, tmp_path):
    result = run_app("evaluate.py", f"ckpt_path={silent_server}", cwd=tmp_path,
                     env={"LIT_RLHF_DOWNLOAD_TIMEOUT_S": "2"})
    assert "the server sent nothing for 2 s" in one_line_error(result)


def test_a_checkpoint_on_an_fsspec_filesystem_round_trips_and_one_that_pickles_a_callable_there_is_refused():
    """ckpt_path and the checkpoint directory may be any fsspec URL (s3://, gs://; memory:// here): written by
    Lightning's fsspec writer, read back weights-only like a local file."""
    import os
    import uuid

    import fsspec

    from lit_rlhf.checkpoints.loading import SafeCheckpointIO
    from lit_rlhf.errors import ConfigError

    base, checkpoint_io = f"memory://{uuid.uuid4().hex}", SafeCheckpointIO()
    try:
        checkpoint_io.save_checkpoint({"state_dict": {"w": torch.arange(3.0)}, "rlhf_state": {"episode": 7}},
                                      f"{base}/checkpoints/last.ckpt")
        loaded = checkpoint_io.load_checkpoint(f"{base}/checkpoints/last.ckpt")
        assert torch.equal(loaded["state_dict"]["w"], torch.arange(3.0)) and loaded["rlhf_state"] == {"episode": 7}
        with fsspec.open(f"{base}/evil.ckpt", "wb") as file:
            torch.save({"state_dict": {}, "hook": os.system}, file)
        with pytest.raises(ConfigError, match=r"evil.ckpt' was refused: it references \S*system"):
            checkpoint_io.load_checkpoint(f"{base}/evil.ckpt")
    finally:
        fsspec.filesystem("memory").rm(base, recursive=True)


@pytest.mark.parametrize("text", ["clip_ratio/high_mean,clip_ratio/low_mean,step\n0.0,0.0,0\n",  # a metrics.csv
                                  "cat dog\nfish\n"])  # pickle's GLOBAL: "cat dog", "fish"
def test_a_text_file_as_checkpoint_is_not_a_checkpoint_not_one_that_references_code(text, tmp_path):
    """A text file starting with "c" reads as a pickle asking for its first line as a callable: the line said "was
    refused: it references lip_ratio/high_mean,clip_ratio/low_mean,...", as though it held code."""
    from lit_rlhf.checkpoints.loading import load_checkpoint_file
    from lit_rlhf.errors import ConfigError

    (tmp_path / "metrics.csv").write_text(text)
    with pytest.raises(ConfigError, match=r"metrics.csv' cannot be read \(not a PyTorch checkpoint\); give a .ckpt"):
        load_checkpoint_file(tmp_path / "metrics.csv")


@pytest.mark.integration
def test_two_urls_with_the_same_file_name_load_their_own_checkpoints(trained_run, tmp_path):
    from lit_rlhf.checkpoints.loading import load_checkpoint_file

    checkpoint = torch.load(trained_run / "checkpoints" / "last.ckpt", weights_only=True)
    for sub, episode in (("a", 1), ("b", 2)):
        (tmp_path / sub).mkdir()
        torch.save({**checkpoint, "rlhf_state": {**checkpoint["rlhf_state"], "episode": episode}},
                   tmp_path / sub / "last.ckpt")
    handler = lambda *args: http.server.SimpleHTTPRequestHandler(*args, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        episodes = [load_checkpoint_file(f"{base}/{sub}/last.ckpt")["rlhf_state"]["episode"] for sub in ("a", "b")]
    finally:
        server.shutdown()
    assert episodes == [1, 2]


@pytest.mark.integration
@pytest.mark.parametrize("damage, expected", [
    (lambda c: c.update(state_dict=list(c["state_dict"].values())), "has a malformed state_dict"),
    (lambda c: c.update(state_dict={"w": "not a tensor"}), "has a malformed state_dict (values that are not tensors)"),
    (lambda c: c.update(hyper_parameters=["model"]), "has a malformed hyper_parameters"),
    (lambda c: c["rlhf_state"]["rng"].update(torch=torch.zeros(3)), "random states (rlhf_state.rng) are malformed"),
    (lambda c: c["rlhf_state"].update(draw_seed="7"), "rlhf_state.draw_seed is str, not a whole number"),
])
def test_malformed_checkpoint_contents_are_one_line_on_resume(damage, expected, trained_run, tmp_path):
    checkpoint = torch.load(trained_run / "checkpoints" / "last.ckpt", weights_only=True)
    damage(checkpoint)
    torch.save(checkpoint, tmp_path / "damaged.ckpt")
    result = run_app("train.py", "ckpt_path=damaged.ckpt", *FAST[1:], "steps=2", cwd=tmp_path)
    assert expected in one_line_error(result)


@pytest.fixture(scope="module")
def distilled_run(tmp_path_factory):
    """A one-step distillation run whose teacher folder is gone afterwards: nothing after training may read it."""
    directory = tmp_path_factory.mktemp("distilled")
    shutil.copytree(ROOT / "lit_rlhf" / "assets" / "tiny-pythia", directory / "teacher")
    result = run_app("train.py", "hydra.run.dir=run", "algo=distill", "teacher.name_or_path=teacher", *FAST,
                     cwd=directory)
    assert result.returncode == 0, result.stderr[-3000:]
    shutil.rmtree(directory / "teacher")
    return directory / "run"


@pytest.mark.integration
def test_evaluating_and_exporting_a_distilled_policy_need_no_teacher(distilled_run, tmp_path):
    evaluated = run_app("evaluate.py", f"ckpt_path={distilled_run / 'checkpoints' / 'last.ckpt'}",
                        "samples_per_prompt=1", cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    exported = run_app("lit_rlhf.export", str(distilled_run / "checkpoints" / "last.ckpt"), "out", cwd=tmp_path,
                       module=True)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert (tmp_path / "out" / "config.json").exists()


@pytest.mark.integration
@pytest.mark.parametrize("teacher", [
    {"_target_": "lit_rlhf.teachers.ServedTeacher", "url": "http://127.0.0.1:{port}"},
    {"_target_": "os.system", "command": "touch {marker}"},
    {"_target_": "lit_rlhf.teachers.CausalLMTeacher", "name_or_path": "{evil}", "trust_remote_code": True},
], ids=["served", "os.system", "own-code folder"])
@pytest.mark.parametrize("command", ["evaluate", "export"])
def test_a_teacher_in_a_checkpoints_settings_is_refused_in_one_line_and_never_reached(command, teacher,
                                                                                     distilled_run, tmp_path):
    marker = tmp_path / "PWNED"
    with socket.socket() as listener:  # a teacher address that records a connection, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.5)
        evil = remote_code_model(tmp_path, marker)
        filled = {key: value.format(port=listener.getsockname()[1], marker=marker, evil=evil)
                  if isinstance(value, str) else value for key, value in teacher.items()}
        checkpoint = torch.load(distilled_run / "checkpoints" / "last.ckpt", weights_only=True)
        checkpoint["hyper_parameters"]["teacher"] = filled
        torch.save(checkpoint, tmp_path / "crafted.ckpt")
        if command == "export":
            result = run_app("lit_rlhf.export", "crafted.ckpt", "out", cwd=tmp_path, module=True)
        else:
            result = run_app("evaluate.py", "ckpt_path=crafted.ckpt", cwd=tmp_path)
        with pytest.raises(TimeoutError):
            listener.accept()  # nobody connected
    assert "holds a 'teacher' setting, which lit_rlhf never writes" in one_line_error(result)
    assert not marker.exists()
