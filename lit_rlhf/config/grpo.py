"""GRPOConfig: the GRPO family's settings (`algo=grpo`: GRPO, Dr. GRPO, DAPO, GDPO), beside every algorithm's."""

from dataclasses import dataclass, fields
from typing import Any, Optional

from lit_rlhf.config.algo import RLHFConfig
from lit_rlhf.config.registry import algorithm
from lit_rlhf.config.settings import setting
from lit_rlhf.config.validation import (
    check_adaptive_entropy,
    check_choice,
    check_decoupled_normalization,
    check_number,
    warn_about_alias,
)
from lit_rlhf.errors import ConfigError

SCALE_REWARDS = ("group", "batch", "none")
AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")  # of several rewards, TRL's multi_objective_aggregation
KL_PLACES = ("loss", "reward")
MAX_REFILL_ROUNDS = 100  # DAPO refill rounds per RL step (each one a full rollout of B prompts)


def default_of(cls: type, name: str) -> Any:
    return next(f.default for f in fields(cls) if f.name == name)


@algorithm("grpo", target="lit_rlhf.algos.GRPOModule")
@dataclass
class GRPOConfig(RLHFConfig):
    num_generations: int = setting(4, "samples per prompt, the group (K >= 2)")
    scale_rewards: str = setting("group", "advantage = (r - group mean) / scale: `group` (the group's std), `batch` "
                                          "(the batch's std), `none` (Dr. GRPO)")
    multi_objective_aggregation: str = setting(
        "sum_then_normalize", "TRL's, for several rewards: `sum_then_normalize`, the advantage of their weighted sum; "
                              "`normalize_then_sum` (GDPO), each reward's scores (and missing_eos_penalty's, the "
                              "overlong penalty's) normalized in its group ((r - mean) / (std + 1e-4)), their "
                              "weighted sum then over the batch of every rank")
    loss_type: str = setting("dapo", "as for every algorithm; `dapo` (TRL's default) is the token mean over the "
                                     "whole step, however it is split")
    kl_in: str = setting("loss", "`loss`: + kl_coef x KL_t in the loss (GRPO's); `reward`: - kl_coef x sum_t KL_t "
                                 "in the reward, as RLOO")
    kl_estimator: str = setting("k3", "k3 in the loss (GRPO's); use k1 with kl_in=reward")
    kl_coef: float = setting(0.2, "the KL coefficient (GRPO's beta); 0 skips the reference forward")
    beta: Optional[float] = setting(None, "TRL's name for kl_coef: set, it replaces it")
    entropy_coef: float = setting(0.0, "TRL's entropy bonus: loss - entropy_coef x the mean entropy of the response "
                                       "tokens (their full logits are then computed in the update; 0: off); with "
                                       "use_adaptive_entropy, its starting value")
    use_adaptive_entropy: bool = setting(
        False, "TRL's (Skywork-OR1's adaptive entropy control): after each optimizer step entropy_coef moves by "
               "entropy_coef_delta, up while the mean entropy of the bonus's tokens is at or below entropy_target, "
               "down otherwise, within [entropy_coef_min, entropy_coef_max]; the bonus applies only while it is")
    entropy_coef_min: float = setting(0.0, "use_adaptive_entropy: the coefficient's lower bound")
    entropy_coef_max: float = setting(1.0, "use_adaptive_entropy: the coefficient's upper bound")
    entropy_coef_delta: float = setting(0.005, "use_adaptive_entropy: the coefficient's change per optimizer step")
    entropy_target: float = setting(0.2, "use_adaptive_entropy: the mean entropy per token (nats) it steers to")
    use_bias_correction_kl: bool = setting(
        True, "with kl_in=loss, weight each token's KL term by the ratio pi / pi_old (with its gradient), as TRL: "
              "the unbiased gradient of the reverse KL for responses sampled from pi_old (false: plain k3, whose "
              "gradient is that of KL(ref || pi))")
    num_iterations: Optional[int] = setting(None, "TRL's name for num_ppo_epochs (updates per rollout, importance "
                                                  "ratio against the rollout's logprobs): set, it replaces it")
    filter_zero_std_groups: bool = setting(False, "leave groups whose K rewards are all equal (no signal) out of "
                                                  "the loss; `rollout/zero_std_frac` logs their share either way")
    max_refill_rounds: int = setting(0, "with filter_zero_std_groups: DAPO's dynamic sampling, up to this many extra "
                                        "rollouts of B prompts per RL step until B groups are informative (0: off; "
                                        "at most 100)")
    mask_truncated_completions: bool = setting(False, "TRL's (DAPO's overlong filtering): completions cut at "
                                                      "response_length without the stop token are left out of the "
                                                      "loss and of its token counts; their rewards still count in "
                                                      "their group's mean and std")
    overlong_buffer: Optional[int] = setting(None, "DAPO's soft overlong penalty: responses longer than "
                                                   "response_length - overlong_buffer lose up to "
                                                   "overlong_penalty_factor, linearly (null: off)")
    overlong_penalty_factor: float = setting(1.0, "the overlong penalty at response_length tokens")

    def __post_init__(self):
        warn_about_alias("kl_coef", self.kl_coef, "beta", self.beta, default_of(GRPOConfig, "kl_coef"))
        warn_about_alias("num_ppo_epochs", self.num_ppo_epochs, "num_iterations", self.num_iterations,
                         default_of(GRPOConfig, "num_ppo_epochs"))
        check_number("entropy_coef", self.entropy_coef)
        check_adaptive_entropy(self.entropy_coef_min, self.entropy_coef_max, self.entropy_coef_delta,
                               self.entropy_target)
        if self.beta is not None:
            check_number("beta", self.beta, minimum=0)
            self.kl_coef = self.beta
        if self.num_iterations is not None:
            check_number("num_iterations", self.num_iterations, minimum=1, integer=True)
            self.num_ppo_epochs = self.num_iterations
        check_choice("kl_in", self.kl_in, KL_PLACES)
        super().__post_init__()
        check_choice("scale_rewards", self.scale_rewards, SCALE_REWARDS)
        check_choice("multi_objective_aggregation", self.multi_objective_aggregation, AGGREGATIONS)
        if self.multi_objective_aggregation == "normalize_then_sum":
            check_decoupled_normalization(self.scale_rewards, self.kl_in_reward and self.kl_coef > 0)
        check_number("num_generations", self.num_generations, integer=True)
        if self.num_generations < 2:
            raise ConfigError(f"algo.num_generations={self.num_generations}: a group-relative advantage needs at "
                              f"least 2 samples per prompt; set num_generations >= 2.")
        check_number("overlong_buffer", self.overlong_buffer, minimum=1, integer=True, optional=True)
        if self.overlong_buffer is not None and self.overlong_buffer > self.response_length:
            raise ConfigError(f"algo.overlong_buffer={self.overlong_buffer} is longer than algo.response_length="
                              f"{self.response_length}; pick a buffer <= response_length.")
        check_number("overlong_penalty_factor", self.overlong_penalty_factor, minimum=0)
        check_number("max_refill_rounds", self.max_refill_rounds, minimum=0, integer=True)
        if self.max_refill_rounds > MAX_REFILL_ROUNDS:
            raise ConfigError(f"algo.max_refill_rounds={self.max_refill_rounds} is more than {MAX_REFILL_ROUNDS}: "
                              f"each round is a full rollout of B prompts, and a reward that is constant on the "
                              f"prompts would run them all every step; pick at most {MAX_REFILL_ROUNDS} (verl's "
                              f"default is 10).")
        if self.max_refill_rounds and not self.filter_zero_std_groups:
            raise ConfigError(f"algo.max_refill_rounds={self.max_refill_rounds} refills groups that "
                              f"filter_zero_std_groups leaves out; set algo.filter_zero_std_groups=true as well.")
        if self.max_refill_rounds and self.max_staleness:
            raise ConfigError(f"algo.max_staleness={self.max_staleness} cannot refill a step with dynamic sampling "
                              f"(algo.max_refill_rounds={self.max_refill_rounds} samples more prompts inside the "
                              f"step); set algo.max_refill_rounds=0 or drop algo.max_staleness.")

    @property
    def kl_in_reward(self) -> bool:
        return self.kl_in == "reward"
