"""RewardJudge: wins, losses and ties of the policy against its reference by a reward."""

import pytest
import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.evaluation import RewardJudge


def test_reward_judge_wins_losses_and_ties():
    policy, reference = torch.tensor([1.0, 0.0, 0.5, 0.52]), torch.tensor([0.0, 1.0, 0.5, 0.5])
    assert RewardJudge()([""] * 4, [""] * 4, [""] * 4, policy, reference).tolist() == [1.0, 0.0, 0.5, 1.0]
    assert RewardJudge(tie_margin=0.05)([""] * 4, [""] * 4, [""] * 4, policy, reference).tolist() == [
        1.0, 0.0, 0.5, 0.5]


@pytest.mark.parametrize("margin", [-1, -0.01, float("inf"), float("nan"), "0.1", True])
def test_a_tie_margin_that_is_no_finite_number_at_least_0_is_one_line(margin):
    # a margin of -1 counted a loss by 0.5 as a win
    with pytest.raises(ConfigError, match=r"^judge.tie_margin=.* must be a finite number >= 0 \(0: only equal scores"):
        RewardJudge(tie_margin=margin)


def test_evaluate_py_refuses_a_bad_tie_margin_before_the_model_loads(monkeypatch, tmp_path):
    from hydra import compose, initialize_config_dir
    from hydra.errors import InstantiationException

    from lit_rlhf.cli import evaluate
    from lit_rlhf.cli.resolvers import register_resolvers
    from tests.apps import ROOT

    def refuse_loading(cfg):
        raise AssertionError("the model was loaded for an evaluation whose judge cannot be built")

    monkeypatch.setattr(evaluate, "load_module", refuse_loading)
    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("evaluate", overrides=[f"paths.root_dir={tmp_path}", f"paths.output_dir={tmp_path}",
                                             "judge.tie_margin=-1"])
    with pytest.raises(InstantiationException, match="judge.tie_margin=-1 must be"):  # the app prints its line
        evaluate.compare_as_configured(cfg)
