"""check_trains_something: a Trainer limit of 0 is refused before a run that would train nothing starts."""

import pytest
from omegaconf import OmegaConf

from lit_rlhf.cli.trainer_arguments import check_trains_something
from lit_rlhf.errors import ConfigError


@pytest.mark.parametrize("key, value", [("limit_train_batches", 0), ("limit_train_batches", 0.0), ("max_epochs", 0),
                                        ("max_steps", 0)])
def test_a_limit_of_zero_is_named(key, value):
    with pytest.raises(ConfigError, match=rf"^trainer\.{key}={value!r} trains no RL step; remove it"):
        check_trains_something(OmegaConf.create({"trainer": {"max_steps": -1, "max_epochs": -1, key: value}}))


@pytest.mark.parametrize("limits", [{"max_steps": -1, "max_epochs": -1}, {"limit_train_batches": 0.5},
                                    {"limit_train_batches": 1, "max_epochs": 1, "max_steps": 4}, {}])
def test_limits_that_train_something_or_none_pass(limits):
    check_trains_something(OmegaConf.create({"trainer": limits}))
    check_trains_something(OmegaConf.create({}))
