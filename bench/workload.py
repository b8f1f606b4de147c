"""The fixed benchmark workload, shared by bench/lit_step.py (lit_rlhf) and bench/floor.py (plain PyTorch).

RLOO, 8 prompts x K=4 samples per step, exactly 32 new tokens, sampling at temperature 0.7, 1 epoch,
1 minibatch, LoRA r=16 on all linear layers, AdamW, gradient clipping at 1.0, VADER reward.
Every response is 32 tokens long (min_new_tokens=32 in both implementations): with pure sampling the
step time would follow the longest sampled response of each step, and the two implementations
sample different sequences, which made the tiny model's episodes/s vary by +-15% between runs.
Prompts are cut to their last 5 tokens (PROMPT_TOKENS; the bundled ones have 2 to 8), so that
nearly every batch is 5 tokens wide in both implementations, whatever prompts each one draws.
Models: the embedded default, and tiny-50k (its layers, pythia's vocabulary) and pythia-160m / 410m / 1b
shapes with random weights (built from the configuration, no download; the tiny tokenizer's ids fit their
vocabulary).
"""

from __future__ import annotations

import json
import resource
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import AutoTokenizer, GPTNeoXConfig, GPTNeoXForCausalLM

PROMPTS_PER_STEP, SAMPLES_PER_PROMPT, NEW_TOKENS, TEMPERATURE, PROMPT_TOKENS = 8, 4, 32, 0.7, 5
LORA = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "target_modules": "all-linear"}
LR, KL_COEF, MAX_GRAD_NORM = 1e-4, 0.05, 1.0
SHAPES = {
    # the embedded tiny model's layers with pythia's 50k vocabulary, as tiny random models of hub vocabularies have
    "tiny-50k": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512),
    "pythia-160m": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "pythia-410m": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
    "pythia-1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=8, intermediate_size=8192),
}
ROOT = Path(__file__).resolve().parents[1]
TINY_PYTHIA = str(ROOT / "lit_rlhf" / "assets" / "tiny-pythia")  # not imported: the floor must not load lit_rlhf
CACHE = Path(__file__).resolve().parent / ".cache"  # git-ignored: random-weight models are rebuilt, never committed
PROMPTS_FILE = ROOT / "lit_rlhf" / "data" / "sentiment" / "prompts.jsonl"


def build_model(shape: str, directory: Path | None = None) -> Path:
    """A GPT-NeoX with pythia's configuration for `shape` and random weights (seed 0), saved with the tiny
    tokenizer so that from_pretrained loads it like any hub model. `<shape>-stops` (mixed response lengths): the
    same, except that the stop token (id 0) is likely enough that responses stop at mixed lengths, as a trained
    model's do (32 samples of 256 new tokens: 1 to 256 tokens, mean 60): the final layer norm gets a bias
    of 10 along a unit direction u, and the stop token's output row is 0.52 u."""
    directory = directory or CACHE / f"{shape}-random"
    if (directory / "config.json").exists():
        return directory
    torch.manual_seed(0)
    stops = shape.endswith("-stops")
    config = GPTNeoXConfig(**SHAPES[shape.removesuffix("-stops")], vocab_size=50304, max_position_embeddings=2048,
                           rotary_pct=0.25, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
    model = GPTNeoXForCausalLM(config)
    if stops:
        with torch.no_grad():
            direction = torch.nn.functional.normalize(torch.randn(config.hidden_size), dim=0)
            model.gpt_neox.final_layer_norm.bias.copy_(10.0 * direction)
            model.get_output_embeddings().weight[0] = 0.52 * direction
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(TINY_PYTHIA).save_pretrained(directory)
    return directory


def model_path(model: str) -> str:
    return TINY_PYTHIA if model == "tiny" else str(build_model(model))


def training_prompts() -> list[str]:
    return [json.loads(line)["prompt"] for line in PROMPTS_FILE.read_text().splitlines()]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def peak_memory_mib(device: torch.device, marks: dict[str, float]) -> dict[str, float]:
    """Peak RSS of this process (CPU), its value at the marks (after the imports: the libraries' fixed
    cost; before the first step: model and data loaded), and peak allocated GPU memory."""
    gpu = None
    if device.type == "cuda":
        record_peak(device, "other")
        gpu = max(PEAKS.values())
    return {"peak_rss_mib": peak_rss_mib(), **{f"rss_{k}_mib": v for k, v in marks.items()}, "peak_gpu_mib": gpu,
            "peak_phase": peak_phase(), "phase_peaks_mib": dict(PEAKS)}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def report(impl: str, model: str, algo: str, step_times: list[float], cpu_times: list[float],
           phases: dict[str, list[float]], generated_tokens: list[int], device: torch.device,
           memory_marks: dict[str, float]) -> dict:
    """One process's measurements (warm-up steps already dropped), as JSON-able numbers. cpu_times
    (process CPU seconds per step, all threads) do not count time the VM lost to its neighbours."""
    steps, total = len(step_times), sum(step_times)
    phase_means = {name: sum(times) / steps for name, times in phases.items()}
    phase_means["other"] = max(total / steps - sum(phase_means.values()), 0.0)
    return {"impl": impl, "model": model, "algo": algo, "device": str(device), "steps": steps,
            "step_s": total / steps, "eps": steps * PROMPTS_PER_STEP * SAMPLES_PER_PROMPT / total,
            "cpu_s_per_episode": sum(cpu_times) / (steps * PROMPTS_PER_STEP * SAMPLES_PER_PROMPT),
            "tokens_per_s": sum(generated_tokens) / total, "phases_s": phase_means,
            **peak_memory_mib(device, memory_marks)}


PEAKS: dict[str, float] = defaultdict(float)  # on CUDA: the process's peak allocated MiB inside each phase
OPEN_PHASES: list[str] = []  # the timed phases open now, innermost last


def record_peak(device: torch.device, phase: str) -> None:
    """On CUDA: the peak allocated memory since the last record, counted to `phase` (its peak counter restarts)."""
    if device.type == "cuda":
        PEAKS[phase] = max(PEAKS[phase], torch.cuda.max_memory_allocated(device) / 2**20)
        torch.cuda.reset_peak_memory_stats(device)


def peak_phase() -> str | None:
    """The phase in which the process's allocated GPU memory peaked ("other": outside the timed phases)."""
    return max(PEAKS, key=PEAKS.get) if PEAKS else None


class PhaseTimer:
    """Seconds spent in named phases of one step: `with timer("generation"): ...` (GPU-synchronized), and on CUDA
    the peak memory inside each phase (PEAKS)."""

    def __init__(self, device: torch.device):
        self.device, self.seconds = device, defaultdict(float)

    @contextmanager
    def __call__(self, phase: str):
        sync(self.device)
        record_peak(self.device, OPEN_PHASES[-1] if OPEN_PHASES else "other")
        OPEN_PHASES.append(phase)
        start = time.perf_counter()
        try:
            yield
        finally:
            sync(self.device)
            self.seconds[phase] += time.perf_counter() - start
            record_peak(self.device, phase)
            OPEN_PHASES.pop()
