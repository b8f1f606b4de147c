"""HFEngine: sampling with Hugging Face `generate` on the module's own policy (`rollout=hf`, the default).

Shapes: N sequences, P prompt length, R response length.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import GenerationConfig

from lit_rlhf.errors import ConfigError
from lit_rlhf.rollout.engine import RolloutEngine, left_pad
from lit_rlhf.rollout.sampling import pure_sampling_config


class HFEngine(RolloutEngine):
    """`generate()` on the policy (or on the reference: adapters disabled, or its frozen copy), pure sampling
    from softmax(logits / temperature); the policy is in eval mode (no dropout) while it samples."""

    def __init__(self):
        self.generation_config: GenerationConfig | None = None

    def setup(self, module: Any) -> None:
        hp = module.hparams
        self.generation_config = pure_sampling_config(
            hp.response_length, hp.temperature, module.stop_token_id, module.tokenizer.pad_token_id,
            hp.generation_kwargs, hp.allow_biased_sampling)

    @torch.no_grad()
    def generate_turn(self, module: Any, contexts: list[list[int]], max_new_tokens: int, from_reference: bool,
                      greedy: bool) -> list[tuple[list[int], None]]:
        input_ids, attention_mask = left_pad(contexts, module.tokenizer.pad_token_id, module.device)  # N,L ; N,L
        config = GenerationConfig(**{**self.generation_config.to_dict(), "max_new_tokens": max_new_tokens,
                                     **({"do_sample": False} if greedy else {})})
        was_training = module.policy.training
        module.policy.eval()
        try:
            if from_reference:
                with module.reference.active() as reference:
                    sequences = self.generate(module, reference, input_ids, attention_mask, config)  # N,L+T
            else:
                sequences = self.generate(module, module.policy, input_ids, attention_mask, config)  # N,L+T
        finally:
            module.policy.train(was_training)
        return [(row.tolist(), None) for row in sequences[:, input_ids.shape[1]:]]

    def generate(self, module: Any, model: torch.nn.Module, queries: torch.Tensor, query_mask: torch.Tensor,
                 config: GenerationConfig) -> torch.Tensor:
        try:
            return model.generate(input_ids=queries, attention_mask=query_mask, generation_config=config,
                                  synced_gpus=self.synced_generation)  # N,P+R'
        except RuntimeError as err:
            if "probability tensor contains" not in str(err):
                raise
            raise ConfigError(f"sampling failed at RL step {module.rl_step}: the policy's logits are not finite; "
                              f"lower algo.optimizer.lr (and keep algo.max_grad_norm), or resume from an earlier "
                              f"checkpoint.") from err
