"""Builds the calculator tool-use task: the bundled questions and the tiny model that starts out rarely calling
its tool.

    python scripts/build_calculator.py      # writes lit_rlhf/data/calculator/ and lit_rlhf/assets/tiny-calculator/

Questions: a*b with three-digit a and b, each with its `answer`. The model (GPT-NeoX, per-digit tokenizer) is
pre-trained on episodes as the rollout builds them (the model's turns and the environment's observations
tokenized apart, the loss on the model's turns only), from a teacher that calls the calculator in the right
format with probability --p-tool and copies its result, calls a tool that does not exist with probability
--p-bad-call, and otherwise answers unaided with a guess of the right size (almost always wrong). RL can then lift
accuracy only by calling the tool more often. Reproducible: seeded, deterministic CPU training.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch
from build_arithmetic import EOS, PAD, train_tokenizer
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from lit_rlhf.envs import TOOL_FORMATS, ToolCall, run_tool_call
from lit_rlhf.tasks.calculator import calculator

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "lit_rlhf" / "data" / "calculator"
MODEL_DIR = ROOT / "lit_rlhf" / "assets" / "tiny-calculator"
TOOL_TOKENS = ["<call>", "</call>", "<result>", "</result>", "calculator"]
FORMAT = TOOL_FORMATS["compact"]


def questions(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    pairs = {(rng.randrange(100, 1000), rng.randrange(100, 1000)) for _ in range(count * 2)}
    return [{"prompt": f"What is {a}*{b}?", "answer": str(a * b)} for a, b in sorted(pairs)[:count]]


def guess(answer: int, rng: random.Random) -> int:
    """An unaided answer: the right leading digits, the rest made up."""
    digits = str(answer)
    keep = rng.randrange(1, 3)
    return int(digits[:keep] + "".join(str(rng.randrange(10)) for _ in digits[keep:]))


def teacher_episode(row: dict, rng: random.Random, p_tool: float, p_bad_call: float) -> list[tuple[str, bool]]:
    """[(text, by the model)] of one episode; model turns end with the stop token."""
    expression = row["prompt"].removeprefix("What is ").removesuffix("?")
    draw = rng.random()
    if draw < p_tool + p_bad_call:
        name = "calculator" if draw < p_tool else rng.choice(["calc", "calculate", "compute"])
        result, _ = run_tool_call(ToolCall(name, [expression]), {"calculator": calculator}, timeout_s=5.0)
        answer = result if draw < p_tool else str(guess(int(row["answer"]), rng))
        return [(f" <call>{name}({expression})</call>{EOS}", True), (FORMAT.observation([result]), False),
                (f" Answer: {answer}{EOS}", True)]
    return [(f" Answer: {guess(int(row['answer']), rng)}{EOS}", True)]


def encode(tokenizer, row: dict, episode: list[tuple[str, bool]]) -> tuple[list[int], list[int]]:
    """Token ids and labels (-100 off the model's turns), each piece tokenized on its own as the rollout does."""
    ids = tokenizer(row["prompt"])["input_ids"]
    labels = [-100] * len(ids)
    for text, by_model in episode:
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += piece
        labels += piece if by_model else [-100] * len(piece)
    return ids, labels


def pretrain(rows, tokenizer, args) -> GPTNeoXForCausalLM:
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    config = GPTNeoXConfig(vocab_size=len(tokenizer), hidden_size=args.hidden, num_hidden_layers=args.layers,
                           num_attention_heads=4, intermediate_size=4 * args.hidden, max_position_embeddings=128,
                           rotary_pct=1.0, bos_token_id=eos_id, eos_token_id=eos_id, tie_word_embeddings=False)
    model = GPTNeoXForCausalLM(config)

    def episode(rng: random.Random) -> tuple[list[int], list[int]]:
        row = rows[rng.randrange(len(rows))]
        return encode(tokenizer, row, teacher_episode(row, rng, args.p_tool, args.p_bad_call))

    return train_on_episodes(model, tokenizer, episode, args)


def train_on_episodes(model, tokenizer, episode, args) -> GPTNeoXForCausalLM:
    """args.steps AdamW steps (one-cycle schedule to args.lr) on batches of args.batch_size episodes, each
    `episode(rng)` -> (token ids, labels) with a generator seeded by args.seed; the loss on the labelled tokens."""
    pad_id = tokenizer.convert_tokens_to_ids(PAD)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.steps, pct_start=0.05)
    rng = random.Random(args.seed)
    start = time.time()
    for step in range(args.steps):
        docs = [episode(rng) for _ in range(args.batch_size)]
        width = max(len(ids) for ids, _ in docs)
        ids = torch.full((len(docs), width), pad_id)
        labels = torch.full((len(docs), width), -100)
        mask = torch.zeros((len(docs), width), dtype=torch.long)
        for i, (doc_ids, doc_labels) in enumerate(docs):
            ids[i, :len(doc_ids)] = torch.tensor(doc_ids)
            labels[i, :len(doc_ids)] = torch.tensor(doc_labels)
            mask[i, :len(doc_ids)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if step % 250 == 0 or step == args.steps - 1:
            print(f"step {step:5d}  loss {loss.item():.3f}  {time.time() - start:.0f}s", flush=True)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-prompts", type=int, default=3000, help="bundled questions (a seeded sample)")
    parser.add_argument("--p-tool", type=float, default=0.2)
    parser.add_argument("--p-bad-call", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()

    rows = questions(args.num_prompts, args.seed)
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    with open(DATA_DIR / "prompts.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    rng = random.Random(args.seed + 1)
    texts = [r["prompt"] for r in rows] + [text for r in rows[:1000]
                                          for text, _ in teacher_episode(r, rng, 0.5, 0.5)]
    tokenizer = train_tokenizer(texts)
    tokenizer.add_tokens(TOOL_TOKENS)  # ordinary (not special) tokens: decoded text keeps them for the parser
    model = pretrain(rows, tokenizer, args)
    model.generation_config.pad_token_id = tokenizer.convert_tokens_to_ids(PAD)
    model.save_pretrained(MODEL_DIR)
    tokenizer.save_pretrained(MODEL_DIR)


if __name__ == "__main__":
    main()
