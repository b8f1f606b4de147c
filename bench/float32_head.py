"""What model.cast_lm_head_to_fp32 changes in the logprobs of a bfloat16 policy, on the embedded trained models.

    python bench/float32_head.py     # under a minute on 2 CPU cores

For each model, 128 responses are sampled in float32 (generate(), the task's temperature and length) from its task's
prompts; their response tokens are then scored, as training scores them (chunked logprobs, padding-free), by the same
weights loaded three ways: float32, bfloat16, and bfloat16 with the float32 output layer. Reported, over the response
tokens: the absolute difference of each bfloat16 logprob to the float32 one (mean, 99th percentile, max). Writes
bench/results/float32_head.md and .json and the table into docs/performance.md.
"""

from __future__ import annotations

import json

import torch
from command_line import takes_no_options
from results_blocks import ROOT, publish

from lit_rlhf.models import load_policy, load_tokenizer
from lit_rlhf.models.forwards import last_tokens_logprobs_and_entropy, sequence_inputs
from lit_rlhf.ops.masks import truncate_after_stop

MODELS = {  # asset: (prompts, response length, temperature), the task's settings
    "tiny-arithmetic": ("arithmetic", 10, 0.7),
    "tiny-calculator-teacher-large": ("calculator", 24, 1.0),
}
SEQUENCES = 128
VARIANTS = {"bfloat16": False, "bfloat16, float32 output layer": True}  # label: model.cast_lm_head_to_fp32


def sampled(path: str, prompts_of: str, length: int, temperature: float, tokenizer):
    """Prompts (left-padded) and float32 samples of the model at path: queries, query_mask, responses, response_mask."""
    rows = [json.loads(line) for line in (ROOT / "lit_rlhf" / "data" / prompts_of / "prompts.jsonl").open()]
    tokenizer.padding_side = "left"
    batch = tokenizer([row["prompt"] for row in rows[:SEQUENCES]], return_tensors="pt", padding=True)
    model, _ = load_policy(path, tokenizer, dtype="float32", lora=None)
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(**batch, do_sample=True, temperature=temperature, top_k=0, max_new_tokens=length,
                             pad_token_id=tokenizer.pad_token_id)
    responses, response_mask = truncate_after_stop(out[:, batch["input_ids"].shape[1]:], tokenizer.eos_token_id,
                                                   tokenizer.pad_token_id)
    return batch["input_ids"], batch["attention_mask"], responses, response_mask


def logprobs(model, sequences, temperature: float) -> torch.Tensor:
    """The response tokens' logprobs, as the RL forwards compute them (chunks of 1024 tokens). -> (N,R)"""
    responses, response_mask = sequences[2:]
    with torch.no_grad():
        return last_tokens_logprobs_and_entropy(model, sequence_inputs(*sequences), responses, response_mask,
                                                temperature, 1024, with_entropy=False)[0]


def stats(diff: torch.Tensor) -> dict:
    diff = diff.abs().double()
    return {"mean": float(diff.mean()), "p99": float(diff.quantile(0.99)), "max": float(diff.max())}


def main() -> None:
    torch.set_num_threads(1)  # the same numbers on any machine of the same kernels
    results = []
    for asset, (prompts_of, length, temperature) in MODELS.items():
        path = str(ROOT / "lit_rlhf" / "assets" / asset)
        tokenizer = load_tokenizer(path)
        sequences = sampled(path, prompts_of, length, temperature, tokenizer)
        real = sequences[3]
        float32, _ = load_policy(path, tokenizer, dtype="float32", lora=None)
        exact = logprobs(float32, sequences, temperature)
        for label, head in VARIANTS.items():
            model, _ = load_policy(path, tokenizer, dtype="bfloat16", lora=None, cast_lm_head_to_fp32=head)
            results.append({"model": asset, "variant": label, "tokens": int(real.sum()),
                            "to_float32": stats((logprobs(model, sequences, temperature) - exact)[real])})
    lines = [f"{SEQUENCES} sampled responses per model; |logprob - the float32 weights' logprob| of their response "
             f"tokens, in nats; `python bench/float32_head.py`.", "",
             "| model (response tokens) | weights | mean | 99th percentile | max |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['model']} ({r['tokens']}) | {r['variant']} | {r['to_float32']['mean']:.2e} | "
                     f"{r['to_float32']['p99']:.2e} | {r['to_float32']['max']:.2e} |")
    publish("float32_head", {"runs": results}, lines, ["docs/performance.md"])


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
