"""Checks of the settings every RLHF module shares, each a one-line ConfigError naming the key and the fix.
Run when the module is built, so a bad value fails before any weights load."""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import typing
from collections.abc import Callable
from typing import Any

from lit_rlhf.errors import ConfigError, empty_value_line, nearest

SYNC_REF_MODEL_UNDER_FSDP2 = ("algo.sync_ref_model=true is not supported with trainer=fsdp2; use trainer=ddp or set "
                              "algo.sync_ref_model=false.")

REWARD_KL_WARNING = (
    "algo.kl_estimator={0} is used as a reward penalty: the policy gradient of a k2/k3 penalty does not point "
    "towards the reference (far from it, its direction is nearly opposite to the true KL gradient; near it, about "
    "3% of its size), so it does not hold the policy close. Use kl_estimator=k1 in the reward; k3 belongs in a loss.")


def is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


MIN_TEMPERATURE = 1e-4  # logits / temperature must stay finite (float32, bfloat16)


def check_number(name: str, value: Any, minimum: float | None = None, strictly: bool = False,
                 optional: bool = False, integer: bool = False) -> None:
    """algo.<name> must be a number (an integer) at or above minimum (strictly above with strictly=True)."""
    if value is None and optional:
        return
    kind = "a whole number" if integer else "a finite number"
    if not is_number(value) or not math.isfinite(value) or (integer and int(value) != value):
        raise ConfigError(f"algo.{name}={value!r} must be {kind}{' or null' if optional else ''}.")
    if minimum is not None and (value <= minimum if strictly else value < minimum):
        bound = f"> {minimum}" if strictly else f">= {minimum}"
        hint = " (null switches it off)" if optional else ""
        raise ConfigError(f"algo.{name}={value!r} must be {bound}{hint}.")


def check_flag(key: str, value: Any) -> None:
    """A boolean setting (the full key, e.g. rollout.shared_prefill): true or false, nothing else."""
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} must be true or false.")


def check_setting_number(key: str, value: Any, minimum: float | None = None, strictly: bool = False,
                         optional: bool = False, integer: bool = False, maximum: float | None = None) -> None:
    """A numeric setting outside algo.* (the full key): a finite number (a whole one) within the bounds, or null
    where optional."""
    if value is None and optional:
        return
    kind = "a whole number" if integer else "a finite number"
    bounds = [f"> {minimum}" if strictly else f">= {minimum}"] if minimum is not None else []
    bounds += [f"<= {maximum}"] if maximum is not None else []
    wanted = f"{kind}{' ' + ' and '.join(bounds) if bounds else ''}{' (or null)' if optional else ''}"
    if (not is_number(value) or not math.isfinite(value) or (integer and not isinstance(value, numbers.Integral))
            or (minimum is not None and (value <= minimum if strictly else value < minimum))
            or (maximum is not None and value > maximum)):
        raise ConfigError(f"{key}={value!r} must be {wanted}.")


def check_choice(name: str, value: Any, choices: tuple[str, ...], prefix: str = "algo.") -> None:
    """<prefix><name> must be one of choices."""
    if value not in choices:
        hint = nearest(str(value), choices) if difflib.get_close_matches(str(value), choices, n=1) else ""
        raise ConfigError(f"{prefix}{name}={value!r} is not one of {', '.join(choices)}{hint}.")


def check_optimizer(optimizer: Callable | None) -> None:
    """A factory of the parameters, not an optimizer already built; a partial optimizer's lr (and weight_decay) must
    be positive numbers."""
    if optimizer is not None and (hasattr(optimizer, "param_groups") or not callable(optimizer)):
        shown = f"{type(optimizer).__name__}(...), an optimizer already built," if hasattr(optimizer, "param_groups") \
            else f"{repr(optimizer)[:60]}"
        raise ConfigError(f"optimizer={shown} is not a factory of the parameters (the module builds its optimizer over "
                          f"its trainable parameters); pass e.g. functools.partial(torch.optim.AdamW, lr=1e-3).")
    keywords = getattr(optimizer, "keywords", None) or {}
    if "lr" in keywords:
        lr = keywords["lr"]
        if not is_number(lr) or not math.isfinite(lr) or lr <= 0:
            raise ConfigError(f"algo.optimizer.lr={lr!r} must be a number > 0 (e.g. 1e-5).")
    decay = keywords.get("weight_decay", 0.0)
    if not is_number(decay) or not math.isfinite(decay) or decay < 0:
        raise ConfigError(f"algo.optimizer.weight_decay={decay!r} must be a finite number >= 0.")


def check_flags(hp: Any, prefix: str = "algo.") -> None:
    """Every true-or-false setting of a config dataclass (its keys under `prefix`): a bool (or null where the field
    allows it). From Python a string such as "false" was taken as true; the command line's type check names no fix."""
    hints = typing.get_type_hints(type(hp))
    for field in dataclasses.fields(hp):
        annotation = hints[field.name]
        value = getattr(hp, field.name)
        if annotation in (bool, bool | None) and not isinstance(value, bool) and not (
                value is None and annotation is not bool):
            raise ConfigError(f"{prefix}{field.name}={value!r} must be true or false.")


def check_shared_settings(hp: Any) -> None:
    check_flags(hp)
    for name in ("num_ppo_epochs", "num_mini_batches", "gradient_accumulation_steps", "response_length"):
        check_number(name, getattr(hp, name), minimum=1, integer=True)
    check_number("forward_batch_size", hp.forward_batch_size, minimum=1, integer=True, optional=True)
    check_number("logits_chunk_size", hp.logits_chunk_size, minimum=1, integer=True, optional=True)
    check_number("logits_budget_mib", hp.logits_budget_mib, minimum=0, optional=True)
    check_number("max_tokens_per_micro_batch", hp.max_tokens_per_micro_batch, minimum=1, integer=True, optional=True)
    check_number("rl_steps", hp.rl_steps, minimum=1, integer=True, optional=True)
    check_number("temperature", hp.temperature, minimum=0, strictly=True)
    if hp.temperature < MIN_TEMPERATURE:
        raise ConfigError(f"algo.temperature={hp.temperature:g} is below {MIN_TEMPERATURE:g}: the logits divided by it "
                          f"overflow to inf, and sampling or the logprobs fail; set algo.temperature >= "
                          f"{MIN_TEMPERATURE:g} (at that temperature sampling is already greedy in effect).")
    check_number("kl_coef", hp.kl_coef, minimum=0)
    check_number("cliprange", hp.cliprange, minimum=0, strictly=True)
    check_number("cliprange_low", hp.cliprange_low, minimum=0, strictly=True, optional=True)
    check_number("cliprange_high", hp.cliprange_high, minimum=0, strictly=True, optional=True)
    check_number("max_grad_norm", hp.max_grad_norm, minimum=0, strictly=True, optional=True)
    check_number("missing_eos_penalty", hp.missing_eos_penalty, optional=True)
    check_number("max_consecutive_nonfinite", hp.max_consecutive_nonfinite, minimum=1, integer=True)
    check_number("rollout_is_cap", hp.rollout_is_cap, minimum=1, strictly=True, optional=True)
    if hp.max_tokens_per_micro_batch is not None and hp.gradient_accumulation_steps != 1:
        warn_once(f"algo.max_tokens_per_micro_batch={hp.max_tokens_per_micro_batch} replaces "
                  f"algo.gradient_accumulation_steps={hp.gradient_accumulation_steps}, which is ignored; drop one.")
    if hp.loss_type == "luspo" and hp.importance_sampling_level == "token":  # TRL warns the same
        warn_once("algo.loss_type=luspo scales GSPO's sequence loss by the sequence's length; with algo."
                  "importance_sampling_level=token the ratio is each token's, not LUSPO's setup: set "
                  "algo.importance_sampling_level=sequence.")


def warn_about_alias(name: str, value: Any, alias: str, alias_value: Any, default: Any) -> None:
    """TRL's name (alias) set beside ours (name) to another value than the default: the alias wins, said once."""
    if alias_value is not None and value not in (default, alias_value):
        warn_once(f"algo.{alias}={alias_value} and algo.{name}={value} are both set; {alias} (TRL's name for {name}) "
                  f"is used: drop one.")


_warned: set[str] = set()


def warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        from lightning.pytorch.utilities import rank_zero_warn

        rank_zero_warn(message)


def warn_about_reward_kl(kl_estimator: str, kl_in_reward: bool = True) -> None:
    if kl_in_reward and kl_estimator in ("k2", "k3"):
        from lightning.pytorch.utilities import rank_zero_warn

        rank_zero_warn(REWARD_KL_WARNING.format(kl_estimator))


def check_decoupled_normalization(scale_rewards: str, kl_in_reward: bool) -> None:
    """GRPO's multi_objective_aggregation=normalize_then_sum normalizes each reward itself, as TRL's: a scale_rewards
    other than `group` would be ignored, and a KL charged in the reward would be left out."""
    if scale_rewards != "group":
        raise ConfigError(f"algo.scale_rewards={scale_rewards} has no effect with algo.multi_objective_aggregation="
                          f"normalize_then_sum, which divides each reward by its group's std and their weighted sum "
                          f"by the batch's (TRL's); drop scale_rewards or set multi_objective_aggregation="
                          f"sum_then_normalize.")
    if kl_in_reward:
        raise ConfigError("algo.kl_in=reward charges the KL in the reward, which algo.multi_objective_aggregation="
                          "normalize_then_sum leaves out (it normalizes each reward's own scores); set algo.kl_in=loss "
                          "(GRPO's) or multi_objective_aggregation=sum_then_normalize.")


def check_adaptive_entropy(coef_min: Any, coef_max: Any, delta: Any, target: Any) -> None:
    """GRPO's adaptive entropy control: finite bounds in order, a step and a target entropy of at least 0."""
    check_number("entropy_coef_min", coef_min)
    check_number("entropy_coef_max", coef_max)
    check_number("entropy_coef_delta", delta, minimum=0)
    check_number("entropy_target", target, minimum=0)
    if coef_min > coef_max:
        raise ConfigError(f"algo.entropy_coef_min={coef_min} is above algo.entropy_coef_max={coef_max}; the adaptive "
                          f"entropy coefficient moves between them: set min <= max.")


def check_vespo(k_pos: Any, lambda_pos: Any, k_neg: Any, lambda_neg: Any) -> None:
    """VESPO's Gamma weight exp(lambda) w^k exp(-lambda w): finite k >= 0 and lambda > 0 (TRL floors lambda at 1e-4)."""
    for name, value in (("vespo_k_pos", k_pos), ("vespo_k_neg", k_neg)):
        check_number(name, value, minimum=0)
    for name, value in (("vespo_lambda_pos", lambda_pos), ("vespo_lambda_neg", lambda_neg)):
        check_number(name, value, minimum=0, strictly=True)


# TRL's loss_type names for a policy loss, and the loss type (normalization) TRL gives it
TRL_POLICY_LOSS_TYPES = {"cispo": "dapo", "sapo": "grpo", "vespo": "dapo"}


def check_loss_type(loss_type: Any, choices: tuple[str, ...]) -> None:
    """algo.loss_type must be one of choices; TRL's loss_type=cispo|sapo|vespo names its two settings here."""
    if loss_type in TRL_POLICY_LOSS_TYPES:
        raise ConfigError(f"algo.loss_type={loss_type}: TRL's loss_type={loss_type} is algo.policy_loss={loss_type} "
                          f"algo.loss_type={TRL_POLICY_LOSS_TYPES[loss_type]} here (the per-token loss and how it is "
                          f"averaged are two settings).")
    check_choice("loss_type", loss_type, choices)


def check_reference_sync_numbers(alpha: Any, steps: Any) -> None:
    """algo.ref_model_mixup_alpha in (0, 1] and algo.ref_model_sync_steps a whole number >= 1."""
    check_number("ref_model_sync_steps", steps, minimum=1, integer=True)
    check_number("ref_model_mixup_alpha", alpha, minimum=0, strictly=True)
    if alpha > 1:
        raise ConfigError(f"algo.ref_model_mixup_alpha={alpha} must be in (0, 1]: the policy's share of the updated "
                          f"reference (1: a copy).")


def check_reference_sync(hp: Any) -> None:
    """algo.sync_ref_model (TRL's): its two numbers, a reference in use, and updates where an RL step ends."""
    check_reference_sync_numbers(hp.ref_model_mixup_alpha, hp.ref_model_sync_steps)
    if not hp.sync_ref_model:
        return
    if hp.kl_coef == 0:  # as TRL's
        raise ConfigError("algo.sync_ref_model=true with algo.kl_coef=0 (beta): no KL term reads the reference, so "
                          "there is nothing to move; set algo.kl_coef > 0 or algo.sync_ref_model=false.")
    if hp.max_staleness:
        raise ConfigError(f"algo.sync_ref_model=true with algo.max_staleness={hp.max_staleness}: rollouts drawn ahead "
                          f"score the reference while it moves; set algo.max_staleness=null or "
                          f"algo.sync_ref_model=false.")
    per_rl_step = hp.num_ppo_epochs * hp.num_mini_batches
    if hp.ref_model_sync_steps % per_rl_step:
        raise ConfigError(f"algo.ref_model_sync_steps={hp.ref_model_sync_steps} is not a multiple of the {per_rl_step} "
                          f"optimizer steps of an RL step (num_ppo_epochs x num_mini_batches): the reference moves "
                          f"between RL steps; set it to a multiple of {per_rl_step}.")


def check_kto_batch_size(loss_type: str, batch_size: Any) -> None:
    """As TRL refuses it: KTO's reference point from a batch of one row (its KL row is the row itself)."""
    if loss_type == "kto" and batch_size == 1 and not isinstance(batch_size, bool):
        raise ConfigError("data.batch_size=1 with algo.loss_type=kto: the KL row of a batch of one row is the row "
                          "itself, so the reference point is its own log-ratio; give data.batch_size >= 2, or "
                          "algo.loss_type=apo_zero_unpaired (no reference point).")


def check_bootstraps(key: str, num_bootstraps: Any, confidence: float) -> None:
    """Enough resamples for a percentile bootstrap interval at this confidence: its bounds are the (1 - c)/2 and
    (1 + c)/2 quantiles of the resampled means, which fewer than 2 / (1 - c) resamples (40 at 95%) leave without a
    resample beyond either bound; with 1, the "interval" was one resample's mean twice."""
    least = math.ceil(round(2 / (1 - confidence), 6))
    if isinstance(num_bootstraps, int) and not isinstance(num_bootstraps, bool) and num_bootstraps < least:
        raise ConfigError(f"{key}={num_bootstraps} is too few resamples for a {confidence:.0%} interval (its bounds "
                          f"are quantiles of the resampled means); give {key} >= {least} (default 1000).")


def check_not_empty(key: str, value: Any, fix: str) -> None:
    """A path typed empty (`ckpt_path=$CKPT` with the variable unset): read as a path it is the working directory,
    read as "not set" another run than the one asked for. One line naming key, then `fix`."""
    if isinstance(value, str) and not value.strip():
        raise ConfigError(empty_value_line(f"{key}={value!r}", fix))
