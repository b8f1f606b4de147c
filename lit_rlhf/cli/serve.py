"""python -m lit_rlhf.serve's task: build the reward group's reward and serve it until stopped."""

from __future__ import annotations

import math

from hydra.utils import instantiate
from omegaconf import DictConfig

from lit_rlhf.cli.checks import check_reward_group, check_working_directory
from lit_rlhf.cli.errors import mark_task_started
from lit_rlhf.errors import ConfigError
from lit_rlhf.noise import silence_known_noise
from lit_rlhf.remote.http import SERVED_TOKEN, auth_token
from lit_rlhf.rewards import load_reward
from lit_rlhf.stops_outside_stages import raise_lost_stop


def served_name(reward) -> str:
    """The name /health reports: the named rewards of a WeightedSum, or the reward's own."""
    from lit_rlhf.rewards.weighted_sum import named_parts

    return "+".join(named_parts(reward))


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def check_serve_settings(cfg: DictConfig) -> None:
    """The address, batch settings and authentication, before the reward is built (one line each)."""
    check_working_directory()
    port, host = cfg.get("port"), cfg.get("host")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigError(f"port={port!r} is not a TCP port; give a whole number from 1 to 65535 (or 0 for a free "
                          f"one).")
    if not isinstance(host, str) or not host:
        raise ConfigError(f"host={host!r} is not an address; give e.g. host=127.0.0.1 (this machine only).")
    batch = cfg.get("max_batch_size")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ConfigError(f"max_batch_size={batch!r} must be a whole number >= 1 (completions per reward call).")
    wait = cfg.get("max_wait_ms")
    if not isinstance(wait, (int, float)) or isinstance(wait, bool) or not math.isfinite(wait) or wait < 0:
        raise ConfigError(f"max_wait_ms={wait!r} must be a finite number of milliseconds >= 0.")
    body = cfg.get("max_body_mb")
    if not isinstance(body, (int, float)) or isinstance(body, bool) or not math.isfinite(body) or body <= 0:
        raise ConfigError(f"max_body_mb={body!r} must be a finite number of megabytes > 0.")
    if not isinstance(cfg.get("allow_unauthenticated"), bool):  # =flase would serve every machine without a token
        raise ConfigError(f"allow_unauthenticated={cfg.get('allow_unauthenticated')!r} must be true or false.")
    auth_token("auth_env", cfg.get("auth_env"), SERVED_TOKEN)  # before the reward loads
    if not is_loopback(host) and not cfg.get("auth_env") and not cfg.get("allow_unauthenticated"):
        raise ConfigError(f"host={host!r} accepts other machines, and without a token any of them may call the "
                          f"reward; set auth_env=<a variable holding a token> (clients: reward.auth_env), or "
                          f"allow_unauthenticated=true on a network you trust.")


def served_reward(cfg: DictConfig):
    """The serve config's checks, then its reward, loaded (a reward model loads before the server says it is up)."""
    check_serve_settings(cfg)
    check_reward_group(cfg)
    reward = instantiate(cfg.reward, _convert_="all")
    load_reward(reward)
    return reward


def serve_reward(cfg: DictConfig) -> None:
    from lit_rlhf.cli.reward_server import serve

    mark_task_started()
    silence_known_noise()
    reward = served_reward(cfg)
    raise_lost_stop()  # a stop while the reward loaded that a library caught: the server would serve until killed
    serve(reward, served_name(reward), host=cfg.host, port=cfg.port, max_batch_size=cfg.max_batch_size,
          max_wait_ms=cfg.max_wait_ms, auth_env=cfg.auth_env, max_body_mb=cfg.max_body_mb,
          announce=lambda line: print(line, flush=True))
