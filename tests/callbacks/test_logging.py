import glob
import json
import os
import struct
import time

import lightning as L
import pytest
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

from lit_rlhf.callbacks import CurvesPlot, GenerationSamples, Histograms, TrainingSummary
from tests.apps import run_app
from tests.conftest import make_datamodule, make_rloo

pytestmark = pytest.mark.integration  # runs a Trainer or an app

HISTOGRAMS = {"env/reward_dist", "objective/kl_dist", "objective/logprobs", "objective/ref_logprobs",
              "policy/advantages", "policy/ratio", "tokens/responses_len_dist"}


def wandb_history(run_dir):
    """History rows of an offline W&B run, read from its .wandb file (a LevelDB-style log of protobufs)."""
    from wandb.proto import wandb_internal_pb2

    data = open(glob.glob(f"{run_dir}/wandb/offline-run-*/run-*.wandb")[0], "rb").read()
    assert data[:4] == b":W&B"
    pos, pending, rows, block = 7, b"", [], 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            pos += left - 7 - length
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            if record.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
            pending = b""
    return rows


def test_tensorboard_and_offline_wandb_receive_scalars_histograms_and_samples(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    L.seed_everything(0)
    loggers = [CSVLogger(tmp_path, name="csv", version=""), TensorBoardLogger(tmp_path, name="tb", version=""),
               WandbLogger(project="lit_rlhf_test", save_dir=str(tmp_path), offline=True)]
    samples = GenerationSamples(num_samples=3, every_n_steps=2, print_to_console=False)
    trainer = L.Trainer(max_steps=3, logger=loggers, enable_checkpointing=False, enable_progress_bar=False,
                        limit_val_batches=0, accelerator="cpu", default_root_dir=tmp_path, log_every_n_steps=1,
                        callbacks=[samples, Histograms(every_n_steps=1), CurvesPlot()])
    module = make_rloo()
    trainer.fit(module, make_datamodule())
    import wandb

    wandb.finish()
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"histograms": 0, "tensors": 0}).Reload()
    tb_scores = [e.value for e in events.Scalars("objective/scores")]
    assert len(tb_scores) == 3
    assert HISTOGRAMS <= set(events.Tags()["histograms"])
    assert "samples/text_summary" in events.Tags()["tensors"]
    # wandb's service process may still be writing the offline file after wandb.finish() returns on a loaded machine
    # (one full-suite run read 2 of the 3 rows): read it again until the rows are there, for at most 30 s
    deadline = time.monotonic() + 30
    while True:
        history = wandb_history(tmp_path)
        wb_scores = [row["objective/scores"] for row in history if "objective/scores" in row]
        if len(wb_scores) >= len(tb_scores) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert wb_scores == pytest.approx(tb_scores)
    assert {"env/reward_dist", "policy/ratio"} <= {k.split("/_type")[0] for row in history for k in row}
    assert any(k.startswith("samples/") for row in history for k in row)
    assert (tmp_path / "csv" / "curves.png").read_bytes()[:4] == b"\x89PNG"  # the first logger's folder


@pytest.mark.parametrize("generations, stages", [(2, [("start", 0), ("train", 2), ("end", 4)]),
                                                 (0, [("start", 0), ("end", 4)])])  # 0: none during, as in TRL
def test_samples_jsonl_has_start_during_and_end_tables(tmp_path, generations, stages):
    L.seed_everything(0)
    samples = GenerationSamples(num_samples=3, num_sample_generations=generations, greedy=True,
                                print_to_console=False)
    trainer = L.Trainer(max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        limit_val_batches=0, accelerator="cpu", default_root_dir=tmp_path, callbacks=[samples])
    trainer.fit(make_rloo(), make_datamodule())
    rows = [json.loads(line) for line in open(tmp_path / "samples.jsonl")]
    assert [(r["stage"], r["step"]) for r in rows[::6]] == stages
    assert {r["mode"] for r in rows} == {"sample", "greedy"}
    assert set(rows[0]) == {"step", "stage", "mode", "query", "response", "score", "kl"}
    assert all(r["kl"] == 0 for r in rows if r["stage"] == "start")  # the policy is the reference then


def test_sampling_callbacks_do_not_change_the_training_run(tmp_path):
    def scores(callbacks):
        L.seed_everything(0)
        module, seen = make_rloo(), []

        class Record(L.Callback):
            def on_train_batch_end(self, trainer, module, *args):
                seen.append(module.last_stats["objective/scores"])

        trainer = L.Trainer(max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            limit_val_batches=0, accelerator="cpu", callbacks=[*callbacks, Record()],
                            default_root_dir=tmp_path)
        trainer.fit(module, make_datamodule())
        return seen

    plain = scores([])
    assert scores([TrainingSummary(), GenerationSamples(every_n_steps=1, print_to_console=False)]) == plain


def test_plot_command_draws_a_png_from_a_run_directory(tmp_path):

    (tmp_path / "csv").mkdir()
    rows = ["episode,objective/scores,objective/kl,val/ratio,eval/scores"]
    rows += [f"{32 * i},{0.1 * i},{0.5 * i},1.0," for i in range(1, 6)] + [",,,,0.7"]
    (tmp_path / "csv" / "metrics.csv").write_text("\n".join(rows) + "\n")
    result = run_app("lit_rlhf.plot", str(tmp_path), cwd=tmp_path, module=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert result.stdout.strip() == str(tmp_path / "curves.png")
    (tmp_path / "csv" / "version_1").mkdir()  # a newer one under it: a folder of runs, or a CSVLogger's versions
    newest = tmp_path / "csv" / "version_1" / "metrics.csv"
    newest.write_text("\n".join(rows) + "\n")
    os.utime(newest, (time.time() + 10, time.time() + 10))  # newer whatever the file system's clock resolution
    several = run_app("lit_rlhf.plot", str(tmp_path), cwd=tmp_path, module=True)
    assert several.stdout.strip() == (f"{tmp_path / 'curves.png'} (from {newest}, the newest of 2 metrics.csv under "
                                      f"{tmp_path}; give one run's directory for another)")
    missing = run_app("lit_rlhf.plot", str(tmp_path / "nope"), cwd=tmp_path, module=True)
    assert missing.returncode == 2 and missing.stderr.strip() == (f"error: {tmp_path / 'nope'} does not exist; give a "
                                                                  f"run directory (the `Run directory:` a run prints).")
    (tmp_path / "tensorboard_only").mkdir()
    no_csv = run_app("lit_rlhf.plot", str(tmp_path / "tensorboard_only"), cwd=tmp_path, module=True)
    assert no_csv.returncode == 2 and no_csv.stderr.strip().startswith("error: no metrics.csv under")
    the_file = run_app("lit_rlhf.plot", str(tmp_path / "csv" / "metrics.csv"), cwd=tmp_path, module=True)
    assert the_file.returncode == 2 and the_file.stderr.strip() == (
        f"error: {tmp_path / 'csv' / 'metrics.csv'} is a file; give the run directory that holds it: python -m "
        f"lit_rlhf.plot {tmp_path}")
