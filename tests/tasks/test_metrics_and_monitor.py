"""Task metrics (exact match, pass@k, majority@k) against hand values and brute force; the reward-hacking
monitor fed synthetic metric streams; math-verify on hand-written cases."""

import itertools

import pytest
import torch

from lit_rlhf.callbacks import HackingSigns
from lit_rlhf.tasks.arithmetic import ArithmeticCorrect, ArithmeticFormat, extract_answer
from lit_rlhf.tasks.metrics import ExactMatch, pass_at_k, per_prompt_majority, per_prompt_pass_at_k


def test_arithmetic_rewards_and_answer_extraction_by_hand():
    completions = [" Answer: 82", " Answer: 81", " = 82", " Answer: 8 Answer: 82", " Answer: 082", " Answer: -3"]
    assert [extract_answer(c) for c in completions] == ["82", "81", None, "82", "082", "-3"]
    correct = ArithmeticCorrect()([""] * 6, completions, answer=["82", "82", "82", "82", "82", "-3"])
    assert correct.tolist() == [1, 0, 0, 1, 1, 1]
    assert ArithmeticFormat()([""] * 6, completions).tolist() == [1, 1, 0, 0, 1, 1]


def test_exact_match_needs_its_column():
    metric = ExactMatch()
    assert metric.correct([" Answer: 3", " Answer: 4"], answer=["3", 3]).tolist() == [1, 0]
    with pytest.raises(ValueError, match="needs the dataset column 'answer'"):
        metric.correct([" Answer: 3"], solution=["3"])


def brute_pass_at_k(correct: list[int], k: int) -> float:
    subsets = list(itertools.combinations(range(len(correct)), k))
    return sum(any(correct[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("correct", [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 1], [1, 1, 1, 1]])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_pass_at_k_is_the_chance_that_one_of_k_draws_is_correct(correct, k):
    assert pass_at_k(len(correct), sum(correct), k) == pytest.approx(brute_pass_at_k(correct, k))


def test_per_prompt_pass_at_k_and_majority_by_hand():
    prompt_index = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    answers = ["5", "5", "6", "7", "8", "8", None, None, "3"]
    correct = torch.tensor([1.0, 1, 0, 1, 0, 0, 0, 0, 0])
    assert per_prompt_pass_at_k(correct, prompt_index, 3).tolist() == [1, 1, 0]
    assert per_prompt_pass_at_k(correct, prompt_index, 1).tolist() == pytest.approx([2 / 3, 1 / 3, 0])
    # prompt 0: "5" wins and is right; prompt 1: "8" wins and is wrong; prompt 2: "3" (no answer never wins), wrong
    assert per_prompt_majority(answers, correct, prompt_index).tolist() == [1, 0, 0]


def steady(step):
    return {"objective/scores": 0.1 + 0.001 * step, "completions/mean_length": 12.0, "completions/clipped_ratio": 0.05,
            "completions/distinct_2": 0.6, "objective/kl": 2.0, "rollout/tool_error_rate": 0.1,
            "rollout/truncated_frac": 0.0}


def feed(signs, stream, steps):
    fired = set()
    for step in range(steps):
        fired |= {name for name, holds in signs.update(stream(step)).items() if holds}
    return fired


def test_a_steady_run_raises_no_sign():
    assert feed(HackingSigns(window=5), steady, 60) == set()


@pytest.mark.parametrize("key, value, sign", [
    ("completions/mean_length", 30.0, "length_jump"),
    ("completions/mean_length", 4.0, "length_jump"),
    ("completions/clipped_ratio", 0.6, "missing_stop_jump"),
    ("completions/distinct_2", 0.2, "distinct_collapse"),
    ("objective/kl", 14.0, "kl_over_budget"),
    ("rollout/tool_error_rate", 0.5, "tool_errors_jump"),
    ("rollout/truncated_frac", 0.5, "truncated_jump"),
])
def test_each_sign_fires_on_its_own_jump(key, value, sign):
    def stream(step):
        return {**steady(step), **({key: value} if step >= 30 else {})}

    signs = HackingSigns(window=5)
    assert feed(signs, stream, 30) == set()
    assert feed(signs, lambda s: stream(s + 30), 10) == {sign}


def test_the_kl_budget_judges_the_kl_of_recent_steps_not_one_noisy_step():
    """A healthy run's single-step KL estimates reach the budget now and then (the async calculator example: up to
    9.7 around a mean of 1.2); only a mean over the window above the budget is a sign."""
    signs = HackingSigns(window=5, kl_budget=10.0)
    spikes = [signs.update({**steady(s), "objective/kl": 14.0 if s % 5 == 4 else 1.0})["kl_over_budget"]
              for s in range(40)]
    assert not any(spikes)
    sustained = [signs.update({**steady(s), "objective/kl": 12.0})["kl_over_budget"] for s in range(40, 46)]
    # the window [1, 1, 1, 14, 12] -> means 5.8, 8.0, 10.2 (the third step of 12 carries it past the budget)
    assert sustained == [False, False, True, True, True, True]


def test_reward_up_while_the_task_metric_falls():
    signs = HackingSigns(window=5)
    for step, accuracy in zip(range(0, 60, 10), [0.30, 0.40, 0.45, 0.38, 0.30, 0.25], strict=True):
        for s in range(step, step + 10):
            signs.update({**steady(s), "objective/scores": 0.1 + 0.02 * s})  # the reward keeps rising
        signs.update_task_metrics({"eval/exact_match": accuracy})
        fired = signs.update(steady(step + 10))["reward_up_metric_down"]
        assert fired == (accuracy < 0.45 - 0.05 and step >= 30), (step, accuracy)


def test_no_sign_when_the_metric_falls_with_the_reward():
    signs = HackingSigns(window=5)
    for step, accuracy in zip(range(0, 40, 10), [0.4, 0.45, 0.3, 0.2], strict=True):
        for s in range(step, step + 10):
            signs.update({**steady(s), "objective/scores": 1.0 - 0.02 * s})  # the reward falls too
        signs.update_task_metrics({"eval/exact_match": accuracy})
    assert not signs.update(steady(40))["reward_up_metric_down"]


@pytest.mark.parametrize("completion, answer, expected", [
    ("so the total is \\boxed{72}", "Natalia sold 48/2 = 24 clips in May.\n#### 72", 1.0),
    ("She earns $10. #### 10", "#### 10", 1.0),
    ("The answer is \\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("The answer is \\boxed{71}", "#### 72", 0.0),
    ("I do not know.", "#### 72", 0.0),
])
def test_math_verify_reward_on_hand_written_cases(completion, answer, expected):
    from lit_rlhf.tasks.math import MathVerifyMatch, MathVerifyReward

    assert MathVerifyReward()([""], [completion], answer=[answer]).tolist() == [expected]
    assert MathVerifyMatch().correct([completion], answer=[answer]).tolist() == [expected]


def test_an_empty_answer_column_is_one_line_naming_its_key():
    """task_metrics.exact_match.answer_column= (an unset variable) was a ValueError traceback in the evaluation before
    training, after the models had loaded."""
    from lit_rlhf.errors import ConfigError
    from lit_rlhf.tasks.math import MathVerifyMatch, MathVerifyReward

    for make, key in ((ExactMatch, "task_metrics.exact_match"), (MathVerifyMatch, "task_metrics.math_verify"),
                      (MathVerifyReward, "reward.rewards.math_verify")):
        with pytest.raises(ConfigError) as err:
            make(answer_column="")
        assert str(err.value) == (f"{key}.answer_column='' must name the dataset column holding the reference answer "
                                  f"(e.g. {key}.answer_column=answer).")


def test_distinct_ratio_null_leaves_the_diversity_sign_unwatched_as_the_calculator_presets_set_it():
    def stream(step):
        return {**steady(step), **({"completions/distinct_2": 0.2} if step >= 30 else {})}

    signs = HackingSigns(window=5, distinct_ratio=None)
    assert feed(signs, stream, 40) == set()
    from tests.config.test_settings import compose_train

    for preset in ("calculator_grpo", "calculator_rloo"):
        cfg = compose_train(f"experiment={preset}")
        assert cfg.callbacks.reward_hacking_monitor.distinct_ratio is None
        assert cfg.callbacks.reward_hacking_monitor._target_ == "lit_rlhf.callbacks.RewardHackingMonitor"
