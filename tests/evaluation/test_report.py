"""The evaluation's printed report."""

import io
from types import SimpleNamespace

from rich.console import Console

from lit_rlhf.evaluation.report import print_report


def summary() -> dict:
    side = {"score_mean": 0.5, "score_std": 0.25, "length_mean": 12.0, "eos_rate": 1.0, "distinct_1": 0.3,
            "distinct_2": 0.6, "kl_mean": 1.5}
    difference = {"mean": 0.25, "ci_low": 0.125, "ci_high": 0.375, "confidence": 0.95}
    win_rate = {"mean": 0.625, "ci_low": 0.5, "ci_high": 0.75, "confidence": 0.95}
    return {"num_prompts": 16, "samples_per_prompt": 4, "seed": 0, "policy": side, "reference": {**side, "kl_mean": 0},
            "score_difference": difference, "win_rate": win_rate, "judge": "RewardJudge", "kl_estimator": "k1"}


def test_the_report_prints_its_title_on_one_line_and_its_figures():
    out = io.StringIO()
    print_report(SimpleNamespace(summary=summary()), Console(file=out, width=120, color_system=None))
    lines = out.getvalue().splitlines()
    assert lines[0].strip() == "Policy vs reference: 16 prompts x 4 samples, seed 0"
    assert "score difference (policy - reference): +0.250  95% CI [+0.125, +0.375]" in lines
    assert "win rate of the policy (RewardJudge, ties count 1/2): 62.5%  95% CI [50.0%, 75.0%]" in lines
    assert ["KL to reference", "1.500", "0"] in [[cell.strip() for cell in line.split("│")[1:4]] for line in lines]
