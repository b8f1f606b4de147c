"""Where a rollout's generate() time goes, per new token: the prefill, the model's forward per decoding step (its
transformer blocks and embeddings, and its output head), and generate()'s own work between forwards (logits
processing, sampling, stopping criteria, KV-cache bookkeeping).

    python bench/generation_profile.py    # ~4 min on 2 CPU cores; writes bench/results/generation_profile.{md,json}

Then generation tokens/s of plain generate() (its own sampler, every sample prefilled), lit_rlhf's default engine
(shared prefill, inverse_cdf) and the same with the decoding step compiled (rollout.compile_mode=default).

HFEngine's generate() on the LoRA-wrapped policy, as rollouts call it: 8 distinct prompts x K=4 samples, 16-token
prompts (random token ids), 32 new tokens (the stop token is too unlikely to end one early), temperature 0.7; the
tiny default and the pythia-160m shape (random weights, bench/workload.py), with the K samples' prefill shared
(rollout.shared_prefill, the default) and not, and each token sampler (rollout.token_sampler: inverse_cdf, the
default, and generate()'s own multinomial). Times come from forward hooks on the model and on its output head
(time.perf_counter around each call); medians of 3 calls after a warm-up call, in one process. A forward of more
than one position is a prefill; every other forward is a decoding step.
"""

from __future__ import annotations

import statistics
import time

import torch
import workload as W
from command_line import takes_no_options
from peft import LoraConfig, get_peft_model
from results_blocks import publish
from transformers import AutoModelForCausalLM, GenerationConfig

from lit_rlhf.rollout import HFEngine

PROMPTS, K, PROMPT_TOKENS, NEW_TOKENS, REPS, THROUGHPUT_REPS = 8, 4, 16, 32, 3, 5


class ForwardClock:
    """Seconds spent in a module's forwards, split into prefills (more than one position) and decoding steps."""

    def __init__(self, module: torch.nn.Module, positions_of):
        self.positions_of, self.prefill_s, self.step_s, self.steps = positions_of, 0.0, 0.0, 0
        module.register_forward_pre_hook(self.start, with_kwargs=True)
        module.register_forward_hook(self.stop, with_kwargs=True)

    def reset(self) -> None:
        self.prefill_s, self.step_s, self.steps = 0.0, 0.0, 0

    def start(self, module, args, kwargs) -> None:
        self.began, self.positions = time.perf_counter(), self.positions_of(args, kwargs)

    def stop(self, module, args, kwargs, output) -> None:
        took = time.perf_counter() - self.began
        if self.positions > 1:
            self.prefill_s += took
        else:
            self.step_s, self.steps = self.step_s + took, self.steps + 1


def input_positions(args, kwargs) -> int:
    ids = kwargs.get("input_ids", args[0] if args else None)
    return ids.shape[1] if ids is not None else kwargs["inputs_embeds"].shape[1]


def profile(engine: HFEngine, model, queries, mask, config, siblings: int, clocks) -> dict[str, float]:
    for clock in clocks.values():
        clock.reset()
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.no_grad():
        engine.generate(None, model, queries, mask, config, siblings)
    total = time.perf_counter() - start
    whole, head = clocks["model"], clocks["head"]
    steps = max(whole.steps, 1)
    return {"total_s": total, "prefill_s": whole.prefill_s, "steps": whole.steps,
            "step_forward_ms": 1e3 * whole.step_s / steps, "step_head_ms": 1e3 * head.step_s / steps,
            "between_forwards_ms": 1e3 * (total - whole.prefill_s - whole.step_s) / steps}


THROUGHPUT = {"generate() alone": dict(token_sampler="generate", shared_prefill=False),
              "lit_rlhf (the default)": {}, "lit_rlhf, rollout.merge_adapters=false": dict(merge_adapters=False),
              "lit_rlhf, rollout.compile_mode=default": dict(compile_mode="default")}


def throughput(name: str, config: GenerationConfig, queries: torch.Tensor, mask: torch.Tensor) -> list[dict]:
    """Generation tokens/s of each engine in THROUGHPUT on a fresh model without hooks (the compiled step traces
    the forward); the first call, which compiles, is timed apart, then the engines take turns, THROUGHPUT_REPS
    rounds, so that a slow spell of the machine falls on all of them."""
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(W.model_path(name)),
                           LoraConfig(task_type="CAUSAL_LM", **W.LORA)).eval()
    engines = {label: HFEngine(**settings) for label, settings in THROUGHPUT.items()}
    seconds = {label: [] for label in engines}

    def timed_call(label: str) -> None:
        engine = engines[label]
        torch.manual_seed(0)
        start = time.perf_counter()
        with torch.no_grad():
            engine.generate(None, model, queries, mask, config, K if engine.shared_prefill else 1)
        seconds[label].append(time.perf_counter() - start)

    for label in engines:
        timed_call(label)  # the first call
    for _ in range(THROUGHPUT_REPS):
        for label in engines:
            timed_call(label)
    rows = []
    for label, measured in seconds.items():
        total = statistics.median(measured[1:])
        rows.append({"model": name, "engine": label, "first_call_s": measured[0], "total_s": total,
                     "tokens_per_s": len(queries) * NEW_TOKENS / total})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    engines = {sampler: HFEngine(token_sampler=sampler) for sampler in ("generate", "inverse_cdf")}
    rows, speeds = [], []
    # pure sampling; random weights make the stop token (id 0) so unlikely that every response runs NEW_TOKENS long
    config = GenerationConfig(do_sample=True, temperature=W.TEMPERATURE, top_k=0, top_p=1.0, max_new_tokens=NEW_TOKENS,
                              pad_token_id=1, eos_token_id=0)
    for name in ("tiny", "pythia-160m"):
        base = AutoModelForCausalLM.from_pretrained(W.model_path(name))
        clocks = {"model": ForwardClock(base, input_positions),
                  "head": ForwardClock(base.get_output_embeddings(), lambda args, kwargs: args[0].shape[1])}
        model = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", **W.LORA)).eval()
        prompts = torch.randint(2, min(model.config.vocab_size, 900), (PROMPTS, PROMPT_TOKENS),
                                generator=torch.Generator().manual_seed(0))
        queries = prompts.repeat_interleave(K, dim=0)  # N,P
        mask = torch.ones_like(queries)
        profile(engines["generate"], model, queries, mask, config, K, clocks)  # warm-up
        runs = {(sampler, siblings): [] for sampler in engines for siblings in (1, K)}
        for _ in range(REPS):
            for sampler, siblings in runs:
                runs[sampler, siblings].append(profile(engines[sampler], model, queries, mask, config, siblings,
                                                       clocks))
        for (sampler, siblings), measured in runs.items():
            row = {key: statistics.median(run[key] for run in measured) for key in measured[0]}
            rows.append({"model": name, "sampler": sampler, "shared_prefill": siblings > 1, **row})
            print(rows[-1], flush=True)
        speeds += throughput(name, config, queries, mask)
    lines = [f"generate() of {PROMPTS} prompts x K={K} samples, {PROMPT_TOKENS}-token prompts, {NEW_TOKENS} new "
             f"tokens, LoRA, float32, CPU; medians of {REPS} calls; per decoding step (one new token for all "
             f"{PROMPTS * K} sequences); `python bench/generation_profile.py`.", "",
             "| model | sampler | shared prefill | total s | prefill s | forward ms/step | of which head ms/step | "
             "between forwards ms/step | between forwards, share of a step | decoding steps |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        step = r["step_forward_ms"] + r["between_forwards_ms"]
        lines.append(f"| {r['model']} | {r['sampler']} | {'yes' if r['shared_prefill'] else 'no'} | "
                     f"{r['total_s']:.3f} | {r['prefill_s']:.3f} | {r['step_forward_ms']:.2f} | "
                     f"{r['step_head_ms']:.2f} | "
                     f"{r['between_forwards_ms']:.2f} | {r['between_forwards_ms'] / step:.0%} | {r['steps']:.0f} |")
    lines += ["", "Generation tokens/s (new tokens of all sequences per second of generate(), medians of "
              f"{THROUGHPUT_REPS} calls after the first, the engines taking turns; the first call compiles where "
              "compile_mode is set):", "",
              "| model | engine | tokens/s | vs generate() alone | total s | first call s |", "|---" * 6 + "|"]
    for r in speeds:
        alone = next(s for s in speeds if s["model"] == r["model"] and s["engine"] == "generate() alone")
        lines.append(f"| {r['model']} | {r['engine']} | {r['tokens_per_s']:.0f} | "
                     f"{r['tokens_per_s'] / alone['tokens_per_s']:.2f}x | {r['total_s']:.3f} | "
                     f"{r['first_call_s']:.2f} |")
    publish("generation_profile", {"rows": rows, "throughput": speeds}, lines, ["docs/rollout.md"])


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
