"""HFEngine: sampling with Hugging Face `generate` on the module's own policy (`rollout=hf`, the default).

Shapes: N sequences, P prompt length, R response length.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import GenerationConfig

from lit_rlhf.errors import ConfigError
from lit_rlhf.ops import truncate_after_stop
from lit_rlhf.rollout.engine import RolloutEngine, Samples, repeat_prompts
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
    def sample(self, module: Any, batch: dict[str, torch.Tensor], samples_per_prompt: int,
               from_reference: bool = False, greedy: bool = False) -> Samples:
        queries, query_mask, prompt_index = repeat_prompts(batch, samples_per_prompt)  # N,P ; N,P ; N
        config = self.generation_config
        if greedy:
            config = GenerationConfig(**{**config.to_dict(), "do_sample": False})
        was_training = module.policy.training
        module.policy.eval()
        try:
            if from_reference:
                with module.reference.active() as reference:
                    sequences = self.generate(module, reference, queries, query_mask, config)  # N,P+R'
            else:
                sequences = self.generate(module, module.policy, queries, query_mask, config)  # N,P+R'
        finally:
            module.policy.train(was_training)
        responses = sequences[:, queries.shape[1]:]  # N,R'  (R' < R when every sequence stopped early)
        missing = module.hparams.response_length - responses.shape[1]
        responses = torch.nn.functional.pad(responses, (0, missing), value=module.tokenizer.pad_token_id)  # N,R
        responses, response_mask = truncate_after_stop(responses, module.stop_token_id, module.tokenizer.pad_token_id)
        return Samples(queries, query_mask, responses, response_mask, prompt_index)

    def generate(self, module: Any, model: torch.nn.Module, queries: torch.Tensor, query_mask: torch.Tensor,
                 config: GenerationConfig) -> torch.Tensor:
        try:
            return model.generate(input_ids=queries, attention_mask=query_mask, generation_config=config,
                                  synced_gpus=self.lockstep)  # N,P+R'
        except RuntimeError as err:
            if "probability tensor contains" not in str(err):
                raise
            raise ConfigError(f"sampling failed at RL step {module.rl_step}: the policy's logits are not finite; "
                              f"lower algo.optimizer.lr (and keep algo.max_grad_norm), or resume from an earlier "
                              f"checkpoint.") from err
