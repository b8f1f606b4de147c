"""The algorithms `algo=<name>` can name: each registers its settings dataclass with the `algorithm` decorator, which
is all the app needs to type `conf/algo/<name>.yaml` (its `<name>_schema`) and the settings tables of the docs.

    @algorithm("rloo", target="lit_rlhf.algos.RLOOModule")
    @dataclass
    class RLOOConfig(RLHFConfig): ...

The dataclass module stays light (no torch, no Lightning): the app reads the registry before it composes a config,
and answers --help or a mistyped setting without importing the modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lit_rlhf.errors import ConfigError


@dataclass(frozen=True)
class Algorithm:
    name: str  # conf/algo/<name>.yaml; its typed schema is <name>_schema
    settings: type  # the settings dataclass (an RLHFConfig subclass)
    target: str  # the LightningModule Hydra instantiates, as an import path
    arguments: tuple[str, ...] = ()  # constructor arguments beyond every algorithm's that are not settings


ALGORITHMS: dict[str, Algorithm] = {}


def algorithm(name: str, target: str, arguments: tuple[str, ...] = ()) -> Callable[[type], type]:
    """Registers the decorated settings dataclass as algorithm `name`, built by the module at `target`."""

    def register(settings: type) -> type:
        known = ALGORITHMS.get(name)
        if known is not None and known.settings.__qualname__ != settings.__qualname__:
            raise ConfigError(f"two algorithms are named {name!r} ({known.settings.__qualname__} and "
                              f"{settings.__qualname__}); give the new one another name.")
        ALGORITHMS[name] = Algorithm(name, settings, target, tuple(arguments))
        return settings

    return register
