"""What sharing a prompt's prefill among its K samples saves (rollout.shared_prefill), against K prefills.

    python bench/shared_prefill.py       # ~3 min on 2 CPU cores; writes bench/results/shared_prefill.{md,json}

HFEngine's generate() on the LoRA-wrapped policy, as rollouts call it: 8 distinct prompts x K samples, prompts of
P tokens (random token ids), exactly 32 new tokens, temperature 0.7; the tiny default and the pythia-160m shape
(random weights, bench/workload.py). Medians of 3 calls after a warm-up call, in one process, the two settings
alternating; generation tokens/s = new tokens / seconds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import workload as W
from peft import LoraConfig, get_peft_model
from results_blocks import publish
from transformers import AutoModelForCausalLM, GenerationConfig

from lit_rlhf.rollout import HFEngine

PROMPTS, NEW_TOKENS, REPS = 8, 32, 3


def seconds(engine: HFEngine, model, queries, mask, config, siblings: int) -> float:
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.no_grad():
        engine.generate(None, model, queries, mask, config, siblings)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["tiny", "pythia-160m"])
    parser.add_argument("--prompt-tokens", type=int, nargs="+", default=[16, 128])
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8])
    args = parser.parse_args()
    engine, rows = HFEngine(), []
    config = GenerationConfig(do_sample=True, temperature=W.TEMPERATURE, top_k=0, top_p=1.0, max_new_tokens=NEW_TOKENS,
                              min_new_tokens=NEW_TOKENS, pad_token_id=1, eos_token_id=0)
    for name in args.models:
        model = AutoModelForCausalLM.from_pretrained(W.model_path(name))
        model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **W.LORA)).eval()
        vocab = model.config.vocab_size
        for p in args.prompt_tokens:
            for k in args.k:
                gen = torch.Generator().manual_seed(0)
                prompts = torch.randint(2, min(vocab, 900), (PROMPTS, p), generator=gen)
                queries = prompts.repeat_interleave(k, dim=0)  # N,P
                mask = torch.ones_like(queries)
                times = {1: [], k: []}
                seconds(engine, model, queries, mask, config, k)  # warm-up
                for _ in range(REPS):
                    for siblings in (1, k):
                        times[siblings].append(seconds(engine, model, queries, mask, config, siblings))
                separate, shared = statistics.median(times[1]), statistics.median(times[k])
                rows.append({"model": name, "prompt_tokens": p, "k": k, "separate_s": separate, "shared_s": shared,
                             "times": {str(s): t for s, t in times.items()}})
                print(rows[-1], flush=True)
    lines = [f"generate() of {PROMPTS} prompts x K samples, {NEW_TOKENS} new tokens, LoRA, float32, CPU; medians of "
             f"{REPS} calls; `python bench/shared_prefill.py`.", "",
             "| model | prompt tokens | K | K prefills s | shared prefill s | speed-up | generation tokens/s, shared |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        tokens = PROMPTS * r["k"] * NEW_TOKENS
        lines.append(f"| {r['model']} | {r['prompt_tokens']} | {r['k']} | {r['separate_s']:.3f} | {r['shared_s']:.3f} "
                     f"| {r['separate_s'] / r['shared_s']:.2f}x | {tokens / r['shared_s']:.0f} |")
    publish("shared_prefill", {"rows": rows}, lines, ["docs/rollout.md"])


if __name__ == "__main__":
    main()
