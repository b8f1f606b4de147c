"""The gold reward: logged beside the proxy and never trained on, the RL form fitted to the gold gain against
sqrt(KL) (checked on points made by the form), and the monitor's warning when the proxy rises after the gold peaked."""

import json
import math
from types import SimpleNamespace

import lightning as L
import pytest
import torch

from lit_rlhf.algos.gold import fit_rl_form
from lit_rlhf.callbacks import GoldCurve, RewardHackingMonitor
from lit_rlhf.errors import ConfigError
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


def length_gold(prompts, completions):
    return torch.tensor([float(len(c)) for c in completions])


def test_the_gold_score_is_the_gold_rewards_mean_on_the_steps_completions(tmp_path):
    module = make_rloo(gold_reward=length_gold)
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
                        default_root_dir=tmp_path, callbacks=[Capture(), GoldCurve(window=2)])
    trainer.fit(module, make_datamodule())
    assert gold_logged == pytest.approx([sum(map(len, c)) / len(c) for c in completions])
    assert "eval/gold_score" in trainer.callback_metrics
    report = json.loads((tmp_path / "gold.json").read_text())
    assert [p["gold"] for p in report["points"]] == pytest.approx(gold_logged)


def test_a_gold_reward_that_is_the_trained_reward_is_refused():
    module_reward = length_gold
    with pytest.raises(ConfigError, match="the gold reward is the trained reward"):
        make_rloo(reward=module_reward, gold_reward=module_reward)


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


def test_training_with_a_gold_reward_trains_the_same_weights_as_without():
    def trained(**gold):
        L.seed_everything(0)
        module = make_rloo(**gold)
        L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, accelerator="cpu", limit_val_batches=0).fit(module, make_datamodule())
        return {k: v.clone() for k, v in module.state_dict().items() if "lora_" in k}

    without, with_gold = trained(), trained(gold_reward=length_gold)
    assert without.keys() == with_gold.keys()
    assert all(torch.equal(without[k], with_gold[k]) for k in without)
