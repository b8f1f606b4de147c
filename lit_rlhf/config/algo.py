"""The algorithms' settings: RLHFConfig (every algorithm), RLOOConfig, PPOConfig, ReinforcePPConfig (GRPOConfig is
config/grpo.py's, DistillationConfig config/distillation.py's).
Names follow TRL's configs where TRL has one; defaults are ours, the same for Python and the CLI."""

from dataclasses import dataclass
from typing import Any, Dict, Optional

from lit_rlhf.choices import IMPORTANCE_SAMPLING_LEVELS, IS_MODES, KL_ESTIMATORS, LOSS_TYPES, POLICY_LOSSES
from lit_rlhf.config.idle import REFERENCE_SYNC_DEFAULTS
from lit_rlhf.config.registry import algorithm
from lit_rlhf.config.sampling_checks import check_unbiased
from lit_rlhf.config.settings import setting
from lit_rlhf.config.validation import (
    check_choice,
    check_loss_type,
    check_number,
    check_reference_sync,
    check_setting_number,
    check_shared_settings,
    check_vespo,
    warn_about_reward_kl,
)
from lit_rlhf.errors import ConfigError

KL_PENALTIES = ("sequence", "token")


CRITIC_KINDS = ("shared", "adapter", "reward_model")
BASELINES = ("group", "none")
ASYNC_CORRECTIONS = ("decoupled", "behaviour")


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
    cliprange: float = setting(0.2, "PPO ratio clipping: the ratio stays in [1 - cliprange, 1 + cliprange]")
    cliprange_low: Optional[float] = setting(None, "lower clip, 1 - cliprange_low (null: cliprange)")
    cliprange_high: Optional[float] = setting(None, "upper clip, 1 + cliprange_high (null: cliprange); DAPO's "
                                                    "clip-higher is 0.28 with 0.2 below")
    delta: Optional[float] = setting(
        None, "two-sided clipping (INTELLECT-2; TRL's delta): the unclipped ratio is capped at delta, so a token "
              "with a negative advantage whose ratio is above delta adds -A x delta, no gradient (null: off; > 1, "
              "INTELLECT-2 uses 4; policy_loss=clip)")
    policy_loss: str = setting(
        "clip", "the per-token policy loss: `clip` (PPO's clipped surrogate), `cispo` (-sg(min(ratio, cispo_cap)) A "
                "log pi: no token's gradient dropped), `sapo` (a soft sigmoid gate instead of the hard clip), `vespo` "
                "(-sg(phi(w)) A log pi, phi a Gamma-shaped weight of the sequence ratio w: vespo_k_*, vespo_lambda_*)")
    importance_sampling_level: str = setting(
        "token", "the ratio pi / pi_old per `token`, or per `sequence` (GSPO: exp of the mean token log-ratio, "
                 "clipped per sequence with sequence_cliprange_low/high)")
    sequence_cliprange_low: float = setting(3e-4, "importance_sampling_level=sequence: lower clip (GSPO's 3e-4)")
    sequence_cliprange_high: float = setting(4e-4, "importance_sampling_level=sequence: upper clip (GSPO's 4e-4)")
    cispo_cap: float = setting(5.0, "policy_loss=cispo: the bound on the (gradient-free) importance weight")
    sapo_temperature_pos: float = setting(1.0, "policy_loss=sapo: the gate's temperature for positive advantages")
    sapo_temperature_neg: float = setting(1.05, "policy_loss=sapo: the gate's temperature for negative advantages "
                                                "(higher: negative updates fade faster)")
    vespo_k_pos: float = setting(2.0, "policy_loss=vespo: phi(w) = exp(lambda) w^k exp(-lambda w)'s k for A >= 0")
    vespo_lambda_pos: float = setting(3.0, "policy_loss=vespo: its lambda for A >= 0")
    vespo_k_neg: float = setting(3.0, "policy_loss=vespo: its k for A < 0")
    vespo_lambda_neg: float = setting(2.0, "policy_loss=vespo: its lambda for A < 0")
    loss_type: str = setting(
        "bnpo", "how per-token losses become one optimizer step's loss: `bnpo` (token mean of each micro-batch), "
                "`grpo` (mean of each sequence's token mean), `dr_grpo` (token sum / (sequences x "
                "response_length)), `dapo` (token sum / the step's tokens over all ranks), `luspo` (token sum / "
                "sequences: GSPO's loss scaled by length); docs/algorithms.md")
    num_ppo_epochs: int = setting(1, "passes over each rollout")
    num_mini_batches: int = setting(1, "optimizer steps per pass")
    gradient_accumulation_steps: int = setting(1, "micro-batches per optimizer step")
    max_tokens_per_micro_batch: Optional[int] = setting(
        None, "micro-batches by token count instead: consecutive sequences up to this many prompt + response tokens "
              "each (replaces gradient_accumulation_steps; the loss types keep their contract)")
    max_grad_norm: Optional[float] = setting(1.0, "gradient clipping through Lightning's `clip_gradients` (null: off)")
    router_aux_loss_coef: float = setting(
        0.001, "TRL's: a mixture-of-experts policy (its config has output_router_logits) trains on loss + this x the "
               "routers' load-balancing loss (transformers' aux_loss) of its training forwards' real tokens, logged "
               "as aux_loss; 0: off; dense models and routers that balance without one (DeepSeek-V3, GLM-4.5): "
               "nothing")
    forward_batch_size: Optional[int] = setting(None, "chunk size of the no-grad logprob forwards (null: all at once)")
    logits_chunk_size: Optional[int] = setting(
        1024, "logprobs from the last hidden states, this many response tokens at a time, through the output layer "
              "(its float32 log-probabilities a block of rows at a time): the (sequences, response_length, vocab) "
              "logits are never held; null: full logits (also used when the output layer carries an adapter, and "
              "for a model that changes its logits after it, such as Gemma 2's softcap or Granite's and Cohere's "
              "scales: a probe before its first chunked forward finds it, with one warning)")
    logits_budget_mib: Optional[float] = setting(
        512.0, "with logits_chunk_size, in the update: the chunks' logits are kept for the backward pass while a "
               "micro-batch's response tokens x vocab x the output layer's bytes per value (4 in float32, 2 in "
               "bfloat16) fit this many MiB, and recomputed there beyond it; null: always recomputed")
    padding_free: bool = setting(
        True, "with logits_chunk_size: the policy and reference forwards run on packed sequences (the real tokens "
              "of several sequences per row, positions restarting), computing no pad token. A model whose attention "
              "would let a packed sequence see the ones before it (OPT, BLOOM) is found by a probe before its first "
              "such forward (one warning) and keeps the padded layout")
    generation_kwargs: Dict[str, Any] = setting(factory=dict, doc="extra `generate()` settings; ones that bias the "
                                                                  "sampled distribution are refused")
    allow_biased_sampling: bool = setting(False, "accept top_k / top_p / min_new_tokens / repetition_penalty ... "
                                                 "anyway")
    rollout_is_cap: Optional[float] = setting(
        2.0, "with an engine that reports its own logprobs (rollout=vllm): each token's policy loss is weighted by "
             "min(pi_old / pi_sampler, this cap), truncated importance sampling for the sampler/trainer mismatch "
             "(null: off; > 1)")
    rollout_is_min: Optional[float] = setting(
        None, "the lower bound of the sampler/trainer ratio (TRL's vllm_importance_sampling_clip_min): `*_truncate` "
              "raises ratios below it to it, `*_mask` drops them (null: no lower bound; below rollout_is_cap)")
    rollout_is_mode: str = setting(
        "token_truncate", "the sampler/trainer correction, as TRL's vllm_importance_sampling_mode computes it: "
                          "`token_truncate` (each token's ratio clamped to [rollout_is_min, cap]), `token_mask` "
                          "(tokens whose ratio leaves that range leave the loss), `sequence_truncate` / "
                          "`sequence_mask` (the same with each sequence's ratio, the product of its tokens'); "
                          "`sequence_geo_truncate` / `sequence_geo_mask`: the geometric mean instead (ours)")
    off_policy_mask_threshold: Optional[float] = setting(
        None, "DeepSeek-V3.2's off-policy sequence masking, as TRL: in every micro-batch, sequences with a negative "
              "advantage whose mean log(pi_sampler / pi_theta) exceeds this leave the policy loss (pi_theta: the "
              "policy being updated; pi_sampler: the engine's logprobs, or pi_old with rollout=hf; null: off)")
    top_entropy_quantile: float = setting(
        1.0, "TRL's (Beyond the 80/20 Rule): only the tokens whose entropy is in the top this fraction of the "
             "micro-batch's response tokens (over all ranks) are in the policy loss; the KL term and the loss's "
             "denominator keep every token (1: every token; 0: the highest-entropy one; the paper uses 0.2)")
    reuse_rollout_forward: bool = setting(
        True, "with 1 epoch x 1 minibatch x 1 micro-batch and no dropout (a Dropout module, or train-mode forwards "
              "that differ), the update's forward runs in the rollout and replaces the old-logprob forward; false "
              "trades that pass for the memory of its graph while the reward scores")
    max_consecutive_nonfinite: int = setting(3, "a step with a non-finite loss or gradient is skipped (counted in "
                                                "`policy/skipped_updates`); this many in a row stop the run")
    rl_steps: Optional[int] = setting(None, "stop after this many RL steps (the CLI's `steps`; null: the Trainer's "
                                            "max_steps, in optimizer steps, decides)")
    max_staleness: Optional[int] = setting(
        None, "asynchronous mode (docs/async.md): a producer thread samples, runs the episodes and scores rollout t "
              "with the weights of RL step t - S while the trainer updates, S = this bound; 0 or null: the "
              "synchronous run (each rollout drawn when it is trained, no producer)")
    async_correction: str = setting(
        "decoupled", "async mode's off-policy correction: `decoupled` (pi_old recomputed by the trainer, the clip "
                     "around it, the behaviour ratio pi_old / pi_sampler weighted by rollout_is_*), `behaviour` "
                     "(pi_old = the sampler's logprobs: the clip around the stale policy, no rollout_is_* weight)")
    sync_ref_model: bool = setting(
        False, "TR-DPO's reference update (TRL's name): every ref_model_sync_steps optimizer steps, reference <- "
               "ref_model_mixup_alpha x policy + (1 - alpha) x reference (with LoRA: alpha 1, a reset)")
    ref_model_mixup_alpha: float = setting(REFERENCE_SYNC_DEFAULTS["ref_model_mixup_alpha"],
                                           "sync_ref_model: the policy's share of the updated reference (1: a copy "
                                           "of the policy)")
    ref_model_sync_steps: int = setting(REFERENCE_SYNC_DEFAULTS["ref_model_sync_steps"],
                                        "sync_ref_model: optimizer steps between updates, a multiple of an RL step's "
                                        "(num_ppo_epochs x num_mini_batches)")
    async_draws: int = setting(
        1, "async mode: rollouts the producer draws at once (at most max_staleness + 1 can), each sampling with its "
           "own copy of the trained weights (LoRA: the adapters; full fine-tuning: a whole copy each), so one "
           "rollout's tool and reward waits overlap the next one's sampling; rollout=hf only")

    def __post_init__(self):
        check_loss_type(self.loss_type, LOSS_TYPES)
        check_choice("policy_loss", self.policy_loss, POLICY_LOSSES)
        check_choice("rollout_is_mode", self.rollout_is_mode, IS_MODES)
        check_number("off_policy_mask_threshold", self.off_policy_mask_threshold, minimum=0, optional=True)
        check_number("rollout_is_min", self.rollout_is_min, minimum=0, strictly=True, optional=True)
        if self.rollout_is_min is not None and self.rollout_is_cap is not None and \
                self.rollout_is_min >= self.rollout_is_cap:
            raise ConfigError(f"algo.rollout_is_min={self.rollout_is_min} must be below algo.rollout_is_cap="
                              f"{self.rollout_is_cap}; the ratio is kept in [rollout_is_min, rollout_is_cap].")
        check_choice("importance_sampling_level", self.importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)
        check_number("max_staleness", self.max_staleness, minimum=0, optional=True, integer=True)
        check_choice("async_correction", self.async_correction, ASYNC_CORRECTIONS)
        check_number("async_draws", self.async_draws, minimum=1, integer=True)
        for name in ("sequence_cliprange_low", "sequence_cliprange_high"):
            check_number(name, getattr(self, name), minimum=0, strictly=True)
            if getattr(self, name) >= 1:
                raise ConfigError(f"algo.{name}={getattr(self, name)} must be below 1: GSPO clips the sequence ratio "
                                  f"to [1 - low, 1 + high] with small ranges (its paper: 3e-4 and 4e-4).")
        check_number("delta", self.delta, optional=True)
        if self.delta is not None and self.delta <= 1:
            raise ConfigError(f"algo.delta={self.delta} caps the unclipped ratio, and at or below 1 it takes the "
                              f"gradient of every token with a negative advantage; set it above 1 + cliprange_high "
                              f"(INTELLECT-2: 4) or null.")
        check_setting_number("algo.top_entropy_quantile", self.top_entropy_quantile, minimum=0, maximum=1)
        check_number("cispo_cap", self.cispo_cap, minimum=0, strictly=True)
        check_number("router_aux_loss_coef", self.router_aux_loss_coef, minimum=0)
        check_number("sapo_temperature_pos", self.sapo_temperature_pos, minimum=0, strictly=True)
        check_number("sapo_temperature_neg", self.sapo_temperature_neg, minimum=0, strictly=True)
        check_vespo(self.vespo_k_pos, self.vespo_lambda_pos, self.vespo_k_neg, self.vespo_lambda_neg)
        if self.policy_loss == "vespo" and self.rollout_is_cap is not None and self.rollout_is_mode.startswith("seq"):
            raise ConfigError(f"algo.rollout_is_mode={self.rollout_is_mode} with policy_loss=vespo: VESPO folds the "
                              f"engine's per-token ratios into its own sequence weight (as TRL, which refuses it too); "
                              f"use rollout_is_mode=token_truncate or token_mask.")
        check_choice("kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        check_shared_settings(self)
        check_reference_sync(self)
        check_unbiased(dict(self.generation_kwargs or {}), self.allow_biased_sampling)  # at build, not sampling
        if self.clip_low > self.clip_high:
            raise ConfigError(f"algo.cliprange_low={self.clip_low} is above algo.cliprange_high={self.clip_high}; "
                              f"clip-higher needs cliprange_high >= cliprange_low (e.g. 0.2 and 0.28).")
        warn_about_reward_kl(self.kl_estimator, self.kl_in_reward)

    @property
    def clip_low(self) -> float:
        return self.cliprange if self.cliprange_low is None else self.cliprange_low

    @property
    def clip_high(self) -> float:
        return self.cliprange if self.cliprange_high is None else self.cliprange_high

    @property
    def kl_in_reward(self) -> bool:
        """Whether -kl_coef * KL is part of the reward (else it is a loss term)."""
        return True


@algorithm("rloo", target="lit_rlhf.algos.RLOOModule")
@dataclass
class RLOOConfig(RLHFConfig):
    rloo_k: int = setting(4, "samples per prompt (K >= 2); each one's baseline is the mean of the other K-1")
    kl_penalty: str = setting(
        "sequence", "`sequence`: one advantage per response. `token`: per-token rewards -beta * KL_t plus the score "
                    "on the last token; token t's advantage is its reward-to-go minus the siblings' mean return")
    normalize_advantage: bool = setting(False, "whiten advantages over the batch")
    mask_truncated_completions: bool = setting(False, "TRL's: responses cut at response_length without the stop token "
                                                      "leave the loss, their KL their reward; their scores stay")

    def __post_init__(self):
        super().__post_init__()
        check_number("rloo_k", self.rloo_k, integer=True)
        if self.rloo_k < 2:
            raise ConfigError(f"algo.rloo_k={self.rloo_k}: RLOO needs at least 2 samples per prompt; set rloo_k >= 2.")
        check_choice("kl_penalty", self.kl_penalty, KL_PENALTIES)


@algorithm("ppo", target="lit_rlhf.algos.PPOModule")
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
        check_choice("critic", self.critic, CRITIC_KINDS)
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


@algorithm("reinforce_pp", target="lit_rlhf.algos.ReinforcePPModule")
@dataclass
class ReinforcePPConfig(RLHFConfig):
    samples_per_prompt: int = setting(4, "sequences per prompt (baseline=group needs >= 2)")
    baseline: str = setting("group", "`group`: subtract each group's mean score first (REINFORCE++-baseline); "
                                     "`none`: plain REINFORCE++ (the batch whitening is the only baseline)")
    kl_clamp: Optional[float] = setting(None, "clamp each token's KL to [-c, c] before the penalty (OpenRLHF: 10; "
                                              "null: off)")
    reward_clamp: Optional[float] = setting(None, "clamp the (baseline-subtracted) score to [-c, c] before the "
                                                  "reward-to-go (OpenRLHF: 10; null: off)")

    def __post_init__(self):
        super().__post_init__()
        check_choice("baseline", self.baseline, BASELINES)
        check_number("kl_clamp", self.kl_clamp, minimum=0, strictly=True, optional=True)
        check_number("reward_clamp", self.reward_clamp, minimum=0, strictly=True, optional=True)
        check_number("samples_per_prompt", self.samples_per_prompt, minimum=1, integer=True)
        if self.baseline == "group" and self.samples_per_prompt < 2:
            raise ConfigError(f"algo.samples_per_prompt={self.samples_per_prompt} with algo.baseline=group: a group "
                              f"baseline needs at least 2 samples per prompt; set samples_per_prompt >= 2 or "
                              f"baseline=none.")
