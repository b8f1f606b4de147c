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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--new-tokens", type=int, default=W.NEW_TOKENS)
    parser.add_argument("--mixed", action="store_true", help="no forced length: responses stop at the stop token")
    args = parser.parse_args()
    memory_marks = {"after_imports": W.peak_rss_mib()}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    path = W.model_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left", truncation_side="left")
    tokenizer.pad_token = "<|padding|>"  # pythia's pad token, distinct from EOS (as lit_rlhf picks it)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, args.dtype)).to(device)
    model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **W.LORA))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=W.LR)
    analyzer = SentimentIntensityAnalyzer()
    prompts = W.training_prompts()
    order = torch.randperm(len(prompts)).tolist()
    eos, pad, k = tokenizer.eos_token_id, tokenizer.pad_token_id, W.SAMPLES_PER_PROMPT

    memory_marks["before_steps"] = W.peak_rss_mib()
    step_times, cpu_times, phases, tokens = [], [], defaultdict(list), []
    for step in range(args.warmup + args.steps):
        timer = W.PhaseTimer(device)
        start, cpu_start = time.perf_counter(), time.process_time()
        batch = [prompts[i] for i in order[step * W.PROMPTS_PER_STEP:(step + 1) * W.PROMPTS_PER_STEP]]
        enc = tokenizer(batch, return_tensors="pt", padding=True, truncation=True,
                        max_length=W.PROMPT_TOKENS).to(device)
        queries = enc.input_ids.repeat_interleave(k, 0)  # N,P
        query_mask = enc.attention_mask.repeat_interleave(k, 0)  # N,P
        model.eval()
        with timer("generation"), torch.no_grad():
            sequences = model.generate(input_ids=queries, attention_mask=query_mask, do_sample=True,
                                       temperature=W.TEMPERATURE, top_k=0, top_p=1.0, max_new_tokens=args.new_tokens,
                                       min_new_tokens=0 if args.mixed else args.new_tokens,
                                       eos_token_id=eos, pad_token_id=pad)  # N,P+R
        responses = sequences[:, queries.shape[1]:]  # N,R
        is_eos = (responses == eos).int()
        after_eos = is_eos.cumsum(1) - is_eos > 0  # N,R
        response_mask = ~after_eos  # up to and including the first EOS
        responses = responses.masked_fill(after_eos, pad)
        attention_mask = torch.cat([query_mask, response_mask.long()], 1)
        position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
        inputs = (torch.cat([queries, responses], 1), attention_mask, position_ids, responses)
        model.train()
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
        with timer("policy forward/backward"):
            loss.backward()
        with timer("optimizer"):
            torch.nn.utils.clip_grad_norm_(trainable, W.MAX_GRAD_NORM)
            optimizer.step()
            optimizer.zero_grad()
        W.sync(device)
        if step >= args.warmup:
            step_times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
            tokens.append(int(response_mask.sum()))
            for name, seconds in timer.seconds.items():
                phases[name].append(seconds)
    print(json.dumps(W.report("floor", args.model, "rloo", step_times, cpu_times, phases, tokens, device,
                              memory_marks)))


if __name__ == "__main__":
    main()
