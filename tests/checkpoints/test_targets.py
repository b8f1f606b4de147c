"""A checkpoint's `_target_`s: only lit_rlhf's registered classes, matched by name, under any of their public
names; an attribute path through a lit_rlhf module to other code is refused."""

import pytest

from lit_rlhf.algos import GRPOModule, RLHFModule, RLOOModule
from lit_rlhf.checkpoints.targets import only_registered_targets, rlhf_module_class
from lit_rlhf.errors import ConfigError


def test_every_target_of_the_shipped_reward_metric_and_env_configs_is_registered():
    """What train.py writes into a checkpoint from conf/ evaluates (the allow-list is not too narrow)."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "conf"
    for group in ("reward", "task_metrics", "env"):
        paths = sorted((root / group).glob("*.yaml"))
        assert paths, root / group  # the folder is there: a loop over nothing checks nothing
        for path in paths:
            config = yaml.safe_load(path.read_text()) or {}
            config = {k: v for k, v in config.items() if k != "defaults"}
            if group == "reward" and config.get("_target_") is None:
                continue  # a defaults-only composition of other reward files
            assert only_registered_targets(config, group) is config, path


@pytest.mark.parametrize("target", ["lit_rlhf.models.export.shutil.copyfile", "lit_rlhf.models.os.system", "os.system",
                                    "lit_rlhf.tasks.metrics.ExactMatch", "lit_rlhf.models.export.export_model",
                                    "lit_rlhf.rewards.WeightedSum.__init__.__globals__"])
def test_reward_targets_other_than_registered_classes_are_refused(target):
    config = {"_target_": "lit_rlhf.rewards.WeightedSum", "rewards": {"x": {"_target_": target}}, "weights": {"x": 1}}
    with pytest.raises(ConfigError, match="which is not one of lit_rlhf's reward classes"):
        only_registered_targets(config, "reward")


def test_registered_classes_pass_under_their_package_and_defining_module_names():
    for target in ("lit_rlhf.rewards.WeightedSum", "lit_rlhf.rewards.weighted_sum.WeightedSum",
                   "lit_rlhf.rewards.HTTPReward", "lit_rlhf.rewards.http.HTTPReward"):
        assert only_registered_targets({"_target_": target}, "reward") == {"_target_": target}


def test_algorithm_names_resolve_to_rlhf_modules_only():
    assert rlhf_module_class("lit_rlhf.algos.grpo.GRPOModule", RLHFModule) is GRPOModule
    assert rlhf_module_class("lit_rlhf.algos.RLOOModule", RLHFModule) is RLOOModule
    for name in ("lit_rlhf.algos.grpo.torch.nn.Module", "lit_rlhf.lazy_exports.importlib.import_module", "os.PathLike",
                 "lit_rlhf.algos.base.RLHFModule.__subclasses__", "no.such.Module", ""):
        with pytest.raises(ConfigError, match="which is not an RLHFModule class"):
            rlhf_module_class(name, RLHFModule)


class MyAlgorithm(GRPOModule):
    """A user's subclass, defined in a module they imported."""


def test_a_users_own_subclass_in_an_imported_module_is_accepted():
    assert rlhf_module_class(f"{__name__}.MyAlgorithm", RLHFModule) is MyAlgorithm
    with pytest.raises(ConfigError, match="which is not an RLHFModule class"):
        # only imported here: a reach through this module's attributes
        rlhf_module_class(f"{__name__}.GRPOModule", RLHFModule)


@pytest.mark.parametrize("target", ["lit_rlhf.models.WeightedSum", "lit_rlhf.models.VaderSentiment",
                                    "lit_rlhf.models.SequenceClassifierReward", "lit_rlhf.remote.HTTPReward",
                                    "lit_rlhf.remote.LLMJudge"])
def test_the_paths_earlier_releases_wrote_into_checkpoints_pass(target):
    """A checkpoint of the release before rewards moved to lit_rlhf.rewards names them at their old paths."""
    assert only_registered_targets({"_target_": target}, "reward") == {"_target_": target}


def test_an_attribute_path_through_an_old_name_is_refused():
    with pytest.raises(ConfigError, match="which is not one of lit_rlhf's reward classes"):
        only_registered_targets({"_target_": "lit_rlhf.models.WeightedSum.__init__.__globals__"}, "reward")
