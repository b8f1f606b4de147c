"""Non-finite values never reach the weights or a checkpoint: NaN scores are refused with the reward's
name, a non-finite loss or gradient skips the optimizer step (counted, logged), and too many in a row stop
the run with one error while the last checkpoint stays finite and loadable."""

import re

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_rlhf.errors import ConfigError
from lit_rlhf.rewards import VaderSentiment
from tests.apps import run_app
from tests.conftest import make_datamodule, make_rloo
from tests.helpers import one_line_error


def trainer_with_checkpoints(tmp_path, steps):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0, every_n_train_steps=1)
    return L.Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                     limit_val_batches=0, accelerator="cpu", callbacks=[checkpoint])


def trained_tensors(path):
    return torch.load(path, weights_only=True)["state_dict"]


class NaNFromFourthCall:
    def __init__(self):
        self.calls, self.vader = 0, VaderSentiment()

    def __call__(self, prompts, completions):
        self.calls += 1
        scores = self.vader(prompts, completions)
        if self.calls >= 4:
            scores[1] = float("nan")
        return scores


@pytest.mark.integration
def test_a_reward_that_returns_nan_is_refused_by_name_and_the_last_checkpoint_stays_good(tmp_path):
    L.seed_everything(0)
    module = make_rloo(reward=NaNFromFourthCall())
    with pytest.raises(ConfigError, match=r"the reward NaNFromFourthCall returned nan for 1 of 16 completions"):
        trainer_with_checkpoints(tmp_path, steps=10).fit(module, make_datamodule())
    assert module.rl_step == 3
    tensors = trained_tensors(tmp_path / "last.ckpt")
    assert tensors and all(torch.isfinite(t).all() for t in tensors.values())


def test_a_reward_that_returns_strings_is_refused_by_name():
    module = make_rloo(reward=lambda prompts, completions: ["good"] * len(completions))
    with pytest.raises(ConfigError, match=r"the reward <lambda> returned list that is not numbers"):
        module.sampler.score(["a"], ["b"])


@pytest.mark.integration
def test_non_finite_steps_are_skipped_then_stop_the_run_in_one_line_and_no_checkpoint_holds_nan(tmp_path):
    """NaN gradients from RL step 2 on (a test callback: algo.optimizer.lr=10 diverges to NaN only with some
    machines' kernels): skipped and counted, the third in a row stops the run in one line, and the checkpoints
    written (after RL step 1) are finite."""
    result = run_app("train.py", "steps=20", "callbacks.model_checkpoint.every_n_train_steps=1",
                     "+callbacks.nan_gradients._target_=tests.helpers.NonFiniteGradientsFrom",
                     "callbacks.evaluation=null", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    line = one_line_error(result)
    assert "3 optimizer steps in a row had a non-finite loss or gradient" in line
    assert re.findall(r"step skipped \((\d) in a row\)", result.stderr) == ["1", "2", "3"]
    tensors = trained_tensors(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert tensors and all(torch.isfinite(t).all() for t in tensors.values())
    rows = (tmp_path / "run" / "csv" / "metrics.csv").read_text()
    assert "policy/skipped_updates" in rows.splitlines()[0]


@pytest.mark.integration
def test_one_non_finite_loss_skips_its_step_leaves_the_weights_alone_and_is_counted(monkeypatch):
    L.seed_everything(0)
    module = make_rloo()
    losses = module.minibatch_loss
    before = {}

    def nan_on_second_step(rollout, advantages, idx, share):
        loss, stats = losses(rollout, advantages, idx, share)
        if module.rl_step == 1:
            before.update({n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad})
            return loss * float("nan"), stats
        return loss, stats

    monkeypatch.setattr(module, "minibatch_loss", nan_on_second_step)
    seen = {}

    class Watch(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, *args):
            seen[pl_module.rl_step] = dict(pl_module.last_stats)
            if pl_module.rl_step == 2:
                for name, param in pl_module.named_parameters():
                    if param.requires_grad:
                        assert torch.equal(param, before[name]), name  # the skipped step changed nothing

    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", callbacks=[Watch()])
    trainer.fit(module, make_datamodule())
    assert [seen[s]["policy/skipped_updates"] for s in (1, 2, 3)] == [0.0, 1.0, 1.0]
    assert module.rl_step == 3 and trainer.global_step == 3 and module.nonfinite.consecutive_skipped == 0


@pytest.mark.integration
def test_a_run_whose_every_update_was_skipped_says_so_at_its_end(tmp_path):
    """Two RL steps, both skipped (fewer than algo.max_consecutive_nonfinite): the run ends, and says the weights did
    not change."""
    result = run_app("train.py", "steps=2", "+callbacks.nan_gradients._target_=tests.helpers.NonFiniteGradientsFrom",
                     "+callbacks.nan_gradients.rl_step=0", "callbacks.evaluation=null", "hydra.run.dir=run",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "every optimizer step of this run was skipped (2: non-finite loss or gradient), so the weights did not " \
           "change" in result.stderr


@pytest.mark.integration
def test_an_absurd_task_reward_coefficient_is_refused_in_one_line(tmp_path):
    line = one_line_error(run_app("train.py", "algo=distill", "teacher.name_or_path=tiny", "algo.task_reward_coef=1e30",
                                  cwd=tmp_path))
    assert "algo.task_reward_coef=1e+30 must be <= 1000: the task reward's advantage is unit-scale" in line


@pytest.mark.integration
def test_a_teacher_with_non_finite_logits_is_named_when_the_run_stops(tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from tests.helpers import ROOT

    teacher = tmp_path / "teacher"
    shutil.copytree(ROOT / "lit_rlhf" / "assets" / "tiny-pythia", teacher)
    weights = load_file(teacher / "model.safetensors")
    weights = {name: t.fill_(float("nan")) if name.startswith("embed_out") else t for name, t in weights.items()}
    save_file(weights, teacher / "model.safetensors")
    line = one_line_error(run_app("train.py", "algo=distill", "teacher.name_or_path=teacher", "steps=5",
                                  "callbacks.evaluation=null", "hydra.run.dir=run", cwd=tmp_path))
    assert line.startswith("error: stopped at RL step 2: the teacher's logprobs of the sampled tokens are not finite "
                           "(nan or inf)"), line
    assert "3 optimizer steps in a row were skipped" in line
