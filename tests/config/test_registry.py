"""The algorithm registry: what `algo=<name>` can name, the schemas the app registers from it, and the packages a
hydra.searchpath override makes it import."""

from dataclasses import dataclass

import pytest
from hydra.core.config_store import ConfigStore

from lit_rlhf.cli.configs import register_configs
from lit_rlhf.cli.plugins import import_searchpath_packages, searchpath_packages
from lit_rlhf.config import RLOOConfig
from lit_rlhf.config.registry import ALGORITHMS, algorithm
from lit_rlhf.errors import ConfigError


def test_the_built_in_algorithms_register_their_settings():
    assert {name: entry.settings.__name__ for name, entry in ALGORITHMS.items()}.items() >= {
        "rloo": "RLOOConfig", "ppo": "PPOConfig", "grpo": "GRPOConfig", "reinforce_pp": "ReinforcePPConfig",
        "distill": "DistillationConfig"}.items()
    assert ALGORITHMS["distill"].arguments == ("teacher",)


def test_a_registered_algorithm_gets_its_schema_and_a_taken_name_is_refused(monkeypatch):
    monkeypatch.setitem(ALGORITHMS, "rloo", ALGORITHMS["rloo"])  # restored after the test

    @algorithm("registry_test_algo", target="tests.config.test_registry.Module")
    @dataclass
    class RegistryTestConfig(RLOOConfig):
        extra: int = 3

    try:
        register_configs()
        schema = ConfigStore.instance().repo["algo"]["registry_test_algo_schema.yaml"].node
        assert schema.extra == 3 and schema._target_ == "tests.config.test_registry.Module" and schema.rloo_k == 4
        with pytest.raises(ConfigError, match="two algorithms are named 'rloo'"):
            algorithm("rloo", target="elsewhere.Module")(RegistryTestConfig)
    finally:
        ALGORITHMS.pop("registry_test_algo")
        ConfigStore.instance().repo["algo"].pop("registry_test_algo_schema.yaml", None)


def test_only_the_packages_a_searchpath_override_names_are_imported():
    assert searchpath_packages(["algo=x", "hydra.searchpath=[pkg://my_algos.conf,file:///tmp/c,pkg://b.conf]",
                                "other=pkg://not_this"]) == ["my_algos.conf", "b.conf"]
    assert searchpath_packages(["++hydra.searchpath=[pkg://a.conf]"]) == ["a.conf"]
    with pytest.raises(ConfigError, match="pkg://no_such_package_here.conf, which does not import"):
        import_searchpath_packages(["hydra.searchpath=[pkg://no_such_package_here.conf]"])
