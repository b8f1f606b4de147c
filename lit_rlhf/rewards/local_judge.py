"""A local Hugging Face causal LM writing judgements (greedy), for LLMJudge without an endpoint."""

from __future__ import annotations

import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.models.loading import TORCH_LAYERS, from_pretrained, load_report_held, weights_started_at_random
from lit_rlhf.models.tokenizer import load_tokenizer


class LocalJudgeModel:
    def __init__(self, name_or_path: str, max_new_tokens: int, batch_size: int, device: str | None,
                 key: str = "reward"):
        from transformers import AutoModelForCausalLM

        self.tokenizer = load_tokenizer(name_or_path, key=f"{key}.model")  # left padding, a pad token
        with load_report_held():  # said below when it matters
            self.model, loading = from_pretrained(AutoModelForCausalLM.from_pretrained, name_or_path, "judge model",
                                                  key=f"{key}.model", output_loading_info=True, **TORCH_LAYERS)
        if line := weights_started_at_random(self.model, loading["missing_keys"], f"{key}.model", name_or_path):
            raise ConfigError(line)
        self.model.eval().requires_grad_(False)
        if device:
            self.model.to(device)
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.chat = getattr(self.tokenizer, "chat_template", None) is not None

    def as_input(self, text: str) -> str:
        if not self.chat:
            return text
        return self.tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                  add_generation_prompt=True)

    @torch.no_grad()
    def generate(self, texts: list[str]) -> list[str]:
        judgements = []
        for start in range(0, len(texts), self.batch_size):
            batch = [self.as_input(t) for t in texts[start:start + self.batch_size]]
            encoded = self.tokenizer(batch, return_tensors="pt", padding=True).to(self.model.device)
            # the judge's own sampling must not move the training's random state
            with torch.random.fork_rng(devices=[]):
                out = self.model.generate(**encoded, max_new_tokens=self.max_new_tokens, do_sample=False,
                                          pad_token_id=self.tokenizer.pad_token_id)
            judgements += self.tokenizer.batch_decode(out[:, encoded["input_ids"].shape[1]:],
                                                      skip_special_tokens=True)
        return judgements
