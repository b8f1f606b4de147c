"""OmegaConf resolvers used by conf/: ${asset:tiny-pythia}, ${optimizer_steps:...}."""

from __future__ import annotations

from omegaconf import OmegaConf

from lit_rlhf.assets import asset_path


def optimizer_steps(rl_steps: int, num_ppo_epochs: int, num_mini_batches: int) -> int:
    """Lightning counts optimizer steps in manual optimization: one per minibatch of every PPO epoch."""
    return int(rl_steps) * int(num_ppo_epochs) * int(num_mini_batches)


def register_resolvers() -> None:
    for name, fn in {"asset": asset_path, "optimizer_steps": optimizer_steps}.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
