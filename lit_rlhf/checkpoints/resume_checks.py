"""What a resume may change. A resumed run continues the checkpoint's run exactly, so a setting that
shapes the rollouts or the maths must be the same; the few that only steer the next updates are
applied, and the run says so in one line. Nothing the user changed is ignored silently."""

from __future__ import annotations

import os
from typing import Any

from lit_rlhf.errors import ConfigError

# Settings a resume applies from the command line (everything else must match the checkpoint).
APPLIED_ON_RESUME = ("max_grad_norm", "cliprange", "cliprange_low", "cliprange_high", "delta", "cliprange_value",
                     "top_entropy_quantile", "forward_batch_size", "logits_chunk_size", "padding_free",
                     "max_consecutive_nonfinite", "model.attn_implementation")
# Settings a resume may change without a word (the number of RL steps is why one resumes).
FREE_ON_RESUME = ("rl_steps",)
# Datamodule settings that do not change which prompts a step sees.
DATA_FREE_ON_RESUME = ("tokenizer", "eval_batch_size")
# Reward settings that change how a reward is reached, not what it scores: free on resume.
REWARD_FREE_ON_RESUME = ("batch_size", "max_concurrency", "timeout_s", "retries", "backoff_s", "auth_env",
                         "api_key_env", "overlap", "device", "concurrent")
# Nested settings added after checkpoints were written, each with the value that trains as those checkpoints' runs
# did: a checkpoint without the key resumes when the key has that value (a new top-level setting never counts).
ADDED_LATER = {"model.lora.use_rslora": False, "model.lora.use_dora": False, "model.cast_lm_head_to_fp32": False}


def same(old: Any, new: Any) -> bool:
    """Equal, or the same local model directory under another checkout (the bundled tiny model)."""
    if old == new:
        return True
    if isinstance(old, dict) and isinstance(new, dict):
        return old.keys() == new.keys() and all(same(old[k], new[k]) for k in old)
    return (isinstance(old, str) and isinstance(new, str) and os.path.isdir(new)
            and os.path.basename(old.rstrip("/")) == os.path.basename(new.rstrip("/")))


def flatten(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"lora": {"r": 8}}} -> {"model.lora.r": 8}: a changed setting is named by its own key."""
    flat = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value and key != "generation_kwargs":
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def changed_settings(saved: dict[str, Any], current: dict[str, Any], free: tuple[str, ...] = ()) -> dict[str, tuple]:
    """{key: (saved, current)} for keys whose values differ (nested settings by their dotted key), except `free`
    ones. A key only one side knows counts as changed when the other side's parent is set (e.g. lora -> null)."""
    both = saved.keys() & current.keys()  # a setting newer than the checkpoint is not a change
    flat_saved, flat_current = flatten(saved), flatten(current)
    added_later = {k for k, value in ADDED_LATER.items() if k not in flat_saved and flat_current.get(k) == value}
    return {k: (flat_saved.get(k), flat_current.get(k)) for k in flat_saved.keys() | flat_current.keys()
            if k.partition(".")[0] in both and k.partition(".")[0] not in free and k not in added_later
            and not same(flat_saved.get(k), flat_current.get(k))}


def setting_name(prefix: str, key: str) -> str:
    return key if key.startswith("model.") or key == "model" else f"{prefix}.{key}"


def refuse(prefix: str, changes: dict[str, tuple]) -> None:
    key, (old, new) = sorted(changes.items())[0]
    raise ConfigError(f"resume changes {setting_name(prefix, key)} ({old!r} -> {new!r})"
                      f"{' and more' if len(changes) > 1 else ''}; "
                      f"an exact resume needs the checkpoint's value: drop the override, or start a new run "
                      f"(e.g. from an exported policy).")


def check_resumed_reward(saved: Any, current: Any) -> None:
    """The app's reward config against the checkpoint's (a module built in plain Lightning records none): a setting
    that changes the scores, such as a reward's argument, model, template or normalization, is refused; the
    rewards' classes and weights are compared by the run's identity."""
    if not isinstance(saved, dict) or not isinstance(current, dict):
        return
    flat_saved, flat_current = flatten(saved), flatten(current)
    changes = {typed_reward_key(key, current): (flat_saved.get(key), flat_current.get(key))
               for key in flat_saved.keys() | flat_current.keys()
               if key.rpartition(".")[2] not in REWARD_FREE_ON_RESUME
               and not same(flat_saved.get(key), flat_current.get(key))}
    if changes:
        refuse("reward", changes)


def typed_reward_key(key: str, config: dict[str, Any]) -> str:
    """A key of the reward config as the command line types it: the CLI keeps a reward of the user's own
    (reward._target_=mymodule.Length +reward.scale=0.5) as rewards.Length, whose arguments are typed
    reward.<argument>."""
    rewards = config.get("rewards")
    if isinstance(rewards, dict) and len(rewards) == 1:
        ((name, own),) = rewards.items()
        if isinstance(own, dict) and not str(own.get("_target_", "")).startswith("lit_rlhf."):
            return key.removeprefix(f"rewards.{name}.")
    return key


def check_resume(saved_hparams: dict[str, Any], hparams: dict[str, Any], saved_data: dict[str, Any] | None,
                 data: dict[str, Any] | None) -> list[str]:
    """Refuses changes that break exactness; returns the applied ones as 'algo.key old -> new'."""
    changes = changed_settings(saved_hparams, hparams, FREE_ON_RESUME)
    refused = {k: v for k, v in changes.items() if k not in APPLIED_ON_RESUME}
    if refused:
        refuse("algo", refused)
    if saved_data is not None and data is not None:
        data_changes = changed_settings(saved_data, data, DATA_FREE_ON_RESUME)
        if data_changes:
            refuse("data", data_changes)
    return [f"{setting_name('algo', k)} {old!r} -> {new!r}" for k, (old, new) in sorted(changes.items())]


def check_resumed_lr(optimizer_states: list[dict[str, Any]], new_lr: float | None, has_scheduler: bool) -> str | None:
    """The optimizer state holds the old lr. A new algo.optimizer.lr is applied (returns the line to report),
    except under an lr scheduler, whose schedule the state continues: then it is refused."""
    if new_lr is None or not optimizer_states:
        return None
    group = optimizer_states[0]["param_groups"][0]
    old_lr = group.get("initial_lr", group["lr"]) if has_scheduler else group["lr"]
    if abs(old_lr - new_lr) <= 1e-12 * max(abs(old_lr), 1.0):
        return None
    if has_scheduler:
        raise ConfigError(f"resume changes algo.optimizer.lr ({old_lr!r} -> {new_lr!r}) under an lr scheduler, "
                          f"which continues the checkpoint's schedule; drop the override or start a new run.")
    return f"algo.optimizer.lr {old_lr!r} -> {new_lr!r}"
