"""Exact resume: an interrupted-and-resumed run logs what the uninterrupted run logs, to the last digit."""

import csv
import json

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.loggers import Logger

from lit_rlhf.envs import EnvSpec
from lit_rlhf.step import KLController, RewardNormalizer
from tests.conftest import LORA, TINY_PYTHIA, make_datamodule, make_ppo, make_rloo
from tests.envs.scripted import CountingEnvironment

pytestmark = pytest.mark.integration  # runs a Trainer or an app

STEPS = 7


@pytest.fixture
def small_prompts(tmp_path):
    """24 prompts: 8 held out, 16 for training = 4 global batches of 4 per data epoch."""
    path = tmp_path / "prompts.jsonl"
    words = ["The movie", "I think the plot", "Honestly, the cast", "The ending", "It is a", "The music was",
             "Sara Kim gives a", "The story follows", "Overall, the film", "Some scenes were", "The hero",
             "The script felt"]
    path.write_text("\n".join(json.dumps({"prompt": f"{w}"}) for w in words + [w + " really" for w in words]))
    return str(path)


class Record(L.Callback):
    def __init__(self):
        self.stats = {}

    def on_train_batch_end(self, trainer, module, *args):
        self.stats[module.rl_step] = {k: v for k, v in module.last_stats.items()  # wall-clock figures vary
                                      if k != "eps" and not k.startswith("time/")}


def make(algo):
    """With an adaptive KL controller and a reward normalizer: their state must resume too."""
    components = dict(kl_controller=KLController(kind="adaptive", target=0.5, horizon=100),
                      score_transforms=[RewardNormalizer()])
    if algo == "ppo":
        return make_ppo(num_ppo_epochs=2, response_length=12, **components)
    if algo == "rloo_episodes":  # multi-turn: an environment answers every turn that ends with the stop token
        return make_rloo(response_length=12, environment=EnvSpec(CountingEnvironment, max_turns=3, max_tokens=40),
                         **components)
    if algo == "rloo_dora":  # DoRA's trained magnitudes resume with its adapters
        return make_rloo(response_length=12, model={"name_or_path": TINY_PYTHIA, "lora": {**LORA, "use_dora": True}},
                         **components)
    return make_rloo(response_length=12, **components)


class LoggedSteps(Logger):
    """Where loggers put each RL step and held-out evaluation: (step, "train") or (step, "eval", its figures)."""

    name, version = "steps", 0

    def __init__(self):
        super().__init__()
        self.rows = []

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        held_out = {name: value for name, value in metrics.items() if name.startswith("eval/")}
        self.rows.append((step, "eval", held_out) if held_out else (step, "train"))


def fit(algo, prompts, rl_steps, callbacks, ckpt_path=None, accelerator="cpu", logger=False, eval_batches=1):
    """`eval_batches`: the held-out evaluation's batches (its 8 prompts in one, or in batches of 4)."""
    L.seed_everything(0)
    module = make(algo)
    updates = module.hparams.num_ppo_epochs * module.hparams.num_mini_batches
    trainer = L.Trainer(max_steps=rl_steps * updates, logger=logger, enable_progress_bar=False,
                        enable_model_summary=False, accelerator=accelerator, val_check_interval=3,
                        limit_val_batches=eval_batches, num_sanity_val_steps=1, log_every_n_steps=1,
                        callbacks=callbacks, enable_checkpointing=any(isinstance(c, Checkpoint) for c in callbacks))
    data = make_datamodule(dataset=prompts, num_eval_prompts=8, batch_size=4, eval_batch_size=8 // eval_batches)
    trainer.fit(module, data, ckpt_path=ckpt_path)
    return module


@pytest.mark.parametrize("algo", ["rloo", "ppo", "rloo_episodes", "rloo_dora"])
def test_resumed_run_matches_the_uninterrupted_run(algo, small_prompts, tmp_path):
    """Resumed from the run's checkpoints in the middle of a data epoch (RL step 2) and at its end (step 4: 16
    training prompts, batches of 4), each resumed run logs the uninterrupted run's steps after it."""
    updates = 2 if algo == "ppo" else 1
    full = Record()
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2 * updates, save_top_k=-1,
                                 filename="{step}")
    reference = fit(algo, small_prompts, STEPS, [full, checkpoint])
    assert sorted(full.stats) == list(range(1, STEPS + 1))
    for resume_at in (2, 4):
        record = Record()
        resumed = fit(algo, small_prompts, STEPS, [record],
                      ckpt_path=str(tmp_path / "ckpt" / f"step={resume_at * updates}.ckpt"))
        assert sorted(record.stats) == list(range(resume_at + 1, STEPS + 1))  # no step lost or repeated
        for step in record.stats:
            assert record.stats[step] == full.stats[step], f"resumed at {resume_at}, step {step}"
        for (name, a), (_, b) in zip(reference.state_dict().items(), resumed.state_dict().items(), strict=True):
            assert torch.equal(a, b), name
        assert resumed.episode == reference.episode == STEPS * 16
    if algo == "rloo_episodes":  # the episodes had turns after the first
        assert max(stats["rollout/turns_mean"] for stats in full.stats.values()) > 1
    if algo == "rloo_dora":  # the magnitudes trained, and the reference (adapters off) stayed the base model
        assert any("lora_magnitude_vector" in name for name, _ in reference.state_dict().items())
        assert full.stats[1]["objective/kl"] == 0.0


def test_checkpoints_hold_trained_tensors_only(small_prompts, tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, filename="{step}")
    module = fit("rloo", small_prompts, 2, [Record(), checkpoint])
    saved = torch.load(tmp_path / "step=2.ckpt", weights_only=True)  # loads without trusting pickles
    assert saved["state_dict"] and all("lora_" in k for k in saved["state_dict"])
    assert set(saved["state_dict"]) == module.trained_state_keys()
    assert {"rlhf_state", "optimizer_states", "callbacks", "loops"} <= set(saved)
    stored = sum(v.numel() for v in saved["state_dict"].values())
    assert stored < 0.2 * sum(p.numel() for p in module.parameters())


class SendSignal(L.Callback):
    def __init__(self, at_step, signum):
        self.at_step, self.signum = at_step, signum

    def on_train_batch_end(self, trainer, module, *args):
        if module.rl_step == self.at_step:
            import os

            os.kill(os.getpid(), self.signum)


@pytest.mark.parametrize("signame, at_step, eval_batches", [
    ("SIGINT", 3, 1), ("SIGINT", 2, 1), ("SIGTERM", 3, 1), ("SIGTERM", 2, 1), ("SIGTERM", 3, 2)],
    ids=["SIGINT", "SIGINT at a step due no evaluation", "SIGTERM", "SIGTERM at a step due no evaluation",
         "SIGTERM, the evaluation in two batches"])
def test_ctrl_c_and_sigterm_write_a_checkpoint_that_resumes_exactly(signame, at_step, eval_batches, small_prompts,
                                                                     tmp_path):
    import signal

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from lit_rlhf.callbacks import CheckpointOnInterrupt

    full, logged = Record(), LoggedSteps()
    fit("rloo", small_prompts, 5, [full], logger=logged, eval_batches=eval_batches)
    first, guard, logged_first = Record(), CheckpointOnInterrupt(dirpath=str(tmp_path)), LoggedSteps()
    callbacks = [SendSignal(at_step, getattr(signal, signame)), guard, first]  # step 3: a held-out evaluation is due
    if signame == "SIGTERM":
        with pytest.raises(SIGTERMException):
            fit("rloo", small_prompts, 5, callbacks, logger=logged_first, eval_batches=eval_batches)
    else:
        fit("rloo", small_prompts, 5, callbacks, logger=logged_first, eval_batches=eval_batches)
        assert signal.getsignal(signal.SIGINT) is not guard._on_sigint  # handler restored
    assert sorted(first.stats) == list(range(1, at_step + 1)) and guard.path == tmp_path / "interrupted.ckpt"
    second, logged_second = Record(), LoggedSteps()
    fit("rloo", small_prompts, 5, [second], ckpt_path=str(guard.path), logger=logged_second,
        eval_batches=eval_batches)
    assert {**first.stats, **second.stats} == full.stats
    # the resumed run logs at the uninterrupted run's steps, the evaluation due at the stop included: SIGTERM's
    # checkpoint (written after the step's evaluation) resumed one step further on, and one written in an evaluation
    # cut short at its next batch resumed past it, never logged; a Ctrl-C at a step due no evaluation ran one more
    assert logged_first.rows + logged_second.rows == logged.rows


class Epochs(L.Callback):
    def __init__(self):
        self.of_step = {}

    def on_train_batch_end(self, trainer, module, *args):
        self.of_step[module.rl_step] = trainer.current_epoch


def test_a_finished_runs_last_checkpoint_resumed_for_more_steps_goes_on_in_its_epoch(small_prompts, tmp_path):
    """A run that ended at its last step inside Lightning's epoch (the RL loader's one epoch runs for as many steps as
    the run asks): Lightning counts that epoch as done, and the run resumed for more steps (`ckpt_path=last
    steps=...`) logged the uninterrupted run's figures in the next epoch, one ahead for the rest of the run."""
    from lit_rlhf.callbacks import LastCheckpoint

    full, full_epochs, logged = Record(), Epochs(), LoggedSteps()
    fit("rloo", small_prompts, 5, [full, full_epochs], logger=logged)
    first, first_epochs, logged_first = Record(), Epochs(), LoggedSteps()
    last = LastCheckpoint(dirpath=str(tmp_path), save_last=True)  # the apps' last.ckpt, written at the run's end
    fit("rloo", small_prompts, 2, [first, first_epochs, last], logger=logged_first)
    second, second_epochs, logged_second = Record(), Epochs(), LoggedSteps()
    fit("rloo", small_prompts, 5, [second, second_epochs], ckpt_path=str(tmp_path / "last.ckpt"), logger=logged_second)
    assert {**first.stats, **second.stats} == full.stats
    assert {**first_epochs.of_step, **second_epochs.of_step} == full_epochs.of_step == dict.fromkeys(range(1, 6), 0)
    assert logged_first.rows + logged_second.rows == logged.rows  # at the uninterrupted run's steps


@pytest.mark.timeout(150)  # an async run that waited on a rollout nobody draws held here for ever
@pytest.mark.parametrize("mode", [[], ["algo.max_staleness=1"]], ids=["synchronous", "async"])
def test_resuming_a_finished_run_trains_nothing_and_exits(mode, tmp_path, caplog):
    """The resume command of a run that finished (or was stopped after its last step) ends at once: no extra RL
    step, no producer waiting for a rollout past the run's end."""
    from tests.apps import run_app
    from tests.helpers import FAST

    args = [*FAST, *mode, "hydra.run.dir=run"]
    assert run_app("train.py", *args, cwd=tmp_path).returncode == 0
    with caplog.at_level("INFO"):
        resumed = run_app("train.py", *args, "ckpt_path=last", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "The checkpoint is at RL step 1 of 1: nothing is left to train" in caplog.text
    with open(tmp_path / "run" / "csv" / "metrics.csv") as file:
        trained = [row for row in csv.DictReader(file) if row["time/step_s"]]
    assert len(trained) == 1  # the run's one RL step; the resume trained none (its end-of-run reports run again)


@pytest.mark.integration
def test_a_run_stopped_by_max_time_says_so_and_resumes_only_with_a_larger_one(tmp_path):
    """Lightning's max_time counts the time trained across resumes: the run says it stopped short, result.json records
    time_limit, a resume with the same max_time trains nothing, and one with a larger max_time goes on."""
    import json

    from tests.apps import run_app
    from tests.helpers import FAST

    def trained_steps():
        with open(tmp_path / "run" / "csv" / "metrics.csv") as file:
            return [row["step"] for row in csv.DictReader(file) if row["time/step_s"]]

    args = [*FAST[1:], "hydra.run.dir=run", "callbacks.model_checkpoint.every_n_train_steps=1"]
    stopped = run_app("train.py", *args, "steps=1000", "+trainer.max_time=00:00:00:01", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    done = len(trained_steps())
    line = stopped.stdout.strip().splitlines()[-1]
    assert line.startswith(f"The Trainer's max_time (0:00:01) stopped the run after RL step {done} of 1000;"), line
    assert "resume with a larger trainer.max_time: python " in line and "ckpt_path=" in line
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "time_limit"

    again = run_app("train.py", *args, "steps=1000", "+trainer.max_time=00:00:00:01", "ckpt_path=last", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"stopped the run after RL step {done} of 1000;" in again.stdout.strip().splitlines()[-1]
    assert len(trained_steps()) == done  # the time trained already spent the limit: no step

    longer = run_app("train.py", *args, f"steps={done + 1}", "+trainer.max_time=00:00:10:00", "ckpt_path=last",
                     cwd=tmp_path)
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert len(trained_steps()) == done + 1 and "The Trainer's max_time" not in longer.stdout
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "ok"


@pytest.mark.integration
def test_an_offline_fit_stopped_by_max_time_says_so_in_its_training_steps_and_records_time_limit(tmp_path):
    """train_sft.py (train_dpo.py and train_reward_model.py share its ending) stopped by max_time recorded status ok
    with Lightning's INFO line only, as though the fit were done; now its last line says where it stopped and how to
    train on, and result.json records time_limit. The model folder holds the weights it stopped with."""
    import json

    import torch

    from tests.apps import run_app

    stopped = run_app("train_sft.py", "hydra.run.dir=run", "epochs=50", "+trainer.max_time=00:00:00:01", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    done = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    line = stopped.stdout.strip().splitlines()[-1]
    assert line.startswith(f"The Trainer's max_time (0:00:01) stopped the run after training step {done} of "), line
    assert int(line.split(" of ", 1)[1].split(";")[0]) > done
    assert "resume with a larger trainer.max_time: python " in line and "ckpt_path=" in line
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "time_limit"
    assert (tmp_path / "run" / "policy" / "config.json").exists()


@pytest.mark.integration
def test_trls_save_total_limit_is_answered_with_keys_that_keep_the_newest_checkpoints(tmp_path):
    """`save_total_limit=2` (TRL's) names the keys that set it here; typed as the line gives them, the run keeps the
    checkpoints of its last two steps beside last.ckpt."""
    import re

    from tests.apps import run_app
    from tests.helpers import FAST, one_line_error

    hint = r"\(TRL's save_total_limit is (.*) \(the newest N\) here\)"
    keys = {re.search(hint, one_line_error(run_app("train.py", *FAST, typed, cwd=tmp_path))).group(1)
            for typed in ("save_total_limit=2", "+trainer.save_total_limit=2")}
    assert len(keys) == 1
    keys = keys.pop()
    every_step = "callbacks.model_checkpoint.every_n_train_steps=1"
    result = run_app("train.py", *FAST[1:], "steps=4", "hydra.run.dir=run", every_step,
                     *keys.replace("<N>", "2").split(), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["last.ckpt", "step3.ckpt",
                                                                                    "step4.ckpt"]
