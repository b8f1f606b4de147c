"""`+algo.activation_offloading=true` for an app whose module takes no such argument (train_dpo.py, train_sft.py,
train_reward_model.py build theirs with Hydra): one line naming the key and the arguments the module takes, where
Python's TypeError came through Hydra's InstantiationException with a traceback."""

import pytest
from hydra.errors import InstantiationException
from hydra.utils import instantiate

from lit_rlhf.cli.errors import user_error


class BuggyInside:
    """A class whose constructor takes what it is given, and then calls something wrongly itself."""

    def __init__(self, size: int = 1):
        def helper(size):
            return size

        helper(size=size, unexpected=True)


def error_of(config: dict) -> BaseException:
    with pytest.raises(InstantiationException) as err:
        instantiate({"algo": config})  # full_key: algo, as the apps build it
    return err.value


@pytest.mark.parametrize(("config", "line"), [
    # a TRL name says what this library does instead, before a near spelling that it does not mean
    ({"_target_": "lit_rlhf.algos.dpo.DPOModule", "model": {"name_or_path": "x"}, "activation_offloading": True},
     "algo.activation_offloading is not an argument of DPOModule (TRL's activation_offloading has no equivalent "
     "here: model.gradient_checkpointing=true trades compute for activation memory instead); remove it."),
    ({"_target_": "lit_rlhf.algos.dpo.DPOModule", "model": {"name_or_path": "x"}, "loss_typ": "ipo"},
     "algo.loss_typ is not an argument of DPOModule (did you mean 'loss_type'?); remove it."),
    ({"_target_": "lit_rlhf.algos.sft.SFTModule", "model": {"name_or_path": "x"}, "logits_chunk_sise": 8},
     "algo.logits_chunk_sise is not an argument of SFTModule (did you mean 'logits_chunk_size'?); remove it."),
])
def test_an_argument_the_module_does_not_take_is_one_line(config, line):
    assert user_error(error_of(config)) == line


def test_a_type_error_raised_inside_a_constructor_stays_a_traceback():
    assert user_error(error_of({"_target_": f"{__name__}.BuggyInside", "size": 2})) is None
