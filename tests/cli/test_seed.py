"""check_seed: every app's seed is refused in one line outside numpy's range, which Lightning's seed_everything
seeds (unchecked, seed_everything's ValueError reaches the user as a traceback)."""

import pytest
from omegaconf import OmegaConf

from lit_rlhf.cli.checks import check_fitting_on_a_file, check_run_settings, check_seed
from lit_rlhf.cli.evaluation_checks import check_evaluation
from lit_rlhf.errors import ConfigError


@pytest.mark.parametrize("seed", [-1, 2**32, "abc", True, 1.5])
def test_a_seed_outside_numpy_s_range_is_one_line(seed):
    with pytest.raises(ConfigError, match=rf"^seed={seed!r} must be a whole number from 0 to 4294967295\.$"):
        check_seed(OmegaConf.create({"seed": seed}))


@pytest.mark.parametrize("seed", [0, 2**32 - 1])
def test_the_ends_of_the_range_pass(seed):
    check_seed(OmegaConf.create({"seed": seed}))


@pytest.mark.parametrize("check", [check_run_settings, check_fitting_on_a_file, check_evaluation])
def test_every_app_checks_its_seed_before_its_model_and_data(check):
    """The config below has neither a model nor data: the seed is refused before they are looked at."""
    cfg = OmegaConf.create({"seed": -1, "epochs": 1, "task_name": "train_sft",
                            "reward": {"_target_": "lit_rlhf.rewards.VaderSentiment"}})
    with pytest.raises(ConfigError, match=r"^seed=-1 must be a whole number"):
        check(cfg)
