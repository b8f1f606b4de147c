"""The GRPO floor: one GRPO step (dapo loss, k3 KL term) in plain PyTorch + transformers (+ peft), no framework.

    python bench/grpo_floor.py --model tiny --beta 0.04 [--full] --steps 5 --warmup 1    # prints one JSON line

Generate K completions per prompt, policy forward with grad (one update per rollout: the old logprobs are its
detached logprobs, ratio 1), reference forward when beta > 0 (adapters off with LoRA; a frozen copy with full
fine-tuning), VADER reward, group-normalized advantages, clipped surrogate + beta x k3, token mean over the step
(dapo), backward, clip, AdamW. bench/grpo_vs_trl.py compares it with lit_rlhf's GRPOModule and TRL's GRPOTrainer.
"""

from __future__ import annotations

import contextlib
import copy
import json

import torch
import workload as W
from floor import (
    backward_and_step,
    load_tokenizer_and_model,
    measure_steps,
    prompt_batch,
    sample,
    step_arguments,
    token_logprobs,
)
from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

CLIP_EPSILON = 0.2  # TRL's epsilon


def grpo_loss(logprobs, ref_logprobs, scores, response_mask, k: int, beta: float) -> torch.Tensor:
    """Group-normalized advantages, clipped surrogate (ratio 1 with the logprobs' gradient) + beta x k3, token mean
    over the step (dapo). logprobs, ref_logprobs, response_mask: (N,R); scores: (N,), K per group. -> scalar"""
    grouped = scores.view(-1, k)  # B,K
    advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1, 1)
    ratio = torch.exp(logprobs - logprobs.detach())  # N,R
    per_token = -torch.min(ratio * advantages, ratio.clamp(1 - CLIP_EPSILON, 1 + CLIP_EPSILON) * advantages)
    if beta > 0:
        log_ratio = ref_logprobs - logprobs
        per_token = per_token + beta * (torch.exp(log_ratio) - log_ratio - 1)  # k3
    return (per_token * response_mask).sum() / response_mask.sum()


def main() -> None:
    parser = step_arguments()
    parser.add_argument("--beta", type=float, default=0.04, help="the KL coefficient (0: no reference)")
    parser.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    args = parser.parse_args()
    memory_marks = {"after_imports": W.peak_rss_mib()}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    tokenizer, model = load_tokenizer_and_model(args.model, args.dtype, device, lora=not args.full)
    reference = None
    if args.beta > 0 and args.full:
        reference = copy.deepcopy(model).eval().requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=W.LR)
    analyzer = SentimentIntensityAnalyzer()
    prompts = W.training_prompts()
    order = torch.randperm(len(prompts)).tolist()
    k = W.SAMPLES_PER_PROMPT

    def reference_logprobs(inputs) -> torch.Tensor:
        adapters_off = model.disable_adapter() if reference is None else contextlib.nullcontext()
        with torch.no_grad(), adapters_off:
            return token_logprobs(reference or model, *inputs)  # N,R

    def grpo_step(step: int, timer: W.PhaseTimer) -> int:
        batch = [prompts[i] for i in order[step * W.PROMPTS_PER_STEP:(step + 1) * W.PROMPTS_PER_STEP]]
        queries, query_mask = prompt_batch(tokenizer, batch, k, device)
        with timer("generation"):
            inputs, response_mask = sample(model, tokenizer, queries, query_mask, args.new_tokens, args.mixed)
        with timer("policy forward/backward"):
            logprobs = token_logprobs(model, *inputs)  # N,R
        ref_logprobs = None
        if args.beta > 0:
            with timer("reference forward"):
                ref_logprobs = reference_logprobs(inputs)  # N,R
        with timer("reward"):
            texts = tokenizer.batch_decode(inputs[-1], skip_special_tokens=True)
            scores = torch.tensor([analyzer.polarity_scores(t)["compound"] for t in texts], device=device)
        loss = grpo_loss(logprobs, ref_logprobs, scores, response_mask, k, args.beta)
        backward_and_step(loss, trainable, optimizer, timer)
        return int(response_mask.sum())

    memory_marks["before_steps"] = W.peak_rss_mib()
    report = measure_steps(grpo_step, args, device, memory_marks, "floor", "grpo")
    print(json.dumps({**report, "beta": args.beta, "full": args.full}))


if __name__ == "__main__":
    main()
