"""RewardJudge: wins, losses and ties of the policy against its reference by a reward."""

import torch

from lit_rlhf.evaluation import RewardJudge


def test_reward_judge_wins_losses_and_ties():
    policy, reference = torch.tensor([1.0, 0.0, 0.5, 0.52]), torch.tensor([0.0, 1.0, 0.5, 0.5])
    assert RewardJudge()([""] * 4, [""] * 4, [""] * 4, policy, reference).tolist() == [1.0, 0.0, 0.5, 1.0]
    assert RewardJudge(tie_margin=0.05)([""] * 4, [""] * 4, [""] * 4, policy, reference).tolist() == [
        1.0, 0.0, 0.5, 0.5]
