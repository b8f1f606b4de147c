"""The algorithms' settings: RLHFConfig (every algorithm), RLOOConfig, PPOConfig. Names follow TRL's
RLOOConfig / PPOConfig where TRL has one; defaults are ours, the same for Python and the CLI."""

from dataclasses import dataclass
from typing import Any, Dict, Optional

from lit_rlhf.config.settings import setting
from lit_rlhf.config.validation import check_number, check_shared_settings, warn_about_reward_kl
from lit_rlhf.errors import ConfigError
from lit_rlhf.ops import KL_ESTIMATORS, LOSS_AGGREGATIONS

KL_PENALTIES = ("sequence", "token")
CRITIC_KINDS = ("shared", "adapter", "reward_model")


@dataclass
class RLHFConfig:
    kl_coef: float = setting(0.05, "beta in `rlhf_reward = score - beta * sum_t KL_t`")
    kl_estimator: str = setting(
        "k1", "per-token KL: `k1` = log p - log p_ref, `k2` = (log r)^2 / 2, `k3` = (r - 1) - log r. The KL is "
              "in the reward here, where only k1 pulls the policy towards the reference (the policy gradient of a "
              "k2/k3 penalty is nearly opposite to the KL's far from it, about 3% of it near it): k2/k3 warn")
    response_length: int = setting(32, "max new tokens (R)")
    temperature: float = setting(0.7, "the only sampling setting; every logprob uses logits / temperature")
    stop_token: str = setting("eos", "responses are truncated after it (`eos` or one token); masks come from it")
    missing_eos_penalty: Optional[float] = setting(1.0, "subtracted from the score of a response with no stop "
                                                        "token (null: off)")
    cliprange: float = setting(0.2, "PPO ratio clipping")
    loss_aggregation: str = setting(
        "token_mean", "how the per-token policy loss becomes one number: `token_mean` (over the micro-batch's "
                      "tokens), `seq_mean_token_mean` (mean of each sequence's token mean), `token_sum_norm` (token "
                      "sum / (sequences x response_length))")
    num_ppo_epochs: int = setting(1, "passes over each rollout")
    num_mini_batches: int = setting(1, "optimizer steps per pass")
    gradient_accumulation_steps: int = setting(1, "micro-batches per optimizer step")
    max_grad_norm: Optional[float] = setting(1.0, "gradient clipping through Lightning's `clip_gradients` (null: off)")
    forward_batch_size: Optional[int] = setting(None, "chunk size of the no-grad logprob forwards (null: all at once)")
    generation_kwargs: Dict[str, Any] = setting(factory=dict, doc="extra `generate()` settings; ones that bias the "
                                                                  "sampled distribution are refused")
    allow_biased_sampling: bool = setting(False, "accept top_k / top_p / min_new_tokens / repetition_penalty ... "
                                                 "anyway")
    reuse_rollout_forward: bool = setting(
        True, "with 1 epoch x 1 minibatch x 1 micro-batch and no dropout (a Dropout module, or train-mode forwards "
              "that differ), the update's forward runs in the rollout and replaces the old-logprob forward; false "
              "trades that pass for the memory of its graph while the reward scores")
    max_consecutive_nonfinite: int = setting(3, "a step with a non-finite loss or gradient is skipped (counted in "
                                                "`policy/skipped_updates`); this many in a row stop the run")
    rl_steps: Optional[int] = setting(None, "stop after this many RL steps (the CLI's `steps`; null: the Trainer's "
                                            "max_steps, in optimizer steps, decides)")

    def __post_init__(self):
        if self.loss_aggregation not in LOSS_AGGREGATIONS:
            raise ConfigError(f"algo.loss_aggregation={self.loss_aggregation!r} is not one of {LOSS_AGGREGATIONS}.")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ConfigError(f"algo.kl_estimator={self.kl_estimator!r} is not one of {KL_ESTIMATORS}.")
        check_shared_settings(self)
        warn_about_reward_kl(self.kl_estimator)  # every algorithm here puts the KL in the reward


@dataclass
class RLOOConfig(RLHFConfig):
    rloo_k: int = setting(4, "samples per prompt (K >= 2); each one's baseline is the mean of the other K-1")
    kl_penalty: str = setting(
        "sequence", "`sequence`: one advantage per response. `token`: per-token rewards -beta * KL_t plus the score "
                    "on the last token; token t's advantage is its reward-to-go minus the siblings' mean return")
    normalize_advantage: bool = setting(False, "whiten advantages over the batch")

    def __post_init__(self):
        super().__post_init__()
        check_number("rloo_k", self.rloo_k, integer=True)
        if self.rloo_k < 2:
            raise ConfigError(f"algo.rloo_k={self.rloo_k}: RLOO needs at least 2 samples per prompt; set rloo_k >= 2.")
        if self.kl_penalty not in KL_PENALTIES:
            raise ConfigError(f"algo.kl_penalty={self.kl_penalty!r} is not one of {KL_PENALTIES}.")


@dataclass
class PPOConfig(RLHFConfig):
    num_ppo_epochs: int = setting(4, "passes over each rollout (as TRL)")
    samples_per_prompt: int = setting(4, "sequences per prompt (TRL: 1); 4 gives PPO the rollout size of RLOO")
    vf_coef: float = setting(0.5, "loss = policy loss + vf_coef x value loss (TRL: 0.1; 0.5 about doubled "
                                  "`val/var_explained` on the embedded default)")
    cliprange_value: float = setting(0.2, "values move at most this far from their rollout value per update")
    gamma: float = setting(1.0, "GAE discount")
    lam: float = setting(0.95, "GAE lambda")
    whiten_rewards: bool = setting(False, "whiten the per-token rewards (scale only) before GAE")
    whiten_advantages: bool = setting(True, "masked whitening of the advantages")
    entropy_coef: float = setting(0.0, "entropy bonus")
    critic: str = setting("shared", "`shared`: a value head on the policy's last hidden state; `adapter`: a second "
                                    "LoRA adapter with its own head; `reward_model`: backbone and head of "
                                    "critic_model_path")
    critic_model_path: Optional[str] = setting(None, "with critic=reward_model: a sequence-classification model")
    critic_warmup_steps: int = setting(0, "first RL steps that train only the critic")

    def __post_init__(self):
        super().__post_init__()
        if self.critic not in CRITIC_KINDS:
            raise ConfigError(f"algo.critic={self.critic!r} is not one of {CRITIC_KINDS}.")
        if self.critic == "reward_model" and not self.critic_model_path:
            raise ConfigError("algo.critic=reward_model needs algo.critic_model_path (a sequence-classification "
                              "model).")
        check_number("samples_per_prompt", self.samples_per_prompt, minimum=1, integer=True)
        check_number("vf_coef", self.vf_coef, minimum=0)
        check_number("cliprange_value", self.cliprange_value, minimum=0, strictly=True)
        check_number("entropy_coef", self.entropy_coef)
        check_number("critic_warmup_steps", self.critic_warmup_steps, minimum=0, integer=True)
        for name in ("gamma", "lam"):
            check_number(name, getattr(self, name), minimum=0)
            if getattr(self, name) > 1:
                raise ConfigError(f"algo.{name}={getattr(self, name)} must be in [0, 1].")
