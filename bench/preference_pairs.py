"""Preference pairs from the embedded model's own samples on the bundled sentiment prompts, labelled by a gold
scorer (VADER) with label noise: the data of bench/preferences.py.

    python bench/preference_pairs.py OUT_DIR [--passes 3] [--noise 0.1]

Each pass samples two completions per prompt (pure sampling, temperature 1, 16 tokens); the one VADER scores higher
is `chosen`, then the label is flipped with probability `noise` (seeded). Ties are left out. Writes
OUT_DIR/train.jsonl (noisy labels) and OUT_DIR/heldout.jsonl (a seeded tenth of the prompts, exact gold labels,
for accuracy against the gold).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from lit_rlhf.data.sources import BUNDLED, read_jsonl
from lit_rlhf.models import load_tokenizer
from lit_rlhf.rewards import VaderSentiment

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "lit_rlhf" / "assets" / "tiny-pythia"


@torch.no_grad()
def sample_two(model, tokenizer, prompts: list[str], batch_size: int = 64) -> list[tuple[str, str]]:
    pairs = []
    for start in range(0, len(prompts), batch_size):
        chunk = [p for p in prompts[start:start + batch_size] for _ in range(2)]
        enc = tokenizer(chunk, return_tensors="pt", padding=True)
        out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=16,
                             pad_token_id=tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        pairs += list(zip(texts[0::2], texts[1::2], strict=True))
    return pairs


def make_pairs(out: Path, passes: int = 3, noise: float = 0.1, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = load_tokenizer(str(TINY))
    model = AutoModelForCausalLM.from_pretrained(TINY).eval()
    gold = VaderSentiment()
    prompts = [row["prompt"] for row in read_jsonl(BUNDLED["sentiment"], "sentiment")]
    heldout_prompts = set(rng.sample(prompts, len(prompts) // 10))
    train, heldout, flipped = [], [], 0
    for _ in range(passes):
        for prompt, (a, b) in zip(prompts, sample_two(model, tokenizer, prompts), strict=True):
            score_a, score_b = gold([prompt, prompt], [a, b]).tolist()
            if score_a == score_b or a == b:
                continue
            chosen, rejected = (a, b) if score_a > score_b else (b, a)
            row = {"prompt": prompt, "chosen": chosen, "rejected": rejected}
            if prompt in heldout_prompts:
                heldout.append(row)
            elif rng.random() < noise:
                flipped += 1
                train.append({"prompt": prompt, "chosen": rejected, "rejected": chosen})
            else:
                train.append(row)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("heldout", heldout)):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"train_pairs": len(train), "heldout_pairs": len(heldout), "flipped": flipped, "noise": noise,
            "passes": passes}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--noise", type=float, default=0.1)
    args = parser.parse_args()
    print(make_pairs(args.out, args.passes, args.noise))
