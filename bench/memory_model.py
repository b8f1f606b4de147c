"""The per-rank memory of trainer=fsdp2: formulas, and the table they give for 1B, 7B and 70B models.

    python bench/memory_model.py        # seconds: writes bench/results/memory_model.{md,json}, docs/scale.md

Per rank, with W ranks, P parameters per model copy (a full fine-tune keeps 2 copies: the policy and its frozen
reference; LoRA keeps 1, the reference being the policy with adapters off), T trained parameters (P, or the
adapters), b bytes per parameter (4: float32 weights, as with trainer.precision=bf16-mixed), a model's root
(embeddings, final norm, head; R parameters) and its largest transformer block (B parameters):

    parameters        copies * P * b / W  (+ the adapters, T * b / W, with LoRA)
    gradients         T * b / W
    AdamW state       2 * T * 4 / W           (two float32 moments)
    rollout weights   gathered sampling: copies * P * b (every unit all-gathered once per rollout)
                      sharded sampling:  copies * (R + 2 B) * b (the roots, a block and the next one prefetched)
    update weights    (R + 3 B) * b           (root, a block, the next one, the block's unsharded gradient)
    optimizer step    T * 4 / W               (AdamW's foreach step holds sqrt(v) for every shard at once)
    KV cache          2 * layers * kv_width * (prompt + response tokens) * sequences * b
    activations       layers * tokens * hidden * 68 + the update's float32 logits; with gradient
                      checkpointing, layers * tokens * hidden * 4 plus one layer's 68 per token
    update's logits   response tokens * vocab * 4 for the micro-batch while that fits algo.logits_budget_mib
                      (512), else one chunk's (algo.logits_chunk_size, 1024 tokens) recomputed in the backward;
                      their gradient is written over them

In one process without FSDP the weights are whole already: no rollout or update weights. CPU offload
(trainer.strategy.cpu_offload=true) moves parameters, gradients and AdamW state to host memory (and the optimizer
step to the CPU): the device keeps the other transient terms only. The peak is the persistent terms plus the
largest of the rollout's (weights + KV cache), the update's (weights + activations) and the optimizer step's.
The activation term is the usual per-layer estimate for a transformer block without recomputation (34 bytes
per token and hidden unit in 16 bits, Korthikanti et al. 2022), doubled for float32. bench/fsdp2_memory.py checks
these formulas against what it measures.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from accelerate import init_empty_weights
from command_line import takes_no_options
from results_blocks import publish
from transformers import AutoModelForCausalLM, GPTNeoXConfig, LlamaConfig

GIB, MIB = 2**30, 2**20
LORA_RANK = 16
LOGITS_BUDGET = 512 * 2**20  # algo.logits_budget_mib
LOGITS_CHUNK = 1024  # algo.logits_chunk_size


@dataclass
class ModelShape:
    name: str
    layers: int
    hidden: int
    kv_width: int  # key/value width per layer (hidden, or fewer with grouped-query attention)
    vocab: int
    params: int  # one copy
    root: int  # embeddings, final norm, head
    block: int  # the largest transformer block
    lora: int  # adapters of rank 16 on every linear layer of the blocks

    @classmethod
    def of(cls, name: str, config) -> ModelShape:
        """Counted on a model built on the meta device (no memory, no download)."""
        with init_empty_weights():
            model = AutoModelForCausalLM.from_config(config)
        names = set(model._no_split_modules or [])
        blocks = [m for m in model.modules() if type(m).__name__ in names]
        params = sum(p.numel() for p in model.parameters())
        block = max(sum(p.numel() for p in b.parameters()) for b in blocks)
        lora = sum(LORA_RANK * (m.in_features + m.out_features) for b in blocks for m in b.modules()
                   if isinstance(m, torch.nn.Linear))
        kv_width = config.hidden_size * getattr(config, "num_key_value_heads", config.num_attention_heads) \
            // config.num_attention_heads
        return cls(name, config.num_hidden_layers, config.hidden_size, kv_width, config.vocab_size, params,
                   params - sum(sum(p.numel() for p in b.parameters()) for b in blocks), block, lora)


def pythia(hidden: int, layers: int, heads: int, intermediate: int, vocab: int = 50304) -> GPTNeoXConfig:
    return GPTNeoXConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         intermediate_size=intermediate, vocab_size=vocab, rotary_pct=0.25, tie_word_embeddings=False)


def llama(hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int, vocab: int) -> LlamaConfig:
    return LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=kv_heads, intermediate_size=intermediate, vocab_size=vocab)


CONFIGS = {
    "pythia-160m": lambda: pythia(768, 12, 12, 3072),
    "pythia-410m": lambda: pythia(1024, 24, 16, 4096),
    "1B (pythia-1b)": lambda: pythia(2048, 16, 8, 8192),
    "7B (Llama-2-7B)": lambda: llama(4096, 32, 32, 32, 11008, 32000),
    "70B (Llama-3-70B)": lambda: llama(8192, 80, 64, 8, 28672, 128256),
}


@dataclass
class Workload:
    """Per rank: sequences sampled per rollout, tokens each, and the update's micro-batch."""
    sequences: int
    prompt_tokens: int
    response_tokens: int
    micro_batch: int
    checkpointing: bool = False  # model.gradient_checkpointing: a block's input kept per layer, the rest recomputed


def per_rank_bytes(shape: ModelShape, ranks: int, lora: bool, offload: bool, sharded_sampling: bool,
                   work: Workload, bytes_per_param: int = 4, fsdp: bool = True) -> dict[str, float]:
    """Each term of the formulas above, in bytes, for one rank (fsdp=False: one process without FSDP)."""
    b, w = bytes_per_param, ranks
    copies = 1 if lora else 2
    trained = shape.lora if lora else shape.params
    tokens = work.prompt_tokens + work.response_tokens
    terms = {
        "parameters": (copies * shape.params + (trained if lora else 0)) * b / w,
        "gradients": trained * b / w,
        "optimizer": 2 * trained * 4 / w,
    }
    sharded = fsdp
    rollout_weights = copies * ((shape.root + 2 * shape.block) if sharded_sampling else shape.params) * b
    terms["rollout_weights"] = rollout_weights if sharded else 0.0
    terms["update_weights"] = (shape.root + 3 * shape.block) * b if sharded else 0.0
    terms["kv_cache"] = 2 * shape.layers * shape.kv_width * tokens * work.sequences * b
    update_tokens = work.micro_batch * tokens
    per_layer = update_tokens * shape.hidden * 68
    kept = shape.layers * update_tokens * shape.hidden * 4 + per_layer if work.checkpointing \
        else shape.layers * per_layer
    logits = work.micro_batch * work.response_tokens * shape.vocab * 4
    if logits > LOGITS_BUDGET:
        logits = min(LOGITS_CHUNK, work.micro_batch * work.response_tokens) * shape.vocab * 4
    terms["activations"] = kept + logits
    persistent = terms["parameters"] + terms["gradients"] + terms["optimizer"]
    terms["host"] = persistent if offload else 0.0
    device_persistent = 0.0 if offload else persistent
    terms["optimizer_step"] = 0.0 if offload else trained * 4 / w
    terms["peak"] = device_persistent + max(terms["rollout_weights"] + terms["kv_cache"],
                                            terms["update_weights"] + terms["activations"], terms["optimizer_step"])
    return terms


TABLE_RANKS = (1, 2, 8, 64)
TABLE_WORK = Workload(sequences=16, prompt_tokens=512, response_tokens=512, micro_batch=4, checkpointing=True)


def main() -> None:
    shapes = {name: ModelShape.of(name, make()) for name, make in CONFIGS.items() if name[0].isdigit()}
    rows, data = [], {"workload": asdict(TABLE_WORK), "shapes": {n: asdict(s) for n, s in shapes.items()}, "rows": []}
    header = " | ".join(f"{w} rank{'s' if w > 1 else ''}" for w in TABLE_RANKS)
    rows += [f"| model | training | offload | sampling | {header} |", "|---|---|---|---|" + "---|" * len(TABLE_RANKS)]
    for name, shape in shapes.items():
        for lora in (True, False):
            for offload in (False, True):
                for sharded_sampling in (False, True):
                    peaks = [per_rank_bytes(shape, w, lora, offload, sharded_sampling, TABLE_WORK)["peak"] / GIB
                             for w in TABLE_RANKS]
                    data["rows"].append({"model": name, "lora": lora, "offload": offload,
                                         "sharded_sampling": sharded_sampling, "peak_gib": peaks})
                    cells = " | ".join(f"{p:,.1f}" for p in peaks)
                    rows.append(f"| {name} | {'LoRA r=16' if lora else 'full'} | {'yes' if offload else 'no'} | "
                                f"{'sharded' if sharded_sampling else 'gathered'} | {cells} |")
    rows += ["", f"Peak device memory per rank in GiB under trainer=fsdp2 (float32 weights, AdamW, "
             f"model.gradient_checkpointing=true), each rank sampling {TABLE_WORK.sequences} sequences of "
             f"{TABLE_WORK.prompt_tokens} + {TABLE_WORK.response_tokens} tokens and updating on micro-batches of "
             f"{TABLE_WORK.micro_batch}; with offload, parameters, gradients and AdamW state are in host memory "
             f"instead (not counted). Parameters per copy: "
             + ", ".join(f"{n} {s.params / 1e9:.2f}B" for n, s in shapes.items())
             + ". `python bench/memory_model.py`."]
    publish("memory_model", data, rows, ["docs/scale.md"])


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
