"""Settings that do nothing in the combination chosen: each is said once, at construction, so a user does not tune
a knob that is not connected (e.g. a sequence-level correction of engine logprobs with rollout=hf, which has none)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

REFERENCE_SYNC_DEFAULTS = {"ref_model_mixup_alpha": 0.6, "ref_model_sync_steps": 512}  # TRL's


def changed(config: Any, name: str) -> bool:
    """Whether `name` differs from its default in the config's class."""
    default = next(f.default for f in fields(type(config)) if f.name == name)
    return getattr(config, name) != default


def changed_rollout_is(config: Any) -> list[str]:
    """`name=value` of the rollout_is_* settings (the decoupled correction's weight) set away from their defaults;
    one set to null switches its part of the correction off, which is never idle."""
    names = ("rollout_is_mode", "rollout_is_min", "rollout_is_cap")
    return [f"{name}={getattr(config, name)}" for name in names
            if hasattr(config, name) and changed(config, name) and getattr(config, name) is not None]


def idle_settings(config: Any, engine_reports_logprobs: bool) -> list[str]:
    """One line per setting of `config` (an algorithm's settings) that the rest of it leaves without effect."""
    said = []
    if getattr(config, "max_staleness", None) is None and changed(config, "async_correction"):
        said.append(f"algo.async_correction={config.async_correction} corrects rollouts drawn ahead in asynchronous "
                    f"mode, which is off: it does nothing; set algo.max_staleness (e.g. 1) or drop it.")
    if getattr(config, "max_staleness", None) is not None and getattr(config, "async_correction", "") == "behaviour":
        said += [f"algo.{setting} weights the behaviour ratio of async_correction=decoupled; async_correction="
                 f"behaviour clips around the sampler's logprobs with no such weight, so it does nothing; drop it or "
                 f"use decoupled." for setting in changed_rollout_is(config)]
    steps = getattr(config, "rl_steps", None)
    if getattr(config, "max_staleness", None) is not None and steps is not None and config.max_staleness >= steps:
        said.append(f"algo.max_staleness={config.max_staleness} is not below the run's {steps} RL steps: every "
                    f"rollout is drawn with the starting weights (staleness = its step), which is off-policy "
                    f"training on the initial policy's samples; lower it (1 or 2 keeps the overlap).")
    draws, staleness = getattr(config, "async_draws", 1), getattr(config, "max_staleness", None)
    if draws > 1 and (staleness is None or draws > staleness + 1):
        said.append(f"algo.async_draws={draws}: at most algo.max_staleness + 1 rollouts can be drawn at once (the "
                    f"others' weights are not trained yet), and max_staleness={staleness}; "
                    + ("set algo.max_staleness or drop it." if staleness is None else f"only {staleness + 1} draw."))
    if not engine_reports_logprobs and not getattr(config, "max_staleness", None):
        said += [f"algo.{setting} corrects an engine's own logprobs, and this rollout engine reports none "
                 f"(rollout=hf samples with the trainer's model): it does nothing; use rollout=vllm or "
                 f"algo.max_staleness >= 1, or drop it." for setting in changed_rollout_is(config)]
        threshold = getattr(config, "off_policy_mask_threshold", None)
        updates = getattr(config, "num_ppo_epochs", 1) * getattr(config, "num_mini_batches", 1)
        if threshold is not None and updates == 1:
            said.append(f"algo.off_policy_mask_threshold={threshold} measures how far the policy being updated is "
                        f"from the one that sampled; with rollout=hf and a single update per rollout they are the "
                        f"same policy, so it masks nothing (it acts with num_ppo_epochs or num_mini_batches > 1, "
                        f"or rollout=vllm).")
    if getattr(config, "importance_sampling_level", "token") == "sequence":
        for name in ("cliprange_low", "cliprange_high"):
            if getattr(config, name, None) is not None:
                said.append(f"algo.{name}={getattr(config, name)} is not used with importance_sampling_level="
                            f"sequence, which clips with sequence_cliprange_low/high (GSPO's range); drop it.")
    kind = getattr(config, "policy_loss", "clip")
    if kind != "clip":
        bound = {"cispo": "cispo_cap", "sapo": "sapo_temperature_pos/neg", "vespo": "its sequence weight (vespo_k_*, "
                 "vespo_lambda_*)"}[kind]
        for name in ("cliprange", "cliprange_low", "cliprange_high", "delta"):
            if hasattr(config, name) and changed(config, name):
                said.append(f"algo.{name}={getattr(config, name)} is not used with policy_loss={kind}, which bounds "
                            f"its update with {bound}; drop it.")
    if kind == "vespo" and getattr(config, "importance_sampling_level", "token") == "sequence":
        said.append("algo.importance_sampling_level=sequence is not used with policy_loss=vespo, which weighs each "
                    "sequence by its own summed log-ratio; drop it.")
    if getattr(config, "divergence", None) == "generalized_jsd" and changed(config, "iw_opd_gamma"):
        said.append(f"algo.iw_opd_gamma={config.iw_opd_gamma} weights the sampled-token advantages, and algo."
                    f"divergence=generalized_jsd has none: it does nothing; drop it or use divergence=sampled_token.")
    if getattr(config, "divergence", None) == "sampled_token" and changed(config, "beta"):
        said.append(f"algo.beta={config.beta} chooses the full-vocabulary divergence of algo.divergence="
                    f"generalized_jsd, and divergence=sampled_token: it does nothing; set algo.divergence="
                    f"generalized_jsd or drop it.")
    if getattr(config, "critic_model_path", None) and config.critic != "reward_model":
        said.append(f"algo.critic_model_path={config.critic_model_path!r} is the critic of algo.critic=reward_model, "
                    f"and algo.critic={config.critic}: it is not loaded; set algo.critic=reward_model or drop it.")
    if getattr(config, "overlong_buffer", 0) is None and changed(config, "overlong_penalty_factor"):
        said.append(f"algo.overlong_penalty_factor={config.overlong_penalty_factor} scales the overlong penalty, and "
                    f"algo.overlong_buffer is null (off): it does nothing; set algo.overlong_buffer or drop it.")
    if getattr(config, "kl_in", "loss") != "loss" and changed(config, "use_bias_correction_kl"):
        said.append(f"algo.use_bias_correction_kl={config.use_bias_correction_kl} weighs the KL term of the loss, and "
                    f"algo.kl_in={config.kl_in} charges the KL in the reward: it does nothing; set algo.kl_in=loss or "
                    f"drop it.")
    if hasattr(config, "sync_ref_model"):
        said += idle_reference_sync(config.sync_ref_model, config.ref_model_mixup_alpha, config.ref_model_sync_steps)
    if hasattr(config, "use_adaptive_entropy") and not config.use_adaptive_entropy:
        said += [f"algo.{name}={getattr(config, name)} steers the adaptive entropy coefficient, and algo."
                 f"use_adaptive_entropy is off: it does nothing; set algo.use_adaptive_entropy=true or drop it."
                 for name in ("entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target")
                 if changed(config, name)]
    return said


def idle_reference_sync(sync_ref_model: bool, alpha: Any, steps: Any) -> list[str]:
    """A line per knob of algo.sync_ref_model set away from TRL's default while the sync is off."""
    if sync_ref_model:
        return []
    values = {"ref_model_mixup_alpha": alpha, "ref_model_sync_steps": steps}
    return [f"algo.{name}={value} times the reference's updates, and algo.sync_ref_model is off: it does nothing; "
            f"set algo.sync_ref_model=true or drop it."
            for name, value in values.items() if value != REFERENCE_SYNC_DEFAULTS[name]]
