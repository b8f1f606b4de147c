"""The GPU check: one command for any machine with a CUDA GPU, offline, installing nothing; at most 8 minutes.

    python bench/gpu.py                  # writes bench/results/gpu_check.{md,json} (and the docs' results block)
    python bench/gpu.py --shapes pythia-1b --algos grpo --merge   # those rows again, the others kept
    python bench/gpu.py --shapes --merge  # the correctness pass alone, the rows kept
    python bench/gpu.py --suite extended --algos rloo --impls floor "lit_rlhf eager" --merge   # those rows again
    python bench/gpu.py --suite extended --algos rloo --tokens 256 --merge   # RLOO's rows at 256 new tokens again
    python bench/gpu.py --device cpu --shapes tiny --steps 1 --warmup 0 --out OUT   # its CPU path

Needs what the set-up installs (torch built with CUDA, transformers, peft, lightning, vaderSentiment) and pytest for
the correctness pass; TRL's trainers are measured too when `import trl` works (or `make setup-trl` made .venv-trl).
No download: the models are pythia's 160m and 1b shapes with random weights, built from their configurations into
bench/.cache (bench/workload.py) before the first measurement.

Performance, each measurement a process of its own (on a GPU forked from a server that imported the libraries
once, --processes), on bench/workload.py's work (8 prompts x 4 samples per step, 32 forced new tokens, LoRA r=16,
AdamW, VADER reward), weights in --dtype (bfloat16), per shape and algorithm:
- RLOO: bench/lit_step.py against the plain-PyTorch floor bench/floor.py and TRL's RLOOTrainer (bench/trl_step.py);
- GRPO (dapo, beta 0.04): bench/lit_step.py --algo grpo against bench/grpo_floor.py and TRL's GRPOTrainer;
- PPO: bench/lit_step.py --algo ppo (4 epochs) against bench/ppo_floor.py (value head and GAE in a plain loop; no TRL
  row: TRL's PPOTrainer takes a reward model, not a reward function).
--suite extended measures other rows (bench/gpu_extended.py): long responses, distillation, PPO's floor, memory and
eager settings, each with its sampling bound, into gpu_extended.{md,json}.
"lit_rlhf" is the default (rollout.compile_mode=auto: the decoding step as CUDA graphs on CUDA), "lit_rlhf eager"
plain generate() (rollout.compile_mode=null).
Reported: episodes/s, generation tokens/s, peak allocated GPU memory and the phase holding it; in the extended suite,
the CUDA graphs each measured lit_rlhf step records (none where the compiled step only replays).
Correctness: `pytest tests/device` on the same device (bf16 autocast training, the loss contract, exact resume).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
TRL_VENV = ROOT / ".venv-trl" / "bin" / "python"
NEEDED = ("torch", "transformers", "peft", "lightning", "vaderSentiment", "pytest")
# imported once by the fork server, whose forks run the measurements on a GPU: a fresh interpreter would spend
# several seconds of every measurement importing them
PRELOAD = ("torch", "transformers", "peft", "lightning", "lit_rlhf", "vaderSentiment.vaderSentiment")


def trl_python() -> str | None:
    """The interpreter that has TRL: this one, or the bench-only .venv-trl; None without TRL."""
    if importlib.util.find_spec("trl") is not None:
        return sys.executable
    return str(TRL_VENV) if TRL_VENV.exists() else None


def implementations(algo: str, device: str = "cuda") -> dict[str, list[str]]:
    """The commands measured for `algo`; on a CPU the default engine is the eager one, which runs once."""
    lit = [sys.executable, "lit_step.py", "--algo", algo] + (["--beta", "0.04"] if algo == "grpo" else [])
    impls = {"floor": {"rloo": [sys.executable, "floor.py"],
                       "grpo": [sys.executable, "grpo_floor.py", "--beta", "0.04"],
                       "ppo": [sys.executable, "ppo_floor.py"]}.get(algo),
             "lit_rlhf": lit,
             "lit_rlhf eager": [*lit, "--compile-mode", "none"] if device == "cuda" else None}
    trl = trl_python()
    if trl is not None and algo in ("rloo", "grpo"):
        impls["trl"] = [trl, "trl_step.py", "--algo", algo, "--beta", "0.04" if algo == "grpo" else "0.05"]
    return {impl: command for impl, command in impls.items() if command is not None}


def run_script(argv: list[str], env: dict[str, str], stdout_path: str, stderr_path: str) -> None:
    """In a fork of the fork server: `python argv...` in bench/ with env, as a fresh interpreter would run it, its
    output written to the two files; exits with the script's exit code."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(BENCH)
    sys.path[:0] = [str(BENCH), str(ROOT)]
    sys.argv = list(argv)
    code = 0
    with open(stdout_path, "w") as out, open(stderr_path, "w") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout, sys.stderr = os.fdopen(1, "w", buffering=1, closefd=False), os.fdopen(2, "w", closefd=False)
        try:
            runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as exit_:
            if exit_.code is not None and not isinstance(exit_.code, int):
                print(exit_.code, file=sys.stderr)
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


def run_forked(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """Runs a bench script in a fork of a server process that imported PRELOAD (without touching CUDA, so that each
    fork starts its own CUDA context as a fresh process does). -> its exit code, stdout and stderr"""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([name for name in PRELOAD if importlib.util.find_spec(name.split(".")[0])])
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        child = context.Process(target=run_script, args=(argv, env, str(out), str(err)))
        child.start()
        child.join()
        return subprocess.CompletedProcess(argv, child.exitcode, out.read_text() if out.exists() else "",
                                           err.read_text() if err.exists() else "")


def measure(command: list[str], shape: str, args: argparse.Namespace, env: dict[str, str], steps: int | None = None,
            warmup: int | None = None, new_tokens: int | None = None) -> dict:
    """One measurement: the command on `shape`, with the run's settings unless given. -> its JSON line, wall_s"""
    steps, warmup = args.steps if steps is None else steps, args.warmup if warmup is None else warmup
    command = [*command, "--model", shape, "--dtype", args.dtype, "--steps", str(steps), "--warmup", str(warmup),
               "--new-tokens", str(args.new_tokens if new_tokens is None else new_tokens)]
    start = time.perf_counter()
    done = run_forked(command[1:], env) if args.forked and command[0] == sys.executable else None
    if done is not None and done.returncode != 0 and "forked subprocess" in done.stderr:
        # an import of the server's touched CUDA (a fork cannot use it then): fresh processes from here on
        print("the fork server's processes cannot use CUDA; measuring in fresh processes", flush=True)
        args.forked, done = False, None
    if done is None:
        done = subprocess.run(command, cwd=BENCH, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["exit code " + str(done.returncode)])[-1][:300]}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "wall_s": time.perf_counter() - start,
            "measured": time.strftime("%Y-%m-%d")}  # merged results join rows of several days (and code)


def correctness(env: dict[str, str]) -> dict:
    """pytest tests/device on the device: its summary line, exit code and the tests that failed."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/device"], cwd=ROOT,
                          env=env, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    return {"exit_code": done.returncode, "summary": lines[-1] if lines else done.stderr[-300:],
            "failed": [line for line in lines if line.startswith(("FAILED", "ERROR"))]}


def table(data: dict) -> list[str]:
    versions = ", ".join(f"{name} {version}" for name, version in data["versions"].items())
    lines = [f"{data['device_name']} ({versions}); weights in {data['dtype']}; 8 prompts x 4 samples, "
             f"{data['new_tokens']} forced new tokens, LoRA; {data['steps']} measured steps after {data['warmup']} "
             f"warm-up per process; "
             f"`python bench/gpu.py` ({data['minutes']:.1f} min"
             + (f" in all, {data['joined_runs']} runs joined with --merge" if data.get("joined_runs") else "")
             + ").", "",
             f"| shape | algo | impl | episodes/s | vs floor | generation tokens/s | "
             f"{'peak GPU memory' if data['device'] == 'cuda' else 'peak RSS'} MiB | peak in | step s | first step s |",
             "|---|---|---|---:|---:|---:|---:|---|---:|---:|"]
    for row in data["runs"]:
        r = row["result"]
        if "error" in r:
            lines.append(f"| {row['shape']} | {row['algo']} | {row['impl']} | failed: {r['error']} | | | | | | |")
            continue
        floor = next((x["result"] for x in data["runs"] if x["shape"] == row["shape"] and x["algo"] == row["algo"]
                      and x["impl"] == "floor"), {})
        ratio = f"{r['eps'] / floor['eps']:.2f}x" if floor.get("eps") else ""
        memory = r["peak_gpu_mib"] if data["device"] == "cuda" else r["peak_rss_mib"]
        lines.append(f"| {row['shape']} | {row['algo']} | {row['impl']} | {r['eps']:.2f} | {ratio} | "
                     f"{r['tokens_per_s']:.0f} | {memory:.0f} | {r.get('peak_phase') or ''} | {r['step_s']:.3f} | "
                     f"{'' if r.get('first_step_s') is None else format(r['first_step_s'], '.1f')} |")
    lines += ["", f"Correctness (`pytest tests/device` on the device): {data['correctness']['summary']}."]
    lines += [f"- {line}" for line in data["correctness"].get("failed", [])]
    return lines


def results_path(out: Path | None, suite: str = "check") -> Path:
    return (out or BENCH / "results") / ("gpu_check.json" if suite == "check" else "gpu_extended.json")


def merged(previous: dict, new: dict) -> dict:
    """previous's rows, those measured again replaced in place by new's (same shape, algorithm and implementation);
    new's correctness pass where it ran one, else previous's; the minutes of both."""
    for key in ("device_name", "dtype", "steps", "warmup", "new_tokens"):
        if previous.get(key) != new[key]:
            sys.exit(f"error: --merge joins runs of the same settings on the same GPU, but {key} was "
                     f"{previous.get(key)!r} and is {new[key]!r} now; rerun with the earlier one, or without --merge.")
    key = lambda run: (run["shape"], run["algo"], run["impl"], run.get("new_tokens"))  # noqa: E731
    fresh = {key(run): run for run in new["runs"]}
    runs = [fresh.pop(key(run), run) for run in previous["runs"]] + list(fresh.values())
    checks = previous["correctness"] if new["correctness"]["exit_code"] is None else new["correctness"]
    return {**new, "runs": runs, "correctness": checks, "minutes": previous["minutes"] + new["minutes"],
            "joined_runs": previous.get("joined_runs", 1) + 1}


def write(data: dict, out: Path | None, name: str = "gpu_check", tabled=None) -> list[str]:
    """The results so far as NAME.{json,md}: in bench/results (and the docs' results block) by default, else in OUT.
    tabled: the table's lines of the data (default: the check's table)."""
    lines = (tabled or table)(data)
    if out is None:
        from results_blocks import publish

        publish(name, data, lines, ["docs/performance.md"], echo=False, fingerprint=False)
    else:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(data, indent=2))
        (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--suite", default="check", choices=["check", "extended"],
                        help="check: the grid of shapes x algorithms x implementations (gpu_check); extended: long "
                             "responses, distillation, PPO's floor, memory and eager rows (gpu_extended, "
                             "bench/gpu_extended.py)")
    parser.add_argument("--shapes", nargs="*", default=["pythia-160m", "pythia-1b"],
                        help="none: the correctness pass alone (with --merge: added to the earlier results); "
                             "--suite extended: the small and the large shape")
    parser.add_argument("--long-tokens", nargs="+", type=int, default=[1024, 256],
                        help="--suite extended: the long responses' new tokens")
    parser.add_argument("--tokens", nargs="+", type=int, default=None,
                        help="--suite extended: only the rows of these new tokens (e.g. one long row again, with "
                             "--merge); default: all")
    parser.add_argument("--algos", nargs="*", default=None, choices=["rloo", "grpo", "ppo", "distill"],
                        help="default: rloo grpo ppo; --suite extended: those rows alone (default: every row, "
                             "distill included; none: the correctness pass alone)")
    parser.add_argument("--impls", nargs="+", default=None,
                        help="measure only these implementations (e.g. one row again, with --merge); default: all")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--skip-checks", action="store_true", help="leave out the correctness pass")
    parser.add_argument("--max-minutes", type=float, default=7.0,
                        help="no measurement starts after this many minutes; those left are rows 'not run'")
    parser.add_argument("--processes", choices=["forked", "fresh"], default=None,
                        help="forked: each measurement in a fork of a process that imported the libraries (default on "
                             "CUDA); fresh: each in a new interpreter (default on a CPU)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows of the previous results that this run does not measure")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write gpu_check.json and gpu_check.md (default on CUDA: bench/results)")
    args = parser.parse_args()
    args.forked = (args.processes or ("forked" if args.device == "cuda" else "fresh")) == "forked"
    if args.suite == "check" and "distill" in (args.algos or []):
        sys.exit("error: --algos distill is a row of --suite extended only; add --suite extended, or leave it out.")
    if args.algos is None:
        args.algos = ["rloo", "grpo", "ppo"] + (["distill"] if args.suite == "extended" else [])
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        sys.exit(f"error: bench/gpu.py needs {', '.join(missing)}; run the set-up of README.md (make setup), "
                 f"then pip install pytest.")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda, but torch sees no CUDA device (torch.cuda.is_available() is False); run this "
                 "on a machine with an NVIDIA GPU and a CUDA build of torch, or pass --device cpu for the CPU path.")
    if args.out is None and args.device == "cpu":
        sys.exit("error: the CPU path writes no results file of the repository; pass --out DIR.")
    # lit_rlhf from this checkout, ahead of whatever PYTHONPATH already holds (packages installed with --target)
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.environ.update({"HF_HUB_OFFLINE": "1", "PYTHONPATH": python_path, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
    env = dict(os.environ)  # the fork server imports the libraries under it too
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the scripts take cuda when they see it
    if args.suite == "extended" and len(args.shapes) != 2:
        sys.exit(f"error: --suite extended takes two --shapes, the small and the large one, not {args.shapes}; "
                 f"e.g. --shapes pythia-160m pythia-1b.")
    earlier = results_path(args.out, args.suite)
    if args.merge and not earlier.exists():
        sys.exit(f"error: --merge, but there are no earlier results at {earlier}; run without --merge.")
    previous = json.loads(earlier.read_text()) if args.merge else None
    start = time.perf_counter()
    data = {"device": args.device, "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "CPU",
            "dtype": args.dtype, "steps": args.steps, "warmup": args.warmup, "new_tokens": args.new_tokens,
            "runs": [], "correctness": {"summary": "not run (--skip-checks)", "exit_code": None}, "minutes": 0.0,
            "versions": {name: importlib.metadata.version(name) for name in ("torch", "transformers", "peft",
                                                                             "lightning")}}
    def so_far() -> dict:  # this run's results, with --merge joined to the earlier ones
        return merged(previous, data) if args.merge else data

    if args.suite == "extended":
        return extended(args, env, data, so_far, start)

    known = {impl for algo in args.algos for impl in implementations(algo, args.device)}
    if args.impls and (unknown := sorted(set(args.impls) - known)):
        sys.exit(f"error: --impls {unknown[0]!r} is not an implementation measured for --algos {' '.join(args.algos)} "
                 f"on {args.device}; choose from: {', '.join(sorted(known))}.")
    so_far()  # with --merge: the settings match, before anything runs
    sys.path[:0] = [str(BENCH), str(ROOT)]
    import workload

    for shape in args.shapes:  # built here, before any timing (the first measurement of a shape used to build it)
        workload.model_path(shape)
    if not args.skip_checks:  # first, so that a run stopped early still says whether the maths holds here
        data["correctness"] = correctness(env)
        print(f"correctness: {data['correctness']['summary']}", flush=True)
    for shape in args.shapes:
        for algo in args.algos:
            for impl, command in implementations(algo, args.device).items():
                if args.impls and impl not in args.impls:
                    continue
                if (time.perf_counter() - start) / 60 > args.max_minutes:
                    result = {"error": f"not run: past --max-minutes {args.max_minutes:g}"}
                else:
                    result = measure(command, shape, args, env)
                data["runs"].append({"shape": shape, "algo": algo, "impl": impl, "result": result})
                data["minutes"] = (time.perf_counter() - start) / 60
                # after every measurement: a stopped run keeps what it measured
                write(so_far(), args.out)
                print(json.dumps(data["runs"][-1]), flush=True)
    data["minutes"] = (time.perf_counter() - start) / 60
    print("\n".join(write(so_far(), args.out)))
    if data["correctness"]["exit_code"] not in (None, 0):
        sys.exit(f"the correctness pass failed: {data['correctness']['summary']}")


def extended(args: argparse.Namespace, env: dict[str, str], data: dict, so_far, start: float) -> None:
    """--suite extended: the correctness pass (unless --skip-checks), then bench/gpu_extended.py's rows (those of
    --algos and --impls), each with its sampling bound."""
    sys.path[:0] = [str(BENCH), str(ROOT)]
    import gpu_extended
    import torch
    import workload

    small, large = args.shapes
    suite = gpu_extended.rows(small, large, args.new_tokens, args.long_tokens, trl_python())
    if args.impls and (unknown := sorted(set(args.impls) - {row["impl"] for row in suite})):
        sys.exit(f"error: --impls {unknown[0]!r} is not a row of --suite extended (each name one argument, quoted "
                 f"where it has spaces); choose from: {', '.join(sorted({row['impl'] for row in suite}))}.")
    if args.tokens and (unknown := sorted(set(args.tokens) - {row["new_tokens"] for row in suite})):
        sys.exit(f"error: --tokens {unknown[0]} is the new tokens of no row of --suite extended; choose from: "
                 f"{', '.join(map(str, sorted({row['new_tokens'] for row in suite})))} (--long-tokens sets the long "
                 f"ones).")
    device = torch.device(args.device)
    data["bandwidth_gbs"] = gpu_extended.memory_bandwidth_gbs(device)
    dtype_bytes = torch.empty((), dtype=getattr(torch, args.dtype)).element_size()
    sizes = {shape: gpu_extended.model_bytes(workload.model_path(shape), dtype_bytes) for shape in (small, large)}
    if not args.skip_checks:  # first, as in the check: a run stopped early still says whether the maths holds here
        data["correctness"] = correctness(env)
        print(f"correctness: {data['correctness']['summary']}", flush=True)
    for row in suite:
        command = row.pop("command")
        if ((args.impls and row["impl"] not in args.impls) or row["algo"] not in args.algos
                or (args.tokens and row["new_tokens"] not in args.tokens)):
            continue
        row["bound_tokens_per_s"] = gpu_extended.decoding_bound(sizes[row["shape"]], row["new_tokens"],
                                                                data["bandwidth_gbs"])
        if (time.perf_counter() - start) / 60 > args.max_minutes:
            row["result"] = {"error": f"not run: past --max-minutes {args.max_minutes:g}"}
        else:
            row["result"] = measure(command, row["shape"], args, env, row["steps"], row["warmup"], row["new_tokens"])
        data["runs"].append(row)
        data["minutes"] = (time.perf_counter() - start) / 60
        write(so_far(), args.out, "gpu_extended", gpu_extended.table)
        print(json.dumps(row), flush=True)
    data["minutes"] = (time.perf_counter() - start) / 60
    print("\n".join(write(so_far(), args.out, "gpu_extended", gpu_extended.table)))
    if data["correctness"]["exit_code"] not in (None, 0):
        sys.exit(f"the correctness pass failed: {data['correctness']['summary']}")


if __name__ == "__main__":
    main()
