"""python -m lit_rlhf.serve's task: build the reward group's reward and serve it until stopped."""

from __future__ import annotations

from hydra.utils import instantiate
from omegaconf import DictConfig

from lit_rlhf.cli.checks import check_reward_group
from lit_rlhf.cli.errors import mark_task_started
from lit_rlhf.models import load_reward
from lit_rlhf.noise import silence_known_noise


def served_name(reward) -> str:
    """The name /health reports: the named rewards of a WeightedSum, or the reward's own."""
    from lit_rlhf.models import WeightedSum, reward_name

    return "+".join(reward.rewards) if isinstance(reward, WeightedSum) else reward_name(reward)


def serve_reward(cfg: DictConfig) -> None:
    from lit_rlhf.remote.server import serve

    mark_task_started()
    silence_known_noise()
    check_reward_group(cfg)
    reward = instantiate(cfg.reward, _convert_="all")
    load_reward(reward)  # a reward model loads before the server says it is up
    serve(reward, served_name(reward), host=cfg.host, port=cfg.port, max_batch_size=cfg.max_batch_size,
          max_wait_ms=cfg.max_wait_ms, auth_env=cfg.auth_env, announce=lambda line: print(line, flush=True))
