"""rollout=vllm and rollout=vllm_server against rollout=hf: the same RLOO steps (8 prompts x K=4, exactly N new
tokens, float32) on the embedded default and the pythia-160m shape, at 32 and 128 new tokens.

    make setup-vllm && .venv-vllm/bin/python bench/rollout_engines.py    # ~70 minutes on 2 CPU cores
    python bench/rollout_engines.py --models pythia-1b --dtype bfloat16    # GPU, with a GPU build of vLLM

Every engine runs in the vLLM environment (.venv-vllm: the same transformers for all). Each measurement is a fresh
process of bench/lit_step.py (1 warm-up step dropped, then --steps steps); hf and vllm alternate, --reps times,
then a `vllm serve` of the model starts (docs/scale.md's flags, on the same machine and cores, its start-up not
timed) and vllm_server's --reps runs follow. The table gives medians: episodes/s of the whole RL step, and the
rollout phase alone (the engine's `sample`: for vllm and vllm_server the weight sync before it, included, and also
given alone). Writes bench/results/rollout_engines.md and .json, and the results block of docs/rollout.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import workload as W
from results_blocks import ROOT, publish

BENCH = Path(__file__).resolve().parent
ENGINES = ("hf", "vllm", "vllm_server")
IN_PROCESS = ("hf", "vllm")  # alternated; vllm_server's runs follow, with its server up


def measure(engine: str, model: str, new_tokens: int, steps: int, dtype: str, urls: list[str] | None = None) -> dict:
    out = subprocess.run([sys.executable, "lit_step.py", "--rollout", engine, "--model", model, "--new-tokens",
                          str(new_tokens), "--steps", str(steps), "--warmup", "1", "--dtype", dtype,
                          *(["--urls", *urls] if urls else [])], cwd=BENCH, check=True, capture_output=True,
                         text=True)
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith('{"impl"')))


@contextlib.contextmanager
def vllm_server(model: str, dtype: str, log: Path):
    """`vllm serve` of the model's weights with docs/scale.md's flags (merged weight sync), on a free port; its URL
    once /v1/models answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", W.model_path(model),
               "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype,
               "--kv-cache-memory-bytes", str(2**30), "--generation-config", "vllm", "--logprobs-mode",
               "processed_logprobs", "--worker-extension-cls", "lit_rlhf.rollout.vllm_worker.WeightReceiver"]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": str(ROOT)}
    with open(log, "w") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if server.poll() is not None:
                raise SystemExit(f"vllm serve exited with {server.returncode}; its log: {log}")
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=5):
                    break
            except OSError:
                time.sleep(1)
        else:
            raise SystemExit(f"vllm serve did not answer in 10 minutes; its log: {log}")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=60)


def median(runs: list[dict], key) -> float:
    return statistics.median(key(r) for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["tiny", "pythia-160m"])
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--dtype", default="float32", help="bfloat16 for the GPU measurement (pythia-1b shape)")
    args = parser.parse_args()
    runs = {(m, n, e): [] for m in args.models for n in args.new_tokens for e in ENGINES}

    def record(model: str, n: int, engine: str, urls: list[str] | None = None) -> None:
        runs[(model, n, engine)].append(measure(engine, model, n, args.steps, args.dtype, urls))
        last = runs[(model, n, engine)][-1]
        print(model, n, engine, round(last["eps"], 2), round(last["phases_s"]["generation"], 3), flush=True)

    for model in args.models:
        for n in args.new_tokens:
            for _ in range(args.reps):
                for engine in IN_PROCESS:
                    record(model, n, engine)
        with vllm_server(model, args.dtype, Path(tempfile.gettempdir()) / f"rollout_engines_server_{model}.log") as url:
            for n in args.new_tokens:
                for _ in range(args.reps):
                    record(model, n, "vllm_server", [url])
    lines = [f"RLOO, 8 prompts x 4 samples, exactly N new tokens, LoRA r=16, {args.dtype}; medians of "
             f"{args.reps} fresh processes per line, {args.steps} steps each after a warm-up step", "",
             "| model | new tokens | engine | episodes/s | vs hf | rollout phase s | rollout speed vs hf | "
             "weight sync s |", "|---|---|---|---|---|---|---|---|"]
    for model in args.models:
        for n in args.new_tokens:
            hf = runs[(model, n, "hf")]
            for engine in ENGINES:
                rs = runs[(model, n, engine)]
                eps, rollout = median(rs, lambda r: r["eps"]), median(rs, lambda r: r["phases_s"]["generation"])
                hf_eps, hf_rollout = median(hf, lambda r: r["eps"]), median(hf, lambda r: r["phases_s"]["generation"])
                sync = f"{median(rs, lambda r: r['weight_sync_s']):.3f}" if engine != "hf" else "-"
                lines.append(f"| {model} | {n} | {engine} | {eps:.2f} | {eps / hf_eps:.2f}x | {rollout:.2f} | "
                             f"{hf_rollout / rollout:.2f}x | {sync} |")
    publish("rollout_engines", {f"{m} {n} {e}": r for (m, n, e), r in runs.items()}, lines, ["docs/rollout.md"])


if __name__ == "__main__":
    main()
