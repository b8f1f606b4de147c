"""Sampling settings checked when a module is built: generate() settings that lit_rlhf's own settings own, and
ones that bias sampling away from softmax(logits / T) (refused unless algo.allow_biased_sampling)."""

from __future__ import annotations

from typing import Any

from lit_rlhf.errors import ConfigError

# Settings that make generate() sample from a distribution other than softmax(logits / T).
NEUTRAL_VALUES = {
    "top_k": (None, 0), "top_p": (None, 1.0), "min_length": (None, 0, -1), "min_new_tokens": (None, 0),
    "typical_p": (None, 1.0), "min_p": (None, 0.0), "epsilon_cutoff": (None, 0.0), "eta_cutoff": (None, 0.0),
    "repetition_penalty": (None, 1.0), "no_repeat_ngram_size": (None, 0), "bad_words_ids": (None,),
    "suppress_tokens": (None,), "begin_suppress_tokens": (None,), "forced_eos_token_id": (None,),
    "num_beams": (None, 1), "num_beam_groups": (None, 1), "penalty_alpha": (None,), "diversity_penalty": (None, 0.0),
    "guidance_scale": (None, 1.0), "sequence_bias": (None,), "force_words_ids": (None,), "constraints": (None,),
    "encoder_repetition_penalty": (None, 1.0), "encoder_no_repeat_ngram_size": (None, 0), "top_h": (None,),
    "exponential_decay_length_penalty": (None,), "forced_bos_token_id": (None,), "watermarking_config": (None,),
    "dola_layers": (None,), "max_time": (None,), "token_healing": (None, False),
}
SAMPLES_PER_PROMPT = "algo.rloo_k (RLOO), algo.num_generations (GRPO) or algo.samples_per_prompt (PPO, REINFORCE++)"
# generate() settings that lit_rlhf's own settings set: given in generation_kwargs, they would sample other
# responses than the logprobs, masks and batch shapes describe (-> the setting that owns each).
OWNED = {
    "temperature": "set algo.temperature instead (the logprobs divide by the same temperature)",
    "do_sample": "rollouts always sample (greedy responses have no distribution to train)",
    "max_new_tokens": "set algo.response_length instead", "max_length": "set algo.response_length instead",
    "eos_token_id": "set algo.stop_token instead", "stop_strings": "set algo.stop_token instead",
    "pad_token_id": "the tokenizer's pad token is used", "bos_token_id": "the tokenizer's is used",
    "num_return_sequences": f"set {SAMPLES_PER_PROMPT} instead",
    **{key: "the rollout engine reads what it needs" for key in (
        "return_dict_in_generate", "output_scores", "output_logits", "output_attentions", "output_hidden_states")},
}
FAQ_REASON = ("the policy would not sample from the distribution its logprobs describe, so the KL to the "
              "reference can go negative and be exploited as reward (TRL training FAQ, 'Why is the "
              "KL-divergence negative')")


def check_unbiased(generation_kwargs: dict[str, Any], allow_biased_sampling: bool) -> None:
    """Refuses generation_kwargs that lit_rlhf's settings own (always) and ones that bias sampling (unless
    allow_biased_sampling)."""
    owned = [key for key in generation_kwargs if key in OWNED]
    if owned:
        raise ConfigError(f"algo.generation_kwargs.{owned[0]}={generation_kwargs[owned[0]]!r} is set by lit_rlhf, not "
                          f"by generation_kwargs; remove it: {OWNED[owned[0]]}.")
    biased = {k: v for k, v in generation_kwargs.items() if k in NEUTRAL_VALUES and v not in NEUTRAL_VALUES[k]}
    if biased and not allow_biased_sampling:
        raise ConfigError(f"algo.generation_kwargs {biased} bias sampling: {FAQ_REASON}. Remove them, or set "
                          f"algo.allow_biased_sampling=true to accept that.")
