"""The GPU check's extended suite (`python bench/gpu.py --suite extended`): the rows the check's grid does not have,
in the order they are measured, the most wanted first (a run stopped by --max-minutes keeps those).

1. long responses (GRPO at the large shape, --long-tokens: 1024 then 256 new tokens): the default engine against the
   floor (whose warm-up step samples --new-tokens: a plain loop has nothing to compile);
2. distillation: the small shape as the student of a loaded teacher of the large shape, the sampled-token loss and the
   full-vocabulary one (algo.divergence=generalized_jsd), with the teacher's share of the step's time and memory;
3. PPO against its floor (bench/ppo_floor.py: value head and GAE in a plain loop);
4. memory and eager sampling at --new-tokens (RLOO, each shape): the floor, the default, the default with the update's
   logits recomputed (algo.logits_budget_mib=null), TRL, eager, and eager with the adapters merged; then the settings
   that may trade speed for memory (model.gradient_checkpointing, the update's logits recomputed in chunks of 256)
   and the sampling's parts (generate()'s own draw eagerly, one prefill per sample eagerly and compiled);
5. what is left at the long lengths: eager and TRL at 256 and 1024 tokens, RLOO at 256.

Each row also gets the sampling phase's generated tokens/s beside its bound on that GPU: a decoding step reads the
weights (but the input embedding) and the KV cache of every sequence so far, so at best
tokens/s = N / ((weight bytes + KV bytes at the step's mean length) / memory bandwidth), the bandwidth measured by a
device-to-device copy before the rows.
"""

from __future__ import annotations

import sys
import time

import torch

PROMPTS, SAMPLES, PROMPT_TOKENS = 8, 4, 5  # bench/workload.py's
SEQUENCES = PROMPTS * SAMPLES


def lit(*extra: str) -> list[str]:
    return [sys.executable, "lit_step.py", *extra]


def commands(algo: str, trl: str | None) -> dict[str, list[str]]:
    """The implementations of the suite for `algo` (trl: the interpreter that has TRL, or None)."""
    beta = ["--beta", "0.04"] if algo == "grpo" else []
    rows = {"floor": {"rloo": [sys.executable, "floor.py"], "grpo": [sys.executable, "grpo_floor.py", *beta],
                      "ppo": [sys.executable, "ppo_floor.py"]}.get(algo),
            "lit_rlhf": lit("--algo", algo, *beta),
            "lit_rlhf logits recomputed": lit("--algo", algo, *beta, "--recompute-logits"),
            "lit_rlhf eager": lit("--algo", algo, *beta, "--compile-mode", "none"),
            "lit_rlhf eager merged": lit("--algo", algo, *beta, "--compile-mode", "none", "--merge-adapters"),
            "lit_rlhf eager, token_sampler=generate": lit("--algo", algo, *beta, "--compile-mode", "none",
                                                          "--sampler", "generate"),
            "lit_rlhf eager, unshared prefill": lit("--algo", algo, *beta, "--compile-mode", "none",
                                                    "--no-shared-prefill"),
            "lit_rlhf unshared prefill": lit("--algo", algo, *beta, "--no-shared-prefill"),
            "lit_rlhf checkpointed": lit("--algo", algo, *beta, "--gradient-checkpointing"),
            "lit_rlhf logits chunks of 256": lit("--algo", algo, *beta, "--logits-chunk-size", "256",
                                                 "--recompute-logits"),
            "trl": [trl, "trl_step.py", "--algo", algo, "--beta", "0.04" if algo == "grpo" else "0.05"]
            if trl and algo in ("rloo", "grpo") else None}
    return {impl: command for impl, command in rows.items() if command is not None}


def rows(small: str, large: str, new_tokens: int, long_tokens: list[int], trl: str | None) -> list[dict]:
    """The suite's measurements, in order: shape, algo, impl, new_tokens, steps, warmup, command (teacher for
    distillation)."""
    out = []

    def add(shape, algo, impls, tokens, steps, warmup=1):
        available = commands(algo, trl)
        for impl in impls:
            if impl in available:  # every row warms up at its own length, the floor too: warmed up at 32 tokens,
                # its one measured long step decoded at half its rate at 32 tokens, the other rows' did not slow
                out.append({"shape": shape, "algo": algo, "impl": impl, "new_tokens": tokens, "steps": steps,
                            "warmup": warmup, "command": available[impl]})

    longest, *shorter = sorted(long_tokens, reverse=True)
    for tokens in (longest, *shorter):
        add(large, "grpo", ["floor", "lit_rlhf"], tokens, steps=1)
    for divergence in ("sampled_token", "generalized_jsd"):
        out.append({"shape": small, "algo": "distill", "impl": f"lit_rlhf {divergence}", "new_tokens": new_tokens,
                    "steps": 3, "warmup": 1, "teacher": large,
                    "command": lit("--algo", "distill", "--teacher", large, "--divergence", divergence)})
    add(large, "ppo", ["floor", "lit_rlhf"], new_tokens, steps=3)
    every = ["floor", "lit_rlhf", "lit_rlhf logits recomputed", "trl", "lit_rlhf eager", "lit_rlhf eager merged"]
    for shape in dict.fromkeys([large, small]):
        add(shape, "rloo", every, new_tokens, steps=3)
    settings = ["lit_rlhf checkpointed", "lit_rlhf logits chunks of 256", "lit_rlhf eager, token_sampler=generate",
                "lit_rlhf eager, unshared prefill", "lit_rlhf unshared prefill"]
    for shape in dict.fromkeys([large, small]):
        add(shape, "rloo", settings, new_tokens, steps=3)
    for tokens in (*shorter, longest):
        add(large, "grpo", ["lit_rlhf eager", "trl"], tokens, steps=1)
    for tokens in shorter:
        add(large, "rloo", ["floor", "lit_rlhf"], tokens, steps=1)
    return out


def memory_bandwidth_gbs(device: torch.device) -> float:
    """Bytes read and written per second by a copy of 1 GiB (the best of 5), in GB/s."""
    source = torch.empty(2**30, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(6):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        target.copy_(source)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    del source, target
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return 2 * 2**30 / best / 1e9


def model_bytes(path: str, dtype_bytes: int) -> dict[str, float]:
    """The bytes a decoding step reads per step (the weights but the input embedding) and per cached token (keys and
    values of every layer), from the model's configuration."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    embedding = model.get_input_embeddings().weight.numel()
    weights = (sum(p.numel() for p in model.parameters()) - embedding) * dtype_bytes
    kv_per_token = 2 * config.num_hidden_layers * config.hidden_size * dtype_bytes
    return {"weight_bytes": weights, "kv_bytes_per_token": kv_per_token}


def decoding_bound(sizes: dict[str, float], new_tokens: int, bandwidth_gbs: float) -> float:
    """The most tokens/s the sampling phase can generate: N sequences per step, each step reading the weights once and
    the KV cache of every sequence at its mean length over the response (the prompt and half the response)."""
    mean_context = PROMPT_TOKENS + (new_tokens - 1) / 2
    step_bytes = sizes["weight_bytes"] + SEQUENCES * mean_context * sizes["kv_bytes_per_token"]
    return SEQUENCES / (step_bytes / (bandwidth_gbs * 1e9))


def table(data: dict) -> list[str]:
    versions = ", ".join(f"{name} {version}" for name, version in data["versions"].items())
    memory = "peak GPU memory" if data["device"] == "cuda" else "peak RSS"
    lines = [f"{data['device_name']} ({versions}); weights in {data['dtype']}; {PROMPTS} prompts x {SAMPLES} samples, "
             f"forced new tokens, LoRA; memory bandwidth {data['bandwidth_gbs']:.0f} GB/s (a device-to-device copy); "
             f"`python bench/gpu.py --suite extended` ({data['minutes']:.1f} min"
             + (f" in all, {data['joined_runs']} runs joined with --merge" if data.get("joined_runs") else "")
             + ").", "",
             f"| shape | algo | impl | new tokens | steps | episodes/s | vs floor | sampling tokens/s | its bound | "
             f"of bound | {memory} MiB | peak in | teacher: time, weights | step s | CUDA graphs recorded per step | "
             f"measured |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---|"]
    for row in data["runs"]:
        r, head = row["result"], f"| {row['shape']} | {row['algo']} | {row['impl']} | {row['new_tokens']} |"
        if "error" in r:
            lines.append(f"{head} | failed: {r['error']} | | | | | | | | | | | |")
            continue
        # the floor of the same day: an eager step is bound by the host's launches, and hosts differ between days
        floor = next((x["result"] for x in data["runs"] if x["impl"] == "floor" and "error" not in x["result"]
                      and all(x[k] == row[k] for k in ("shape", "algo", "new_tokens"))
                      and x["result"].get("measured") == r.get("measured")), {})
        ratio = f"{r['eps'] / floor['eps']:.2f}x" if floor.get("eps") else ""
        sampling = r["tokens_per_s"] * r["step_s"] / r["phases_s"]["generation"] if r["phases_s"].get(
            "generation") else None
        bound = row.get("bound_tokens_per_s")
        of_bound = f"{sampling / bound:.1%}" if sampling and bound else ""
        teacher = (f"{r['teacher_s'] / r['step_s']:.0%} of the step, {r['teacher_weights_mib']:.0f} MiB "
                   f"({row['teacher']})" if "teacher_s" in r else "")
        memory_mib = r["peak_gpu_mib"] if data["device"] == "cuda" else r["peak_rss_mib"]
        recorded = r.get("cuda_graph_recordings_per_step")  # lit_rlhf's rows (since it was counted)
        lines.append(f"{head} {r['steps']} | {r['eps']:.2f} | {ratio} | "
                     f"{'' if sampling is None else format(sampling, '.0f')} | "
                     f"{'' if bound is None else format(bound, '.0f')} | {of_bound} | {memory_mib:.0f} | "
                     f"{r.get('peak_phase') or ''} | {teacher} | {r['step_s']:.3f} | "
                     f"{'' if recorded is None else format(recorded, '.1f')} | {r.get('measured', '')} |")
    lines += ["", f"Correctness (`pytest tests/device` on the device): {data['correctness']['summary']}."]
    lines += [f"- {line}" for line in data["correctness"].get("failed", [])]
    return lines

