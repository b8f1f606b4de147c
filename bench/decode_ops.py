"""Operations per decoding step: what lit_rlhf's eager sampling (HFEngine with rollout.compile_mode=null) dispatches per
generated token against the floor's plain generate() (bench/floor.py), on the benchmark's LoRA policy in bfloat16.

    python bench/decode_ops.py        # ~1 minute on a CPU; writes bench/results/decode_ops.{md,json}

On a GPU an eager decoding step is bound by launching kernels from Python (the GPU check's eager rows run the CPU at
100%), so the operations each step dispatches are its cost there. Counted with a TorchDispatchMode on the CPU (the
same Python path launches the same operations on CUDA; the draw's search as on a GPU, in one level, except in the row
that says otherwise), over two lengths of forced new tokens, so that the prefill
and everything paid once per call cancel out: per step = (ops at LONG - ops at SHORT) / (LONG - SHORT); and what a
call dispatches besides its steps (the prefill, the set-up around generate()): per call = ops at SHORT - SHORT x per
step.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats
from collections import Counter

import torch
import workload as W
from floor import load_tokenizer_and_model, prompt_batch, sample
from torch.utils._python_dispatch import TorchDispatchMode

from lit_rlhf.models.lora_inputs import hold_lora_inputs_in_their_dtype
from lit_rlhf.rollout import HFEngine, inverse_cdf
from lit_rlhf.rollout.context import SamplingContext, SamplingSettings

SHORT, LONG = 8, 24
one_level_on_this_cpu = inverse_cdf.searches_in_one_level


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def floor_sampling(model, tokenizer, queries, query_mask, new_tokens: int) -> None:
    sample(model, tokenizer, queries, query_mask, new_tokens, mixed=False)


def lit_sampling(engine: HFEngine, settings_of, model, tokenizer, queries, query_mask, new_tokens: int) -> None:
    context = SamplingContext(settings=settings_of(new_tokens), policy=model, tokenizer=tokenizer,
                              stop_token_id=tokenizer.eos_token_id, device=queries.device)
    engine.setup(context)
    contexts = [row[mask.bool()].tolist() for row, mask in zip(queries, query_mask, strict=True)]
    engine.generate_turn(context, contexts, new_tokens, from_reference=False, greedy=False)


def per_step(run) -> tuple[float, Counter, float]:
    """Operations per decoding step of run(new_tokens), and by operation; and the operations of a call besides its
    decoding steps."""
    counts = {}
    for tokens in (SHORT, LONG):
        with OpCounter() as counter:
            run(tokens)
        counts[tokens] = counter.ops
    by_op = Counter({op: (counts[LONG][op] - counts[SHORT][op]) / (LONG - SHORT)
                     for op in set(counts[LONG]) | set(counts[SHORT])})
    step = sum(by_op.values())
    return step, by_op, sum(counts[SHORT].values()) - SHORT * step


def python_calls_per_step(run) -> float:
    """Python function calls per decoding step of run(new_tokens) (cProfile's count): the interpreter's share of a
    step's host time, which the operations count does not show."""
    calls = {}
    for tokens in (SHORT, LONG):
        profile = cProfile.Profile()
        profile.runcall(run, tokens)
        calls[tokens] = pstats.Stats(profile).total_calls
    return (calls[LONG] - calls[SHORT]) / (LONG - SHORT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-50k")
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cpu")
    tokenizer, model = load_tokenizer_and_model(args.model, args.dtype, device)
    lit_model = copy.deepcopy(model)  # the LoRA layers as lit_rlhf builds them (models/lora_inputs.py)
    hold_lora_inputs_in_their_dtype(lit_model)
    prompts = W.training_prompts()[:W.PROMPTS_PER_STEP]
    queries, query_mask = prompt_batch(tokenizer, prompts, W.SAMPLES_PER_PROMPT, device)

    def settings_of(tokens: int) -> SamplingSettings:  # lit_step.py's: forced length, temperature only
        return SamplingSettings(tokens, W.TEMPERATURE, {"min_new_tokens": tokens}, True, {})

    rows = {"floor (generate(), torch.multinomial)": (
        lambda n: floor_sampling(model, tokenizer, queries, query_mask, n), False)}
    engines = {"lit_rlhf eager (the default sampler, inverse_cdf), as on a GPU": (HFEngine(compile_mode=None), True),
               "lit_rlhf eager (inverse_cdf), as on a CPU (two-level search)": (HFEngine(compile_mode=None), False),
               "lit_rlhf eager, rollout.token_sampler=generate": (HFEngine(compile_mode=None,
                                                                           token_sampler="generate"), False),
               "lit_rlhf eager, rollout.shared_prefill=false": (HFEngine(compile_mode=None, shared_prefill=False),
                                                                True),
               "lit_rlhf eager, rollout.merge_adapters=true": (HFEngine(compile_mode=None, merge_adapters=True), True)}
    for name, (engine, as_on_gpu) in engines.items():
        rows[name] = (lambda n, engine=engine: lit_sampling(engine, settings_of, lit_model, tokenizer, queries,
                                                            query_mask, n), as_on_gpu)
    results = {}
    for name, (run, as_on_gpu) in rows.items():
        # the draw's search as on a GPU: one level whatever the vocabulary (inverse_cdf.searches_in_one_level)
        inverse_cdf.searches_in_one_level = (lambda probs: True) if as_on_gpu else one_level_on_this_cpu
        run(SHORT)  # warm-up: first-call work
        total, by_op, per_call = per_step(run)
        results[name] = {"ops_per_step": total, "by_op": dict(by_op), "ops_per_call": per_call,
                         "python_calls_per_step": python_calls_per_step(run)}
        print(f"{name}: {total:.1f} ops, {results[name]['python_calls_per_step']:.0f} Python calls per decoding step, "
              f"{per_call:.0f} ops per call besides", flush=True)
    floor_ops = Counter(results[next(iter(results))]["by_op"])
    lines = [f"Operations dispatched per decoding step and per call besides its steps (forced new tokens, "
             f"{W.PROMPTS_PER_STEP} prompts x {W.SAMPLES_PER_PROMPT} samples, {args.model} with LoRA "
             f"r={W.LORA['r']} on every linear layer, {args.dtype}); `python bench/decode_ops.py`.", "",
             "| sampling | ops per step | vs floor | ops it adds (per step) | Python calls per step | ops per call "
             "besides the steps | vs floor |",
             "|---|---:|---:|---|---:|---:|---:|"]
    for name, result in results.items():
        extra = Counter(result["by_op"])
        extra.subtract(floor_ops)
        changed = [f"{op} {n:+.0f}" for op, n in sorted(extra.items(), key=lambda kv: (-abs(kv[1]), kv[0]))
                   if abs(n) >= 0.5]
        added = ", ".join(changed[:10]) + (f", {len(changed) - 10} more" if len(changed) > 10 else "")
        lines.append(f"| {name} | {result['ops_per_step']:.0f} | "
                     f"{result['ops_per_step'] - results[next(iter(results))]['ops_per_step']:+.0f} | {added} | "
                     f"{result['python_calls_per_step']:.0f} | {result['ops_per_call']:.0f} | "
                     f"{result['ops_per_call'] - results[next(iter(results))]['ops_per_call']:+.0f} |")
    from results_blocks import publish

    publish("decode_ops", {"model": args.model, "dtype": args.dtype, "results": results}, lines,
            ["docs/performance.md"], fingerprint=False)


if __name__ == "__main__":
    main()
