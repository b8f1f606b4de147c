"""What the test suite costs on this machine: `make test-fast` (the unit tier), `make test-main`, `make test-vllm` and
`make test-lowest` timed from this checkout, with the vLLM and lowest-versions environments' builds timed on their own
when they are not there yet (a fresh clone), pytest's 30 slowest tests, and the tests and seconds per file.

    make setup && .venv/bin/python bench/test_suite.py               # every part
    make setup && .venv/bin/python bench/test_suite.py --main-only   # make test-fast and make test-main

Writes bench/results/test_suite.json and .md (quoted in docs/testing.md).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from fingerprint import kernels
from results_blocks import ROOT, publish


def timed_make(target: str, *pytest_args: str) -> tuple[float, int]:
    """Seconds and exit code of `make <target>` (pytest's arguments through ARGS), its output passed through."""
    start = time.perf_counter()
    done = subprocess.run(["make", target, f"ARGS={' '.join(pytest_args)}"], cwd=ROOT)
    return time.perf_counter() - start, done.returncode


def cases(junit: Path) -> list[dict]:
    """Every test case of a junit report: file, name, seconds, outcome."""
    if not junit.exists():
        return []
    rows = []
    for case in ET.parse(junit).iter("testcase"):
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        rows.append({"file": case.get("classname", "").replace(".", "/") + ".py", "name": case.get("name"),
                     "seconds": float(case.get("time", 0)), "outcome": outcome})
    return rows


def run_part(target: str, out: Path) -> dict:
    junit = out / f"{target}.xml"
    seconds, code = timed_make(target, "--durations=30", f"--junitxml={junit}")
    rows = cases(junit)
    return {"target": target, "seconds": round(seconds, 1), "exit_code": code, "cases": rows,
            "outcomes": dict(collections.Counter(r["outcome"] for r in rows))}


def timed_build(target: str, venv: str) -> float | None:
    """Seconds of `make <target>` where the environment is not built yet, else None."""
    if (ROOT / venv / "bin" / ".installed").exists():
        return None
    start = time.perf_counter()
    subprocess.run(["make", target], cwd=ROOT, check=True)
    return time.perf_counter() - start


MAKE_TEST = ("test-main", "test-vllm", "test-lowest")  # what make test runs


def table(parts: list[dict], builds: dict[str, float | None], earlier_builds: dict[str, float]) -> list[str]:
    whole = [p for p in parts if p["target"] in MAKE_TEST]
    lines = [f"Measured with `python bench/test_suite.py` on {os.cpu_count()} CPU cores ({kernels()}; wall times "
             f"compare on one machine only).", "",
             "| part | wall time | tests |", "|---|---|---|"]
    for part in parts:
        outcomes = ", ".join(f"{n} {k}" for k, n in sorted(part["outcomes"].items()))
        lines.append(f"| `make {part['target']}` | {part['seconds'] / 60:.1f} min | {outcomes} |")
    if len(whole) == len(MAKE_TEST):
        total = sum(p["seconds"] for p in whole)
        lines.append(f"| `make test` ({', '.join(MAKE_TEST)}; the environments built) | {total / 60:.1f} min | |")
    for target, seconds in builds.items():
        if seconds is not None:
            lines.append(f"| `make {target}` (a fresh clone only) | {seconds / 60:.1f} min | |")
    for target, seconds in earlier_builds.items():
        if builds.get(target) is None:
            lines.append(f"| `make {target}` (a fresh clone only; an earlier run) | {seconds / 60:.1f} min | |")
    # each test once: test-lowest reruns some of test-main's tests in another environment
    every = sorted((c for p in whole if p["target"] != "test-lowest" for c in p["cases"]), key=lambda c: -c["seconds"])
    lines += ["", "The 30 slowest tests (seconds in the test itself; workers run them side by side):", "",
              "| seconds | test |", "|---|---|"]
    lines += [f"| {c['seconds']:.1f} | `{c['file']}::{c['name']}` |" for c in every[:30]]
    per_file = collections.defaultdict(lambda: [0, 0.0])
    for case in every:
        per_file[case["file"]][0] += 1
        per_file[case["file"]][1] += case["seconds"]
    lines += ["", "Tests and test-seconds per file:", "", "| file | tests | seconds |", "|---|---|---|"]
    lines += [f"| `{name}` | {n} | {s:.0f} |" for name, (n, s) in sorted(per_file.items())]
    return lines


def earlier_build_seconds() -> dict[str, float]:
    """The build times the previous results file recorded (bench/results/test_suite.json), by make target."""
    import json

    path = ROOT / "bench" / "results" / "test_suite.json"
    try:
        builds = json.loads(path.read_text()).get("builds_s") or {}
    except (OSError, ValueError):
        return {}
    return {target: float(seconds) for target, seconds in builds.items() if isinstance(seconds, (int, float))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--main-only", action="store_true", help="time make test-main alone")
    args = parser.parse_args()
    builds = {} if args.main_only else {"setup-vllm": timed_build("setup-vllm", ".venv-vllm"),
                                        "setup-lowest": timed_build("setup-lowest", ".venv-lowest")}
    earlier_builds = earlier_build_seconds()  # an environment built before this run: the figure measured then
    with tempfile.TemporaryDirectory() as out:
        parts = [run_part("test-fast", Path(out)), run_part("test-main", Path(out))]
        if not args.main_only:
            parts += [run_part("test-vllm", Path(out)), run_part("test-lowest", Path(out))]
    kept = {t: s for t, s in earlier_builds.items() if builds.get(t) is None and t in builds}
    publish("test_suite", {"parts": parts, "builds_s": {**builds, **kept}, "builds_from_earlier_run": sorted(kept)},
            table(parts, builds, kept), ["docs/testing.md"], fingerprint=False)  # timings of the tests
    if any(p["exit_code"] for p in parts):
        sys.exit(f"error: {', '.join(p['target'] for p in parts if p['exit_code'])} failed; the times above are of a "
                 f"failing suite")


if __name__ == "__main__":
    main()
