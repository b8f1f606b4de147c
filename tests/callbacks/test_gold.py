"""The gold reward (callbacks.GoldReward): logged beside the proxy and never trained on, the RL form fitted to the
gold gain against sqrt(KL) (checked on points made by the form), and the monitor's warning when the proxy rises after
the gold peaked."""

import json
import math
from types import SimpleNamespace

import lightning as L
import pytest
import torch

from lit_rlhf.callbacks import GoldCurve, GoldReward, RewardHackingMonitor
from lit_rlhf.errors import ConfigError
from lit_rlhf.statistics.gold import fit_rl_form
from tests.conftest import make_datamodule, make_rloo


def test_the_rl_form_fit_recovers_alpha_beta_and_the_peak_of_points_it_made():
    alpha, beta = 1.5, 0.8
    d = [0.1 * i for i in range(1, 40)]
    gain = [x * (alpha - beta * math.log(x)) for x in d]
    fit = fit_rl_form(d, gain)
    assert fit["alpha"] == pytest.approx(alpha) and fit["beta"] == pytest.approx(beta)
    peak = math.exp(alpha / beta - 1)  # d/dd [d (a - b log d)] = a - b (log d + 1) = 0
    assert fit["peak_sqrt_kl"] == pytest.approx(peak) and fit["peak_kl"] == pytest.approx(peak ** 2)
    assert fit_rl_form([0.0, 0.1], [0.0, 0.1]) is None  # too few points with d > 0


def test_a_tiny_positive_beta_fits_without_overflow_and_reports_the_peak_beyond_range():
    alpha, beta = 1.0, 1e-6  # the peak d* = e^(alpha/beta - 1) = e^999999: math.exp overflows
    d = [0.1 * i for i in range(1, 40)]
    fit = fit_rl_form(d, [x * (alpha - beta * math.log(x)) for x in d])
    assert fit["beta"] == pytest.approx(beta, rel=1e-3) and fit["peak_beyond_range"] is True
    assert "peak_kl" not in fit and json.dumps(fit, allow_nan=False)


def length_gold(prompts, completions):
    return torch.tensor([float(len(c)) for c in completions])


@pytest.mark.integration
def test_the_gold_score_is_the_gold_rewards_mean_on_the_steps_completions(tmp_path):
    module = make_rloo()
    completions, gold_logged = [], []

    class Capture(L.Callback):
        def on_train_batch_end(self, trainer, module, *args):
            gold_logged.append(module.last_stats["gold/score"])

    finish = module.finish_rollout

    def capturing(drawn, for_training):
        rollout = finish(drawn, for_training)
        if for_training:
            completions.append(rollout.completions)
        return rollout

    module.finish_rollout = capturing
    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", val_check_interval=3,
                        default_root_dir=tmp_path, callbacks=[GoldReward(length_gold), Capture(), GoldCurve(window=2)])
    trainer.fit(module, make_datamodule())
    assert gold_logged == pytest.approx([sum(map(len, c)) / len(c) for c in completions])
    assert "eval/gold_score" in trainer.callback_metrics
    report = json.loads((tmp_path / "gold.json").read_text())
    assert [p["gold"] for p in report["points"]] == pytest.approx(gold_logged)


@pytest.mark.integration
def test_a_gold_reward_that_is_the_trained_reward_is_refused():
    module = make_rloo(reward=length_gold)
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", callbacks=[GoldReward(length_gold)])
    with pytest.raises(ConfigError, match="the gold reward is the trained reward"):
        trainer.fit(module, make_datamodule())


def test_the_deprecated_module_argument_still_scores_the_gold_reward_and_says_what_replaces_it():
    with pytest.warns(FutureWarning, match=r"gold_reward=\.\.\.\) .* is deprecated .*GoldReward\(reward\)"):
        module = make_rloo(gold_reward=length_gold)
    assert module.sampler.gold is length_gold
    with pytest.raises(ConfigError, match="the gold reward is the trained reward"), pytest.warns(FutureWarning):
        make_rloo(reward=length_gold, gold_reward=length_gold)


def test_the_monitor_warns_when_the_proxy_rises_after_the_gold_peaked():
    monitor = RewardHackingMonitor(window=3, kl_budget=None)
    gold = [0.0, 0.2, 0.4, 0.6, 0.6, 0.5, 0.3, 0.1, 0.0, -0.1]  # peaks, then falls
    proxy = [0.1 * i for i in range(10)]  # keeps rising
    module = SimpleNamespace(rl_step=0, last_stats={}, log_dict=lambda *a, **k: None)
    with pytest.warns(UserWarning, match=r"the training score rose while gold/score fell from its best"):
        for step, (g, p) in enumerate(zip(gold, proxy, strict=True)):
            module.rl_step, module.last_stats = step + 1, {"gold/score": g, "objective/scores": p}
            monitor.on_train_batch_end(None, module)
    assert 6 <= monitor.warned["reward_up_metric_down"] <= 10


@pytest.mark.integration
def test_training_with_a_gold_reward_trains_the_same_weights_as_without():
    def trained(*gold):
        L.seed_everything(0)
        module = make_rloo()
        L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, accelerator="cpu", limit_val_batches=0,
                  callbacks=list(gold)).fit(module, make_datamodule())
        return {k: v.clone() for k, v in module.state_dict().items() if "lora_" in k}

    without, with_gold = trained(), trained(GoldReward(length_gold))
    assert without.keys() == with_gold.keys()
    assert all(torch.equal(without[k], with_gold[k]) for k in without)


def fit_with_gold(tmp_path, steps, callbacks, module=None, **fit):
    trainer = L.Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", val_check_interval=steps, default_root_dir=tmp_path,
                        callbacks=[GoldReward(length_gold), *callbacks])
    trainer.fit(module or make_rloo(), make_datamodule(), **fit)
    return trainer


@pytest.mark.integration
def test_the_gold_curve_survives_a_resume_and_starts_at_the_initial_policys_score(tmp_path):
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "checkpoints", save_last=True)
    fit_with_gold(tmp_path / "first", 2, [GoldCurve(window=2), checkpoint])
    first = json.loads((tmp_path / "first" / "gold.json").read_text())["points"]
    resumed = GoldCurve(window=2)
    fit_with_gold(tmp_path / "resumed", 3, [resumed], ckpt_path=str(tmp_path / "checkpoints" / "last.ckpt"))
    points = json.loads((tmp_path / "resumed" / "gold.json").read_text())["points"]
    assert [p["rl_step"] for p in points] == [1, 2, 3] and points[:2] == first


@pytest.mark.integration
def test_a_run_without_a_kl_says_why_it_writes_no_gold_curve(tmp_path, caplog):
    with caplog.at_level("INFO"):
        fit_with_gold(tmp_path, 2, [GoldCurve()], module=make_rloo(kl_coef=0.0))
    assert not (tmp_path / "gold.json").exists()
    assert "No gold.json: the run logged gold/score but no objective/kl" in caplog.text
