"""The names a setting may take whose maths lives in lit_rlhf.ops: kept here, importing nothing, so that an app
checks `algo.loss_type=...` and the like before it imports torch (lit_rlhf.ops imports them from here)."""

LOSS_TYPES = ("bnpo", "grpo", "dr_grpo", "dapo", "luspo")  # how a loss is averaged over tokens (ops/losses.py)
POLICY_LOSSES = ("clip", "cispo", "sapo", "vespo")  # ops/policy_losses.py
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")  # the ratio per token, or GSPO's per sequence
KL_ESTIMATORS = ("k1", "k2", "k3")  # ops/kl.py
# TRL's vllm_importance_sampling_mode names compute TRL's numbers; sequence_geo_* is this library's variant
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask", "sequence_geo_truncate",
            "sequence_geo_mask")
