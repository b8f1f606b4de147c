"""Sampling loops against each other: generate() with its default dynamic KV cache and with a static
KV cache (torch.compile of the decoding step is not measured: generate() compiles it automatically
only on CUDA, and compiling on this CPU was not tried).

    python bench/generation.py [--models tiny pythia-160m]     # ~2 minutes on 2 CPU cores

The benchmark workload's generation (32 sequences = 8 prompts x K=4, 5-token prompts, exactly 32
new tokens, temperature 0.7) on the LoRA-wrapped policy, as lit_rlhf samples; medians of REPS runs
after a warm-up run. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import workload as W
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

REPS = 3


def sample(model, batch, **settings) -> torch.Tensor:
    return model.generate(**batch, do_sample=True, temperature=W.TEMPERATURE, top_k=0, top_p=1.0,
                          max_new_tokens=W.NEW_TOKENS, min_new_tokens=W.NEW_TOKENS, **settings)


def timed(model, batch, **settings) -> float:
    sample(model, batch, **settings)  # warm-up (and compilation)
    seconds = []
    for _ in range(REPS):
        start = time.perf_counter()
        sample(model, batch, **settings)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["tiny", "pythia-160m"])
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = ["| model | sampling loop | s per 32 x 32 tokens | tokens/s | vs generate() |", "|---|---|---|---|---|"]
    for name in args.models:
        path = W.model_path(name)
        tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left", truncation_side="left")
        tokenizer.pad_token = "<|padding|>"
        prompts = W.training_prompts()[: W.PROMPTS_PER_STEP]
        batch = tokenizer(prompts, return_tensors="pt", padding=True, truncation=True, max_length=W.PROMPT_TOKENS)
        batch = {k: v.repeat_interleave(W.SAMPLES_PER_PROMPT, 0) for k, v in batch.items()}
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(path), LoraConfig(task_type="CAUSAL_LM", **W.LORA))
        model.eval()
        loops = {"generate(), dynamic cache": {}, "generate(), static cache": {"cache_implementation": "static"}}
        tokens = W.PROMPTS_PER_STEP * W.SAMPLES_PER_PROMPT * W.NEW_TOKENS
        with torch.no_grad():
            baseline = None
            for loop, settings in loops.items():
                seconds = timed(model, batch, **settings)
                baseline = baseline or seconds
                rows.append(f"| {name} | {loop} | {seconds:.3f} | {tokens / seconds:.0f} | {baseline / seconds:.2f}x |")
                print(rows[-1], flush=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
