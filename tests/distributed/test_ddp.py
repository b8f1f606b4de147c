"""Two CPU processes with DDP (gloo), launched by train.py as a user would: rank zero runs in the test's process
(run_app), and Lightning's launcher starts rank one as a process of its own, `python train.py ...`. (DDP's replicas
staying identical in synchronous mode: tests/distributed/test_fsdp2_train.py, beside the FSDP2 run it compares.)"""

import json

import pytest
import torch

from tests.apps import ROOT, run_app, run_process

pytestmark = [pytest.mark.multi_rank, pytest.mark.integration]  # each test starts 2 ranks


def run_train(tmp_path, *overrides):
    return run_app("train.py", f"hydra.run.dir={tmp_path}", "steps=3", "algo.response_length=12", "data.batch_size=8",
                   "callbacks.generation_samples=null", "callbacks.training_summary=null",
                   "+callbacks.dump._target_=tests.helpers.DumpTrainable", f"+callbacks.dump.path={tmp_path}/dump",
                   *overrides, cwd=ROOT)


def test_ddp_in_async_mode_each_rank_draws_its_own_half_ahead_and_ranks_stay_identical(tmp_path):
    """algo.max_staleness=1 under DDP: each rank's producer reads its own share of every global batch ahead and
    samples with its own copy; the update's collectives stay in the trainer's thread, so the ranks stay equal."""
    result = run_train(tmp_path, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                       "algo.max_staleness=1", "algo.async_draws=2", "algo.optimizer.lr=0.01")
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [torch.load(tmp_path / "dump" / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    for key, tensor in ranks[0]["trained"].items():
        assert torch.equal(tensor, ranks[1]["trained"][key]), key
    assert ranks[0]["episode"] == ranks[1]["episode"] == 3 * 8 * 4
    assert ranks[0]["num_tokens"] == ranks[1]["num_tokens"] > 3 * 8 * 4 * 2  # both ranks' tokens, on each
    seen = []
    for step in range(3):
        zero, one = ranks[0]["prompts"][step], ranks[1]["prompts"][step]
        assert len(zero) == len(one) == 4 and not set(zero) & set(one)
        seen += [*zero, *one]
    assert len(seen) == len(set(seen))  # no prompt trained twice across steps and ranks
    header, *rows = [line.split(",") for line in (tmp_path / "csv" / "metrics.csv").read_text().splitlines()]
    staleness = [row[header.index("async/staleness")] for row in rows if row[header.index("async/staleness")]]
    assert [float(s) for s in staleness] == [0.0, 1.0, 1.0]


@pytest.mark.parametrize("whom", ["group", "rank one"])
def test_sigterm_to_every_rank_or_to_one_stops_both_after_the_same_step_with_a_checkpoint(whom, tmp_path):
    """A SIGTERM to the run's process group during step 2 (each rank signalled, rank one twice: Lightning's launcher
    forwards it), or to rank one alone during the evaluation due after step 2: both ranks stop there with
    interrupted.ckpt at step 2, exit 143, and the stop is said once. Lightning's own handler broadcasts inside the
    signal handler, so either hung here until killed. The held-out samples due at step 2 are skipped when the signal
    came during the step (the checkpoint comes first), drawn when it came after them."""
    stop = ["+callbacks.stop._target_=tests.helpers.SigtermRanksAt", "+callbacks.stop.step=2",
            f"+callbacks.stop.whom={whom}"]
    result = run_process("train.py", f"hydra.run.dir={tmp_path}", "steps=4", "algo.response_length=12",
                         "data.batch_size=8", "callbacks.generation_samples.every_n_steps=2",
                         "callbacks.generation_samples.num_samples=2", "trainer.val_check_interval=2",
                         "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", *stop, cwd=ROOT, timeout=180,
                         new_session=True)
    assert result.returncode == 143, result.stderr[-4000:]
    assert result.stderr.count("stopped by SIGTERM after a complete RL step") == 1, result.stderr[-4000:]
    checkpoint = tmp_path / "checkpoints" / "interrupted.ckpt"
    assert torch.load(checkpoint, weights_only=True)["global_step"] == 2
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "interrupted"
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [row["stage"] for row in samples] == ["start"] * 2 + ["train"] * 2 * (whom == "rank one")


ABANDONED = {  # reward, the held-out samples' and evaluations' settings, the last line's start, the step
    # interrupted.ckpt holds (None: no checkpoint)
    "rank one's reward in RL step 2": (
        "reward_that_rank_one_abandons", ["callbacks.generation_samples=null", "trainer.val_check_interval=4"],
        "stopped by SIGTERM while waiting on the reward reward_that_rank_one_abandons on rank 1, which did not "
        "return: the call was abandoned", 1),
    "rank one's reward in the held-out evaluation after RL step 2": (
        "reward_that_rank_one_abandons_in_validation",
        ["callbacks.generation_samples=null", "trainer.val_check_interval=2"],
        "stopped by SIGTERM while waiting on the reward reward_that_rank_one_abandons_in_validation on rank 1, which "
        "did not return: the call was abandoned", 2),
    "rank one's reward of the samples before training": (
        "reward_that_rank_one_abandons_before_training",
        ["callbacks.generation_samples=null", "trainer.val_check_interval=4"],
        "stopped by SIGTERM before the first RL step began (while waiting on the reward "
        "reward_that_rank_one_abandons_before_training on rank 1, which was abandoned): nothing was trained", None),
    "rank zero's reward of the samples after RL step 2": (
        "reward_that_rank_zero_abandons_in_the_samples",
        ["callbacks.generation_samples.every_n_steps=2", "callbacks.generation_samples.num_samples=2",
         "trainer.val_check_interval=4"],
        "stopped by SIGTERM after a complete RL step", 2),
}


@pytest.mark.parametrize("case", ABANDONED)
def test_sigterm_while_one_rank_waits_on_a_reward_and_the_other_went_on_stops_both_with_a_checkpoint(case, tmp_path):
    """A reward that never returns on one rank while the run's process group gets SIGTERM and the other rank, its own
    reward done, has gone on. In RL step 2 rank one abandons its call, and rank zero, waiting at the call's end to
    hear whether a rank abandoned one, stops with it: interrupted.ckpt holds step 1 (step 2 runs again). In the
    held-out evaluation after step 2 they stop alike, with step 2's checkpoint. In the held-out samples, which rank
    zero draws alone after step 2, rank zero leaves the samples out and both ranks stop after the step, as for any
    SIGTERM during it. In the training summary's samples, which every rank draws before training, both stop at the
    call's end without a checkpoint (nothing was trained). Before, each run hung until killed: one rank saved the
    checkpoint (or, before training, waited on its call with the SIGTERM unheard) while the other waited in another
    collective."""
    reward, settings, line_start, step = ABANDONED[case]
    result = run_process("train.py", f"hydra.run.dir={tmp_path}", "steps=4", "algo.response_length=12",
                         "data.batch_size=8", *settings, f"reward._target_=tests.helpers.{reward}", "trainer=ddp",
                         "trainer.accelerator=cpu", "trainer.devices=2", cwd=ROOT, timeout=150, new_session=True)
    assert result.returncode == 143, result.stderr[-4000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(line_start), line
    assert "Traceback" not in result.stderr
    interrupted = tmp_path / "checkpoints" / "interrupted.ckpt"
    if step is None:
        assert not interrupted.exists()
    else:
        assert torch.load(interrupted, weights_only=True)["global_step"] == step
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "interrupted"


def test_ddp_spawn_trains_in_spawned_ranks_and_exports_their_final_checkpoint(tmp_path):
    """trainer=ddp_spawn, the launcher for sweeps: the ranks are spawned processes, and the app's end of run works
    from what they hand back (the weights, the metrics) and from their final checkpoint. export_dir exports that
    checkpoint, with the RL steps it holds in the model card (it crashed on this process's module, which never
    built its models)."""
    result = run_app("train.py", f"hydra.run.dir={tmp_path}", "steps=2", "algo.response_length=8", "data.batch_size=8",
                     "callbacks.generation_samples=null", "trainer=ddp_spawn", "trainer.accelerator=cpu",
                     "trainer.devices=2", f"export_dir={tmp_path}/policy", cwd=ROOT)
    assert result.returncode == 0, result.stderr[-4000:]
    card = (tmp_path / "policy" / "README.md").read_text()
    assert "RLOOModule for 2 RL steps (64 episodes)" in card and "on the reward vader" in card
    from safetensors.torch import load_file

    exported = load_file(tmp_path / "policy" / "model.safetensors")
    base = load_file(ROOT / "lit_rlhf" / "assets" / "tiny-pythia" / "model.safetensors")
    assert any(not torch.equal(exported[name], base[name]) for name in base)  # the ranks' training is in it


def test_a_preference_app_under_ddp_spawn_saves_the_policy_its_spawned_ranks_trained(tmp_path):
    """train_dpo.py (as train_kto.py, train_sft.py and train_reward_model.py end: the same end of run) cut by
    max_steps in its epoch: the saved policy holds the ranks' training, and nothing of the end of run asks this
    process for the Trainer's state that stayed in them (the step count: it ended in an AssertionError)."""
    result = run_app("train_dpo.py", f"hydra.run.dir={tmp_path}", "trainer=ddp_spawn", "trainer.accelerator=cpu",
                     "trainer.devices=2", "trainer.max_steps=2", cwd=ROOT)
    assert result.returncode == 0, result.stderr[-4000:]
    from safetensors.torch import load_file

    saved = load_file(tmp_path / "policy" / "model.safetensors")
    base = load_file(ROOT / "lit_rlhf" / "assets" / "tiny-pythia" / "model.safetensors")
    assert any(not torch.equal(saved[name], base[name]) for name in base)
