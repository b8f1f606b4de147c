"""Builds the arithmetic task: the bundled questions and the tiny model that starts imperfect on them.

    python scripts/build_arithmetic.py      # writes lit_rlhf/data/arithmetic/ and lit_rlhf/assets/tiny-arithmetic/

Questions: a+b and a-b with two-digit operands (a >= b), and a*b with a one-digit a and a two-digit b, each with
its `answer`. The model (GPT-NeoX, the pythia architecture, with a per-digit BPE tokenizer) is pre-trained on
every question with a noisy teacher: each time a question is drawn, its answer is the right one with probability
--p-correct and otherwise a typical slip (off by one or ten, a lost carry, swapped digits), and one completion in
--p-misformat uses another format than `Answer: <n>`. The model so learns the right answer as the most likely
one, but samples slips and other formats often: RL with a verifiable reward can lift its accuracy, as it does
for real base models. Reproducible: seeded, deterministic CPU training.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "lit_rlhf" / "data" / "arithmetic"
MODEL_DIR = ROOT / "lit_rlhf" / "assets" / "tiny-arithmetic"
EOS, PAD = "<|endoftext|>", "<|padding|>"
OTHER_FORMATS = ("= {}", "Answer {}", "The answer is {}", "Answer: {} {}", "{}")


def questions() -> list[dict]:
    rows = [{"prompt": f"What is {a}+{b}?", "answer": str(a + b)} for a in range(10, 100) for b in range(10, 100)]
    rows += [{"prompt": f"What is {a}-{b}?", "answer": str(a - b)} for a in range(10, 100) for b in range(10, a + 1)]
    rows += [{"prompt": f"What is {a}*{b}?", "answer": str(a * b)} for a in range(2, 10) for b in range(10, 100)]
    return rows


def slip(answer: int, rng: random.Random) -> int:
    kind = rng.randrange(4)
    if kind == 0:
        return answer + rng.choice((-1, 1))
    if kind == 1:
        return answer + rng.choice((-10, 10))
    if kind == 2 and answer >= 10:
        digits = list(str(answer))
        i = rng.randrange(len(digits) - 1)
        digits[i], digits[i + 1] = digits[i + 1], digits[i]
        swapped = int("".join(digits))
        return swapped if swapped != answer else answer + 1
    return answer + rng.choice((-100, 100, -2, 2))


def teacher_completion(answer: str, rng: random.Random, p_correct: float, p_misformat: float) -> str:
    value = int(answer) if rng.random() < p_correct else slip(int(answer), rng)
    if rng.random() < p_misformat:
        return " " + rng.choice(OTHER_FORMATS).format(value, rng.randrange(100))
    return f" Answer: {value}"


def train_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=[EOS, PAD],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=EOS)


@torch.no_grad()
def accuracy(model, tokenizer, rows: list[dict], temperature: float | None) -> float:
    """Share of rows whose completion (sampled at temperature, or greedy) is exactly ` Answer: <answer>`."""
    from lit_rlhf.tasks.arithmetic import ArithmeticCorrect, ArithmeticFormat

    if tokenizer.pad_token is None:
        tokenizer.pad_token = PAD
    tokenizer.padding_side = "left"
    batch = tokenizer([r["prompt"] for r in rows], return_tensors="pt", padding=True)
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature else {
        "do_sample": False}
    out = model.generate(**batch, max_new_tokens=10, pad_token_id=tokenizer.pad_token_id, **sampling)
    completions = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    correct = ArithmeticCorrect()([], completions, [r["answer"] for r in rows])
    formatted = ArithmeticFormat()([], completions)
    return float((correct * formatted).mean())


def pretrain(rows, tokenizer, args) -> GPTNeoXForCausalLM:
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    config = GPTNeoXConfig(vocab_size=len(tokenizer), hidden_size=args.hidden, num_hidden_layers=args.layers,
                           num_attention_heads=4, intermediate_size=4 * args.hidden, max_position_embeddings=128,
                           rotary_pct=1.0, bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
    model = GPTNeoXForCausalLM(config)
    eos_id, pad_id = tokenizer.convert_tokens_to_ids([EOS, PAD])
    prompts = [tokenizer(r["prompt"])["input_ids"] for r in rows]
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.steps, pct_start=0.05)
    rng = random.Random(args.seed)
    eval_rows = random.Random(args.seed + 7).sample(rows, 256)
    start = time.time()
    for step in range(args.steps):
        picks = [rng.randrange(len(rows)) for _ in range(args.batch_size)]
        docs = []
        for i in picks:
            completion = tokenizer(teacher_completion(rows[i]["answer"], rng, args.p_correct, args.p_misformat))
            docs.append((prompts[i], completion["input_ids"] + [eos_id]))
        width = max(len(p) + len(c) for p, c in docs)
        ids = torch.full((len(docs), width), pad_id)
        labels = torch.full((len(docs), width), -100)
        mask = torch.zeros((len(docs), width), dtype=torch.long)
        for row, (p, c) in enumerate(docs):
            ids[row, : len(p) + len(c)] = torch.tensor(p + c)
            labels[row, len(p): len(p) + len(c)] = torch.tensor(c)  # the loss is on the completion only
            mask[row, : len(p) + len(c)] = 1
        model.train()
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if step % 500 == 0 or step == args.steps - 1:
            model.eval()
            torch.manual_seed(step)
            sampled, greedy = accuracy(model, tokenizer, eval_rows, 0.7), accuracy(model, tokenizer, eval_rows, None)
            print(f"step {step:5d}  loss {loss.item():.3f}  sampled accuracy {sampled:.3f}  greedy {greedy:.3f}  "
                  f"{time.time() - start:.0f}s", flush=True)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-prompts", type=int, default=4000, help="bundled questions (a seeded sample)")
    parser.add_argument("--p-correct", type=float, default=0.25)
    parser.add_argument("--p-misformat", type=float, default=0.25)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()

    rows = questions()
    bundled = random.Random(args.seed).sample(rows, args.num_prompts)
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    with open(DATA_DIR / "prompts.jsonl", "w") as f:
        for row in bundled:
            f.write(json.dumps(row) + "\n")
    texts = [r["prompt"] for r in rows[:2000]] + [f" Answer: {r['answer']}" for r in rows[:2000]]
    texts += [" " + fmt for fmt in OTHER_FORMATS]
    tokenizer = train_tokenizer(texts)
    model = pretrain(rows, tokenizer, args)
    model.generation_config.pad_token_id = tokenizer.convert_tokens_to_ids(PAD)
    model.save_pretrained(MODEL_DIR)
    tokenizer.save_pretrained(MODEL_DIR)


if __name__ == "__main__":
    main()
