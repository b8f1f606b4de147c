"""Pure tensor maths: no Lightning, no transformers."""

from lit_rlhf.choices import IS_MODES, KL_ESTIMATORS, LOSS_TYPES  # the settings' names, torch-free
from lit_rlhf.ops.advantages import (
    discounted_reverse_cumsum,
    gae_advantages,
    global_masked_whiten,
    group_all_equal,
    group_mean,
    group_normalized_sum,
    group_std,
    identity_sum,
    leave_one_out_baseline,
    place_score_on_last_token,
    reward_to_go,
    rloo_advantages,
)
from lit_rlhf.ops.importance import (
    importance_weights,
    off_policy_sequences,
    sampler_mismatch_stats,
    truncated_is_weights,
)
from lit_rlhf.ops.kl import bias_corrected_kl, kl_per_token
from lit_rlhf.ops.logprobs import entropy_from_logits, logprobs_and_entropy, logprobs_from_logits
from lit_rlhf.ops.losses import LossShare, aggregate_loss, clipped_policy_loss, clipped_value_loss
from lit_rlhf.ops.masks import (
    contains_stop,
    first_stop_index,
    gather_tokens,
    high_entropy_mask,
    masked_mean,
    masked_var,
    masked_whiten,
    model_tokens_first,
    response_mask_from_stop,
    scatter_tokens,
    truncate_after_stop,
)
from lit_rlhf.ops.policy_losses import vespo_weights
from lit_rlhf.ops.shaping import overlong_penalty

__all__ = [
    "IS_MODES", "KL_ESTIMATORS", "LOSS_TYPES", "LossShare", "aggregate_loss", "bias_corrected_kl",
    "clipped_policy_loss", "clipped_value_loss", "contains_stop", "discounted_reverse_cumsum", "entropy_from_logits",
    "first_stop_index", "gae_advantages", "gather_tokens", "global_masked_whiten", "group_all_equal", "group_mean",
    "group_normalized_sum", "group_std", "high_entropy_mask", "identity_sum", "importance_weights", "kl_per_token",
    "leave_one_out_baseline", "logprobs_and_entropy", "logprobs_from_logits", "masked_mean", "masked_var",
    "masked_whiten", "model_tokens_first", "off_policy_sequences", "overlong_penalty", "place_score_on_last_token",
    "response_mask_from_stop", "reward_to_go", "rloo_advantages", "sampler_mismatch_stats", "scatter_tokens",
    "truncate_after_stop", "truncated_is_weights", "vespo_weights",
]
