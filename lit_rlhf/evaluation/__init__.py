"""Evaluation: the trained policy against its reference (scores, CI, KL, length, diversity, win rate)."""

from lit_rlhf.evaluation.compare import Evaluation, compare_with_reference
from lit_rlhf.evaluation.judges import PairwiseJudge, RewardJudge
from lit_rlhf.evaluation.report import print_report, write_report

__all__ = ["Evaluation", "PairwiseJudge", "RewardJudge", "compare_with_reference", "print_report", "write_report"]
