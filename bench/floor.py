"""The floor: the benchmark's RLOO step in plain PyTorch + transformers + peft, no framework around it.

    python bench/floor.py --model tiny --steps 5 --warmup 1     # prints one JSON line

Generate K completions per prompt, policy forward with grad, reference forward (adapters off),
reward, leave-one-out advantages, loss, backward, clip, AdamW step. bench/run.py compares it with
lit_rlhf on the same workload (bench/workload.py).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import torch
import workload as W
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer


def token_logprobs(model, input_ids, attention_mask, position_ids, responses):
    """log p of each response token at temperature T. -> (N,R)"""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False).logits[:, -responses.shape[1] - 1:-1]  # N,R,V
    return torch.log_softmax(logits.float() / W.TEMPERATURE, -1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)


def prompt_batch(tokenizer, prompts: list[str], k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's prompts, cut to their last PROMPT_TOKENS tokens, left-padded, each repeated k times. -> (N,P) x2"""
    enc = tokenizer(prompts, return_tensors="pt", padding=True, truncation=True, max_length=W.PROMPT_TOKENS).to(device)
    return enc.input_ids.repeat_interleave(k, 0), enc.attention_mask.repeat_interleave(k, 0)


def sample(model, tokenizer, queries, query_mask, new_tokens: int, mixed: bool):
    """Sample a response per query (exactly new_tokens long unless mixed). -> the policy forward's inputs
    (input_ids, attention_mask, position_ids, responses) and the response mask (N,R), up to the first EOS."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    model.eval()
    with torch.no_grad():
        sequences = model.generate(input_ids=queries, attention_mask=query_mask, do_sample=True,
                                   temperature=W.TEMPERATURE, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
                                   min_new_tokens=0 if mixed else new_tokens, eos_token_id=eos,
                                   pad_token_id=pad)  # N,P+R
    model.train()
    responses = sequences[:, queries.shape[1]:]  # N,R
    is_eos = (responses == eos).int()
    after_eos = is_eos.cumsum(1) - is_eos > 0  # N,R
    response_mask = ~after_eos  # up to and including the first EOS
    responses = responses.masked_fill(after_eos, pad)
    attention_mask = torch.cat([query_mask, response_mask.long()], 1)
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
    return (torch.cat([queries, responses], 1), attention_mask, position_ids, responses), response_mask


def load_tokenizer_and_model(name: str, dtype: str, device: torch.device, lora: bool = True):
    """The tokenizer (left padding, pythia's pad token) and the policy: LoRA on the base model, or the model itself."""
    path = W.model_path(name)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left", truncation_side="left")
    tokenizer.pad_token = "<|padding|>"  # pythia's pad token, distinct from EOS (as lit_rlhf picks it)
    # use_kernels=False: transformers' own layers, which lit_rlhf runs (from 5.25 transformers would fetch Hub kernels)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), use_kernels=False).to(device)
    return tokenizer, get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **W.LORA)) if lora else model


def step_arguments() -> argparse.ArgumentParser:
    """The arguments every floor takes: model, steps, warm-up steps, dtype, new tokens, mixed lengths."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--new-tokens", type=int, default=W.NEW_TOKENS)
    parser.add_argument("--mixed", action="store_true", help="no forced length: responses stop at the stop token")
    parser.add_argument("--warmup-new-tokens", type=int, default=None,
                        help="new tokens of the warm-up steps (default: --new-tokens); a plain loop compiles nothing, "
                             "so a short warm-up initializes what a long one would")
    return parser


def main() -> None:
    parser = step_arguments()
    args = parser.parse_args()
    memory_marks = {"after_imports": W.peak_rss_mib()}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    tokenizer, model = load_tokenizer_and_model(args.model, args.dtype, device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=W.LR)
    analyzer = SentimentIntensityAnalyzer()
    prompts = W.training_prompts()
    order = torch.randperm(len(prompts)).tolist()
    eos, k = tokenizer.eos_token_id, W.SAMPLES_PER_PROMPT

    def rloo_step(step: int, timer: W.PhaseTimer) -> int:
        batch = [prompts[i] for i in order[step * W.PROMPTS_PER_STEP:(step + 1) * W.PROMPTS_PER_STEP]]
        queries, query_mask = prompt_batch(tokenizer, batch, k, device)
        with timer("generation"):
            inputs, response_mask = sample(model, tokenizer, queries, query_mask, args.new_tokens, args.mixed)
        responses = inputs[-1]
        with timer("policy forward/backward"):
            logprobs = token_logprobs(model, *inputs)  # N,R
        with timer("reference forward"), torch.no_grad(), model.disable_adapter():
            ref_logprobs = token_logprobs(model, *inputs)  # N,R
        with timer("reward"):
            texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
            tokenizer.batch_decode(queries, skip_special_tokens=True)  # the reward API takes prompts too
            scores = torch.tensor([analyzer.polarity_scores(t)["compound"] for t in texts], device=device)
            scores = scores - 1.0 * ~(responses == eos).any(1)  # missing-EOS penalty
        kl = ((logprobs.detach() - ref_logprobs) * response_mask).sum(1)  # N
        rlhf_reward = (scores - W.KL_COEF * kl).view(-1, k)  # B,K
        baseline = (rlhf_reward.sum(1, keepdim=True) - rlhf_reward) / (k - 1)  # B,K
        advantages = (rlhf_reward - baseline).view(-1, 1)  # N,1
        loss = -(advantages * logprobs * response_mask).sum() / response_mask.sum()
        backward_and_step(loss, trainable, optimizer, timer)
        return int(response_mask.sum())

    memory_marks["before_steps"] = W.peak_rss_mib()
    print(json.dumps(measure_steps(rloo_step, args, device, memory_marks, "floor", "rloo")))


def backward_and_step(loss: torch.Tensor, trainable: list, optimizer, timer: W.PhaseTimer) -> None:
    """Backward, gradient clipping, AdamW step."""
    with timer("policy forward/backward"):
        loss.backward()
    with timer("optimizer"):
        torch.nn.utils.clip_grad_norm_(trainable, W.MAX_GRAD_NORM)
        optimizer.step()
        optimizer.zero_grad()


def measure_steps(one_step, args, device: torch.device, memory_marks: dict, impl: str, algo: str) -> dict:
    """Run args.warmup + args.steps steps of one_step(step, timer) -> response tokens; report the measured ones."""
    step_times, cpu_times, phases, tokens = [], [], defaultdict(list), []
    new_tokens = args.new_tokens
    for step in range(args.warmup + args.steps):
        warming_up = step < args.warmup and args.warmup_new_tokens is not None
        args.new_tokens = args.warmup_new_tokens if warming_up else new_tokens  # what one_step samples
        timer = W.PhaseTimer(device)
        start, cpu_start = time.perf_counter(), time.process_time()
        response_tokens = one_step(step, timer)
        W.sync(device)
        if step >= args.warmup:
            step_times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
            tokens.append(response_tokens)
            for name, seconds in timer.seconds.items():
                phases[name].append(seconds)
    return W.report(impl, args.model, algo, step_times, cpu_times, phases, tokens, device, memory_marks)

if __name__ == "__main__":
    main()
