"""The PPO floor: the benchmark's PPO step in plain PyTorch + transformers + peft, no framework around it.

    python bench/ppo_floor.py --model tiny --steps 5 --warmup 1     # prints one JSON line

Generate K completions per prompt; a no-grad forward of the policy for the rollout's logprobs and values (a linear
value head on the last hidden state, starting at zero); the reference forward (adapters off); VADER reward with the
missing-EOS penalty; per-token rewards (-kl_coef x the k1 KL, the score on the last response token); GAE (gamma 1,
lambda 0.95) and masked whitening of the advantages; then 4 epochs over the rollout, each one forward with grad,
the clipped surrogate plus vf_coef x the clipped value loss, backward, gradient clipping, AdamW. The settings are
bench/lit_step.py --algo ppo's (PPOModule's defaults).
"""

from __future__ import annotations

import json

import torch
import workload as W
from floor import backward_and_step, load_tokenizer_and_model, measure_steps, prompt_batch, sample, step_arguments
from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

EPOCHS, CLIPRANGE, CLIPRANGE_VALUE, VF_COEF, GAMMA, LAM = 4, 0.2, 0.2, 0.5, 1.0, 0.95


def logprobs_and_values(model, value_head, input_ids, attention_mask, position_ids, responses):
    """log p of each response token at temperature T, and the value of each response position. -> (N,R) x2"""
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False,
                output_hidden_states=True)
    r = responses.shape[1]
    logits = out.logits[:, -r - 1:-1]  # N,R,V  the logits that predict each response token
    logprobs = torch.log_softmax(logits.float() / W.TEMPERATURE, -1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    hidden = out.hidden_states[-1][:, -r - 1:-1]  # N,R,H  the state each response token is chosen from
    return logprobs, value_head(hidden.float()).squeeze(-1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mean = (x * mask).sum() / mask.sum()
    var = (((x - mean) * mask) ** 2).sum() / (mask.sum() - 1)
    return (x - mean) * torch.rsqrt(var + 1e-8)


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimates and returns over the response tokens (the value after the last one is 0).
    rewards, values, mask: N,R. -> advantages, returns (N,R)"""
    values = values * mask
    advantages, last = torch.zeros_like(rewards), torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        next_value = values[:, t + 1] if t + 1 < rewards.shape[1] else torch.zeros_like(last)
        delta = rewards[:, t] + GAMMA * next_value - values[:, t]
        last = (delta + GAMMA * LAM * last) * mask[:, t]
        advantages[:, t] = last
    return advantages, advantages + values


def ppo_loss(logprobs, values, old_logprobs, old_values, advantages, returns, mask) -> torch.Tensor:
    """Clipped surrogate + VF_COEF x clipped value loss, each a mean over the response tokens. -> scalar"""
    ratio = torch.exp(logprobs - old_logprobs)
    policy_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - CLIPRANGE, 1 + CLIPRANGE))
    clipped = old_values + (values - old_values).clamp(-CLIPRANGE_VALUE, CLIPRANGE_VALUE)
    value_loss = 0.5 * torch.max((values - returns) ** 2, (clipped - returns) ** 2)
    return ((policy_loss + VF_COEF * value_loss) * mask).sum() / mask.sum()


def main() -> None:
    args = step_arguments().parse_args()
    memory_marks = {"after_imports": W.peak_rss_mib()}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    tokenizer, model = load_tokenizer_and_model(args.model, args.dtype, device)
    value_head = torch.nn.Linear(model.config.hidden_size, 1, device=device)  # float32, as lit_rlhf's
    torch.nn.init.zeros_(value_head.weight)
    torch.nn.init.zeros_(value_head.bias)
    trainable = [p for p in model.parameters() if p.requires_grad] + list(value_head.parameters())
    optimizer = torch.optim.AdamW(trainable, lr=W.LR)
    analyzer = SentimentIntensityAnalyzer()
    prompts = W.training_prompts()
    order = torch.randperm(len(prompts)).tolist()
    eos, k = tokenizer.eos_token_id, W.SAMPLES_PER_PROMPT

    def ppo_step(step: int, timer: W.PhaseTimer) -> int:
        batch = [prompts[i] for i in order[step * W.PROMPTS_PER_STEP:(step + 1) * W.PROMPTS_PER_STEP]]
        queries, query_mask = prompt_batch(tokenizer, batch, k, device)
        with timer("generation"):
            inputs, response_mask = sample(model, tokenizer, queries, query_mask, args.new_tokens, args.mixed)
        responses, mask = inputs[-1], response_mask.float()
        with timer("policy forward/backward"), torch.no_grad():
            old_logprobs, old_values = logprobs_and_values(model, value_head, *inputs)  # N,R x2
        with timer("reference forward"), torch.no_grad(), model.disable_adapter():
            ref_logprobs, _ = logprobs_and_values(model, value_head, *inputs)  # N,R
        with timer("reward"):
            texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
            scores = torch.tensor([analyzer.polarity_scores(t)["compound"] for t in texts], device=device)
            scores = scores - 1.0 * ~(responses == eos).any(1)  # missing-EOS penalty
        rewards = -W.KL_COEF * (old_logprobs - ref_logprobs) * mask  # N,R
        last = mask.sum(1).long() - 1  # N  the last response token
        rewards[torch.arange(len(last), device=device), last] += scores
        advantages, returns = gae(rewards, old_values, mask)
        advantages = masked_whiten(advantages, mask)
        for _ in range(EPOCHS):
            with timer("policy forward/backward"):
                logprobs, values = logprobs_and_values(model, value_head, *inputs)
            loss = ppo_loss(logprobs, values, old_logprobs, old_values, advantages, returns, mask)
            backward_and_step(loss, trainable, optimizer, timer)
        return int(response_mask.sum())

    memory_marks["before_steps"] = W.peak_rss_mib()
    print(json.dumps(measure_steps(ppo_step, args, device, memory_marks, "floor", "ppo")))


if __name__ == "__main__":
    main()
