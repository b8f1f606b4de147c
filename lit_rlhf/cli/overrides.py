"""What the user typed on the command line, as Hydra recorded it."""

from __future__ import annotations

from hydra.core.hydra_config import HydraConfig


def command_line_keys() -> list[str]:
    """The keys the user's overrides set (`reward`, `reward.weights.vader`, `algo.temperature`, ...); none outside a
    Hydra app."""
    if not HydraConfig.initialized():
        return []
    return [o.lstrip("+~").split("=", 1)[0] for o in HydraConfig.get().overrides.task]
