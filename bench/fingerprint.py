"""What the code trains, in a few numbers, recorded beside each results file it made.

A results file made before a change that moves what training computes (a sampler, a loss, a default setting) quotes
figures the code no longer makes. When a benchmark writes its results, bench/results/fingerprints.json records for it
the metrics of the first 2 RL steps of a short embedded-default run (1 torch thread, so any machine of the same
torch and transformers versions gets the same numbers) and the sha256 of the benchmark script's code (its syntax
tree without docstrings: a comment, a docstring or the layout can change without a rerun, anything that runs cannot).
tests/test_docs_results.py reruns the short run and hashes the script, and names the benchmark to rerun when either
moved.

Machines whose CPUs run torch's float32 kernels otherwise (another instruction set, AVX2 against AVX-512; another
vendor, whose CPUs MKL runs other code paths on) give the same run other last bits, and step 1's KL another fifth
digit. Each record names the kernels it was measured on; `--also-here` adds this machine's fingerprint of today's code
to every record, under this machine's kernels, where the test then looks. Run it only where nothing that trains has
changed since the results were made, i.e. where the test passes on a machine like the ones that made them. A new
record takes the other kernels' fingerprints of any record whose fingerprint on its kernels is its own (the same code).

    python bench/fingerprint.py                 # prints the current fingerprint and the kernels it ran on
    python bench/fingerprint.py --also-here     # records it beside every results file's own, for these kernels
"""

from __future__ import annotations

import argparse
import ast
import csv
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "bench" / "results" / "fingerprints.json"
# train.py's embedded default, 2 short RL steps, nothing but training and its metrics
ARGS = ["steps=2", "data.batch_size=4", "algo.response_length=8", "data.num_eval_prompts=4",
        "trainer.val_check_interval=1000", "callbacks.generation_samples=null", "callbacks.training_summary=null",
        "callbacks.curves=null", "callbacks.histograms=null", "callbacks.evaluation=null",
        "callbacks.model_checkpoint=null"]
METRICS = ("objective/scores", "objective/kl", "objective/entropy", "loss/policy_avg", "completions/mean_length")


def rl_step_rows(run_dir: Path) -> list[dict[str, str]]:
    """The rows of a run's metrics.csv that an RL step logged (held-out and evaluation rows left out), in order."""
    with open(run_dir / "csv" / "metrics.csv") as f:
        return [row for row in csv.DictReader(f) if row.get("objective/scores")]


def training_metrics(run_dir: Path) -> dict[str, float]:
    """{"<step>/<metric>": value rounded to 6 significant digits} from a run's metrics.csv."""
    rows = rl_step_rows(run_dir)
    return {f"{row['step']}/{name}": float(f"{float(row[name]):.6g}") for row in rows for name in METRICS
            if row.get(name)}


def moved(recorded: dict[str, float], today: dict[str, float]) -> list[str]:
    """The metrics whose value today is not the recorded one to its 6 significant digits. One step of the sixth digit
    is allowed: where a float32 sum's last bits differ (another CPU's kernels), a value close to a rounding boundary
    may round the other way. A move of the fifth digit of step 1's KL changes what a 150-step run samples."""
    def step(value: float) -> float:  # one unit of the sixth significant digit
        return 10.0 ** (math.floor(math.log10(abs(value))) - 5) if value else 0.0

    # both sides are rounded to 6 digits, so they differ by whole steps: 1.5 steps admits one, whatever the float error
    return sorted(name for name in recorded.keys() | today.keys()
                  if name not in recorded or name not in today
                  or abs(recorded[name] - today[name]) > 1.5 * max(step(recorded[name]), step(today[name])))


def measure() -> dict[str, float]:
    """The short run in a process of its own, on 1 torch thread."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        result = subprocess.run([sys.executable, str(ROOT / "train.py"), *ARGS, f"hydra.run.dir={tmp}/run"], cwd=tmp,
                                env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"the fingerprint run failed: {result.stderr[-2000:]}")
        return training_metrics(Path(tmp) / "run")


def kernels() -> str:
    """What decides the last bits of a float32 run on this CPU: torch's CPU capability and the CPU's vendor."""
    import torch

    vendor = "unknown vendor"
    if Path("/proc/cpuinfo").exists():
        vendor = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                       if line.startswith("vendor_id")), vendor)
    return f"{torch.backends.cpu.get_cpu_capability()}, {vendor}"


UNKNOWN_KERNELS = "unknown"  # a record's own kernels, where it does not name them (made before records did)


def fingerprints_by_kernels(made: dict) -> dict[str, dict[str, float]]:
    """Every fingerprint a record holds, by the kernels it was measured on: its own and those added for others."""
    return {made.get("kernels", UNKNOWN_KERNELS): made["training"], **made.get("training_on", {})}


def expected_training(made: dict, here: str) -> dict[str, float]:
    """The fingerprint a record holds for kernels `here`; for kernels it names none for, the one measured on
    unnamed kernels (unlike every named one), else its own."""
    held = fingerprints_by_kernels(made)
    return held.get(here, held.get(UNKNOWN_KERNELS, made["training"]))


def code_sha256(script: Path) -> str:
    """sha256 of what the script runs: its syntax tree, docstrings dropped (comments and layout are not in it), and
    the check that it takes no options (bench/command_line.py), which computes nothing."""
    tree = ast.parse(script.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and is_docstring(node):
            node.body = node.body[1:]
        if isinstance(node, (ast.Module, ast.If)):
            node.body = [statement for statement in node.body if not is_options_check(statement)]
    return hashlib.sha256(canonical(tree).encode()).hexdigest()


def is_options_check(statement) -> bool:
    """`from command_line import takes_no_options`, or its call."""
    if isinstance(statement, ast.ImportFrom):
        return statement.module == "command_line"
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
            and isinstance(statement.value.func, ast.Name) and statement.value.func.id == "takes_no_options")


def is_docstring(node) -> bool:
    first = node.body[0] if node.body else None
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


def canonical(node) -> str:
    """The tree as text, alike on every Python the package admits: fields that are None or empty are left out (ast.dump
    writes them on 3.11 and 3.12, not on 3.13; 3.12 added type_params, empty in code without type parameters)."""
    if isinstance(node, ast.AST):
        fields = ", ".join(f"{name}={canonical(value)}" for name, value in ast.iter_fields(node)
                           if value is not None and value != [])
        return f"{type(node).__name__}({fields})"
    if isinstance(node, list):
        return f"[{', '.join(canonical(item) for item in node)}]"
    return repr(node)


def record(*names: str, script: Path | None = None) -> None:
    """Records the results NAMES as made by `script` (default: the running __main__) and the code of today (one
    short run for all of them)."""
    script = Path(script or sys.modules["__main__"].__file__).resolve()
    registry = json.loads(REGISTRY.read_text()) if REGISTRY.exists() else {}
    here, today = kernels(), measure()
    made = {"script": script.relative_to(ROOT).as_posix(), "code_sha256": code_sha256(script), "kernels": here,
            "training": today}
    # the same code measured on other kernels by another record: the same fingerprints there
    for other in registry.values():
        held = fingerprints_by_kernels(other)
        if here in held and not moved(held[here], today):
            made["training_on"] = {k: fp for k, fp in {**made.get("training_on", {}), **held}.items() if k != here}
    registry.update(dict.fromkeys(names, made))
    REGISTRY.write_text(json.dumps(dict(sorted(registry.items())), indent=1) + "\n")


def record_here() -> dict[str, float]:
    """Today's fingerprint, on this machine's kernels, beside every record's own (see the module's doc)."""
    here, today = kernels(), measure()
    registry = json.loads(REGISTRY.read_text())
    for made in registry.values():
        if made.get("kernels", UNKNOWN_KERNELS) != here:
            made.setdefault("training_on", {})[here] = today
    REGISTRY.write_text(json.dumps(registry, indent=1) + "\n")
    return today


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--also-here", action="store_true", help="record this machine's fingerprint beside each "
                        "results file's own, for these kernels")
    training = record_here() if parser.parse_args().also_here else measure()
    print(json.dumps({"kernels": kernels(), "training": training}, indent=1))
