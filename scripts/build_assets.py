"""Builds the embedded default: bundled corpus and prompts, a BPE tokenizer, and a tiny GPT-NeoX.

    python scripts/build_assets.py            # writes lit_rlhf/data/sentiment/ and lit_rlhf/assets/tiny-pythia/

Reproducible: every random choice is seeded (--seed, default 0) and training runs on the CPU in
deterministic mode. The model is a pythia-architecture (GPT-NeoX) causal LM of about 1M parameters,
pre-trained on the corpus so that its samples are readable reviews ending in <|endoftext|>.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch
from review_grammar import prompt_from, review
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "lit_rlhf" / "data" / "sentiment"
MODEL_DIR = ROOT / "lit_rlhf" / "assets" / "tiny-pythia"
EOS, PAD = "<|endoftext|>", "<|padding|>"


def write_corpus(seed: int, num_reviews: int, num_prompts: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    corpus = [review(rng) for _ in range(num_reviews)]
    prompt_rng = random.Random(seed + 1)  # prompts come from reviews the model never saw
    prompts: dict[str, None] = {}
    while len(prompts) < num_prompts:
        prompts[prompt_from(review(prompt_rng), prompt_rng)] = None
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    (DATA_DIR / "corpus.txt").write_text("\n".join(corpus) + "\n")
    with open(DATA_DIR / "prompts.jsonl", "w") as f:
        for prompt in prompts:
            f.write(json.dumps({"prompt": prompt}) + "\n")
    return corpus, list(prompts)


def train_tokenizer(corpus: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],  # ids 0 and 1, as in the pythia tokenizer
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    # Like pythia's tokenizer, it ships with no pad token set: lit_rlhf assigns <|padding|> at load.
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=EOS)


def pretrain(corpus: list[str], tokenizer, seed: int, steps: int, batch_size: int) -> GPTNeoXForCausalLM:
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    config = GPTNeoXConfig(
        vocab_size=len(tokenizer), hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=512, max_position_embeddings=256, rotary_pct=0.25,
        bos_token_id=0, eos_token_id=0, tie_word_embeddings=False,
    )
    model = GPTNeoXForCausalLM(config)
    eos_id, pad_id = tokenizer.convert_tokens_to_ids([EOS, PAD])
    docs = [tokenizer(text)["input_ids"] + [eos_id] for text in corpus]  # one review per row
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps, pct_start=0.05)
    rng = random.Random(seed)
    model.train()
    start = time.time()
    for step in range(steps):
        batch = rng.sample(docs, batch_size)
        width = max(map(len, batch))
        ids = torch.full((batch_size, width), pad_id)
        mask = torch.zeros((batch_size, width), dtype=torch.long)
        for row, doc in enumerate(batch):
            ids[row, : len(doc)] = torch.tensor(doc)
            mask[row, : len(doc)] = 1
        labels = ids.masked_fill(mask == 0, -100)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if step % 100 == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {loss.item():.3f}  {time.time() - start:.0f}s", flush=True)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-reviews", type=int, default=20000)
    parser.add_argument("--num-prompts", type=int, default=1000)
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    corpus, prompts = write_corpus(args.seed, args.num_reviews, args.num_prompts)
    tokenizer = train_tokenizer(corpus, args.vocab_size)
    model = pretrain(corpus, tokenizer, args.seed, args.steps, args.batch_size)
    model.generation_config.pad_token_id = tokenizer.convert_tokens_to_ids(PAD)
    model.save_pretrained(MODEL_DIR)
    tokenizer.save_pretrained(MODEL_DIR)

    model.eval()
    for prompt in prompts[:5]:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        out = model.generate(ids, do_sample=True, top_k=0, top_p=1.0, max_new_tokens=40,
                             pad_token_id=model.generation_config.pad_token_id)
        print(repr(tokenizer.decode(out[0])))


if __name__ == "__main__":
    main()
