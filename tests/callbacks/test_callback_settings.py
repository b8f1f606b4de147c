"""The callbacks' settings, checked as a callback is built (before the fit): a count that is no whole number, or a
confidence outside (0, 1), is one line naming the setting, not a ValueError from deep in a forward pass
(generation_samples.num_samples=0 divided a batch into steps of 0) or a traceback after training
(evaluation.confidence=2 in the end-of-run evaluation)."""

import pytest

from lit_rlhf.callbacks import (
    GenerationSamples,
    GoldCurve,
    Histograms,
    LastCheckpoint,
    PolicyEvaluation,
    RewardHackingMonitor,
    TrainingSummary,
)
from lit_rlhf.errors import ConfigError


@pytest.mark.parametrize("callback, settings, line", [
    (Histograms, {"every_n_steps": 0}, "callbacks.histograms.every_n_steps=0 must be a whole number >= 1."),
    (PolicyEvaluation, {"samples_per_prompt": 0}, "callbacks.evaluation.samples_per_prompt=0 must be a whole number "
                                                  ">= 1."),
    (PolicyEvaluation, {"num_bootstraps": 0}, "callbacks.evaluation.num_bootstraps=0 must be a whole number >= 1."),
    (PolicyEvaluation, {"num_bootstraps": 3, "confidence": 0.5},
     "callbacks.evaluation.num_bootstraps=3 is too few resamples for a 50% interval (its bounds are quantiles of the "
     "resampled means); give callbacks.evaluation.num_bootstraps >= 4 (default 1000)."),
    (PolicyEvaluation, {"confidence": 2}, "callbacks.evaluation.confidence=2 must be a number between 0 and 1 (e.g. "
                                          "0.95)."),
    (PolicyEvaluation, {"judge": "nope"}, "callbacks.evaluation.judge='nope' is not a judge; give its class and "
                                          "settings (callbacks.evaluation.judge._target_=<a PairwiseJudge class>), or "
                                          "null for the RewardJudge."),  # was a traceback after training
    (TrainingSummary, {"num_samples": -1}, "callbacks.training_summary.num_samples=-1 must be a whole number >= 0 "
                                           "(0: no table of completions)."),
    # a ZeroDivisionError traceback at the first RL step past the window, before any checkpoint
    (RewardHackingMonitor, {"length_ratio": 0}, "callbacks.reward_hacking_monitor.length_ratio=0 must be a number > 1 "
                                                "(a change of mean length by this factor, up or down, is a sign)."),
    (RewardHackingMonitor, {"score_rise": float("nan")}, "callbacks.reward_hacking_monitor.score_rise=nan must be a "
                                                         "number >= 0."),
    (RewardHackingMonitor, {"kl_budget": -1}, "callbacks.reward_hacking_monitor.kl_budget=-1 must be a number >= 0 "
                                              "or null (top-level kl_budget sets it)."),
    (RewardHackingMonitor, {"distinct_ratio": 0}, "callbacks.reward_hacking_monitor.distinct_ratio=0 must be a number "
                                                  "> 0 or null (a fall of distinct-2 below this share of its start is "
                                                  "a sign)."),
    (GoldCurve, {"window": 0}, "callbacks.gold_curve.window=0 must be a whole number >= 1 (RL steps in the moving "
                               "average)."),
    # ModelCheckpoint's TypeError traceback ("'<' not supported between instances of 'str' and 'int'")
    (LastCheckpoint, {"every_n_train_steps": "abc"}, "callbacks.model_checkpoint.every_n_train_steps='abc' must be a "
                                                     "whole number >= 0 (steps between checkpoints; 0: only at the "
                                                     "end)."),
    (LastCheckpoint, {"save_top_k": -2}, "callbacks.model_checkpoint.save_top_k=-2 must be a whole number >= -1 (-1: "
                                         "keep every one)."),  # Lightning's line named no key of this config
    (LastCheckpoint, {"filename": ""}, "callbacks.model_checkpoint.filename='' is empty (a shell variable that is not "
                                       "set?); name the checkpoint files (e.g. step{step}), or leave the setting out."),
])
def test_a_callback_setting_out_of_range_is_one_line(callback, settings, line):
    with pytest.raises(ConfigError) as err:
        callback(**settings)
    assert str(err.value) == line


@pytest.mark.parametrize("settings, line", [
    ({"num_samples": 0}, "callbacks.generation_samples.num_samples=0 must be a whole number >= 1."),
    ({"num_samples": 2.5}, "callbacks.generation_samples.num_samples=2.5 must be a whole number >= 1."),
    ({"num_sample_generations": -1}, "callbacks.generation_samples.num_sample_generations=-1 must be a whole number "
                                     ">= 0 (0: none during training)."),
    ({"every_n_steps": 0}, "callbacks.generation_samples.every_n_steps=0 must be a whole number >= 1 or null "
                           "(num_sample_generations decides)."),
])
def test_a_count_that_is_no_whole_number_is_one_line(settings, line):
    with pytest.raises(ConfigError) as err:
        GenerationSamples(**settings)
    assert str(err.value) == line


@pytest.mark.parametrize("callback, key", [
    ("GenerationSamples", "generation_samples.greedy"), ("GenerationSamples", "generation_samples.print_to_console"),
    ("BusyMachineCheck", "busy_machine.enabled"), ("RewardHackingMonitor", "reward_hacking_monitor.enabled"),
    ("ProgressLines", "progress_lines.only_without_terminal")])
def test_a_true_or_false_setting_that_is_no_bool_is_one_line(callback, key):
    """greedy="false" (a string from Python, or a typo on the command line) read as true."""
    import lit_rlhf.callbacks

    make, argument = getattr(lit_rlhf.callbacks, callback), key.split(".")[1]
    make(**{argument: False})
    with pytest.raises(ConfigError) as err:
        make(**{argument: "false"})
    assert str(err.value) == f"callbacks.{key}='false' must be true or false."


def test_the_counts_they_take():
    GenerationSamples(num_samples=1, num_sample_generations=0, every_n_steps=None)
    GenerationSamples(every_n_steps=5)
    TrainingSummary(num_samples=0)
    PolicyEvaluation(samples_per_prompt=1, num_bootstraps=4, confidence=0.5)  # 4: 2 / (1 - 0.5)
    PolicyEvaluation(judge=lambda prompts, policy, reference: [0.5] * len(prompts))
