"""Sharded checkpoint directories in one process: what is written reads back, a writer that dies leaves the previous
checkpoint whole, and nothing in a directory can run code."""

import os
import pickle

import pytest
import torch
import torch.distributed.checkpoint as dcp

from lit_rlhf.checkpoints import sharded
from lit_rlhf.errors import ConfigError


def write(path, value, **extra):
    checkpoint = {"state_dict": {"w": torch.full((3, 2), value)}, "hyper_parameters": {"lr": 0.1},
                  "optimizer_states": [{"state": {"w": {"exp_avg": torch.full((3, 2), value / 2)}},
                                        "param_groups": [{"lr": 0.1, "params": ["w"]}]}], **extra}
    sharded.save_sharded(checkpoint, path, rank=0, world_size=1, barrier=lambda: None, token="t0")


def forge(path, name, data: bytes):
    """An attacker's edit: the file replaced and meta.pt's digests recomputed to match (digests catch corruption;
    the readers below must refuse what a forged file holds)."""
    (path / name).write_bytes(data)
    meta = torch.load(path / "meta.pt", weights_only=True)
    meta["file_digests"] = sharded.file_digests(path)
    torch.save(meta, path / "meta.pt")


def test_a_written_directory_reads_back_whole(tmp_path):
    write(tmp_path / "step1.ckpt", 1.5)
    checkpoint = sharded.read_sharded_checkpoint(tmp_path / "step1.ckpt")
    assert torch.equal(checkpoint["state_dict"]["w"], torch.full((3, 2), 1.5))
    assert checkpoint["hyper_parameters"] == {"lr": 0.1} and checkpoint["world_size"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step1.ckpt"]  # no partial directory left


def test_a_writer_that_dies_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    target = tmp_path / "last.ckpt"
    write(target, 1.0)
    real_save = dcp.save

    def dies_half_way(state, storage_writer):
        real_save(state, storage_writer=storage_writer)  # the shards are written, meta.pt and the rename are not
        raise KeyboardInterrupt

    monkeypatch.setattr(sharded.dcp, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        write(target, 2.0)
    assert torch.equal(sharded.read_sharded_checkpoint(target)["state_dict"]["w"], torch.full((3, 2), 1.0))
    assert any(p.name.startswith(".last.ckpt.partial-") for p in tmp_path.iterdir())
    monkeypatch.setattr(sharded.dcp, "save", real_save)
    write(target, 3.0)  # the next checkpoint replaces it and clears what the dead writer left
    assert torch.equal(sharded.read_sharded_checkpoint(target)["state_dict"]["w"], torch.full((3, 2), 3.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_metadata_pickle_that_runs_code_is_refused(tmp_path):
    write(tmp_path / "bad.ckpt", 1.0)
    forge(tmp_path / "bad.ckpt", ".metadata", pickle.dumps(Payload(tmp_path / "PWNED")))
    with pytest.raises(ConfigError, match="unreadable .metadata"):
        sharded.read_sharded_checkpoint(tmp_path / "bad.ckpt")
    assert not (tmp_path / "PWNED").exists()


def test_an_object_item_is_refused(tmp_path):
    """DCP stores non-tensor values as pickles that its own planner loads unrestricted: refused here."""
    dcp.save({"state_dict": {"w": torch.ones(2), "x": Payload(tmp_path / "PWNED")}},
             storage_writer=dcp.FileSystemWriter(tmp_path / "obj.ckpt"))
    torch.save({"world_size": 1}, tmp_path / "obj.ckpt" / "meta.pt")
    state = {"state_dict": {"w": torch.zeros(2), "x": None}}
    with pytest.raises(ConfigError, match="refused the object item"):
        sharded.load_tensors(tmp_path / "obj.ckpt", state)
    assert not (tmp_path / "PWNED").exists()


def test_a_directory_without_meta_is_refused_in_one_line(tmp_path):
    (tmp_path / "plain_dir").mkdir()
    with pytest.raises(ConfigError, match="is a directory without meta.pt"):
        sharded.read_sharded_checkpoint(tmp_path / "plain_dir")


def test_a_metadata_pickle_calling_a_dcp_function_is_refused(tmp_path, monkeypatch):
    """A function of DCP's own package (dcp_to_torch_save would torch.load a file unrestricted) is never called."""
    from torch.distributed.checkpoint import format_utils

    calls = []

    def recorder(*args):
        calls.append(args)

    recorder.__module__, recorder.__qualname__ = format_utils.__name__, "dcp_to_torch_save"
    monkeypatch.setattr(format_utils, "dcp_to_torch_save", recorder)

    class CallsADcpFunction:
        def __reduce__(self):
            return recorder, ("nowhere", "nowhere.pt")

    write(tmp_path / "bad.ckpt", 1.0)
    forge(tmp_path / "bad.ckpt", ".metadata", pickle.dumps(CallsADcpFunction()))
    with pytest.raises(ConfigError, match="unreadable .metadata"):
        sharded.read_sharded_checkpoint(tmp_path / "bad.ckpt")
    assert calls == []


def test_flipped_bytes_in_a_shard_are_refused_by_its_digest(tmp_path):
    write(tmp_path / "step1.ckpt", 1.5)
    (shard,) = (tmp_path / "step1.ckpt").glob("*.distcp")
    data = bytearray(shard.read_bytes())
    for i in range(64):  # 64 bytes flipped, the file's size unchanged
        data[-1 - i] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=f"{shard.name} does not match the digest written with it"):
        sharded.read_sharded_checkpoint(tmp_path / "step1.ckpt")
    with pytest.raises(ConfigError, match="does not match the digest"):
        sharded.read_meta(tmp_path / "step1.ckpt")  # what a resume under trainer=fsdp2 reads first


def test_a_shard_replaced_by_a_symlink_is_refused(tmp_path):
    write(tmp_path / "step1.ckpt", 1.5)
    (shard,) = (tmp_path / "step1.ckpt").glob("*.distcp")
    outside = tmp_path / "elsewhere.distcp"
    outside.write_bytes(shard.read_bytes())
    shard.unlink()
    shard.symlink_to(outside)
    with pytest.raises(ConfigError, match=f"holds {shard.name!r}, which is a symlink"):
        sharded.read_sharded_checkpoint(tmp_path / "step1.ckpt")


class BadArguments:
    """A pickle that calls an allowed DCP constructor with arguments it does not take."""

    def __reduce__(self):
        from torch.distributed.checkpoint.metadata import Metadata

        return Metadata, (1, 2, 3, 4, 5, 6, 7)


def huge_metadata(tmp_path):
    """The written .metadata with its tensor declared as 2**50 elements."""
    with open(tmp_path / "big.ckpt" / ".metadata", "rb") as file:
        metadata = sharded.MetadataUnpickler(file).load()
    item = metadata.state_dict_metadata["state_dict.w"]
    item.size = torch.Size([2**25, 2**25])
    return pickle.dumps(metadata)


@pytest.mark.parametrize("crafted, expected", [
    (lambda tmp_path: pickle.dumps({"state_dict_metadata": {}}), "holds no DCP metadata"),
    (lambda tmp_path: pickle.dumps(BadArguments()), "refused a malformed .metadata"),
    (lambda tmp_path: b"\x80\x04", "refused a malformed .metadata"),
    (huge_metadata, "declares 4503599627370496 bytes of tensors and its shards hold"),
])
def test_crafted_dcp_metadata_is_one_line(crafted, expected, tmp_path):
    write(tmp_path / "big.ckpt", 1.0)
    forge(tmp_path / "big.ckpt", ".metadata", crafted(tmp_path))
    with pytest.raises(ConfigError, match=expected):
        sharded.read_sharded_checkpoint(tmp_path / "big.ckpt")


@pytest.mark.parametrize("module", ["pathlib", "pathlib._local"])  # Python up to 3.12; 3.13 and later
def test_a_path_in_dcp_metadata_reads_back_whichever_python_pickled_it(module):
    """DCP's metadata holds the checkpoint's path; each Python pickles it under its own module name, and a checkpoint
    written with one reads with another."""
    import io
    import pathlib

    path_pickle = f"c{module}\nPosixPath\n(V/runs/last.ckpt\ntR.".encode()  # protocol 0: PosixPath('/runs/last.ckpt')
    loaded = sharded.MetadataUnpickler(io.BytesIO(path_pickle)).load()
    assert loaded == pathlib.PurePosixPath("/runs/last.ckpt") and type(loaded) is pathlib.PosixPath
    other = f"c{module}\nPath\n(V/runs/last.ckpt\ntR.".encode()  # a path class outside the list: refused
    with pytest.raises(pickle.UnpicklingError, match=f"refused global {module}.Path"):
        sharded.MetadataUnpickler(io.BytesIO(other)).load()


def test_a_pickle_in_meta_pt_is_one_line_and_runs_nothing(tmp_path):
    write(tmp_path / "step1.ckpt", 1.0)
    (tmp_path / "step1.ckpt" / "meta.pt").write_bytes(pickle.dumps({"world_size": Payload(tmp_path / "PWNED")}))
    with pytest.raises(ConfigError, match="has a meta.pt that cannot be read as weights only"):
        sharded.read_sharded_checkpoint(tmp_path / "step1.ckpt")
    assert not (tmp_path / "PWNED").exists()
