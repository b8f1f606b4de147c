"""Docs quote a benchmark's table through a results block: `<!-- results:NAME -->` ... `<!-- /results -->` holds
bench/results/NAME.md as the benchmark wrote it (tests/test_docs_results.py checks every block)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fill_results(name: str, pages: list[str]) -> None:
    """Every `results:NAME` block of pages (relative to the repository) becomes bench/results/NAME.md."""
    text = (ROOT / "bench" / "results" / f"{name}.md").read_text().strip()
    pattern = re.compile(rf"<!-- results:{name} -->.*?<!-- /results -->", re.S)
    for page in pages:
        path = ROOT / page
        path.write_text(pattern.sub(lambda _: f"<!-- results:{name} -->\n{text}\n<!-- /results -->", path.read_text()))


def machine() -> dict:
    """What a result's last digits depend on: the CPU count, torch's threads (OMP_NUM_THREADS), the versions of
    torch and transformers (another thread count adds the matrix products' terms in another order) and the CPU's
    kernels (bench/fingerprint.py)."""
    import os

    import torch
    import transformers
    from fingerprint import kernels

    return {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "torch": torch.__version__,
            "transformers": transformers.__version__, "kernels": kernels()}


def publish(name: str, data: dict, lines: list[str], pages: list[str], echo: bool = True,
            fingerprint: bool = True) -> None:
    """bench/results/NAME.json (data, with the machine it ran on) and NAME.md (lines), the md into the pages'
    results blocks, printed unless not echo; with fingerprint, what the code of today trains is recorded beside them
    (bench/fingerprint.py: a test then names the results the code has moved past)."""
    import json

    (ROOT / "bench" / "results" / f"{name}.json").write_text(json.dumps({**data, "machine": machine()}, indent=2))
    (ROOT / "bench" / "results" / f"{name}.md").write_text("\n".join(lines) + "\n")
    fill_results(name, pages)
    if echo:
        print("\n".join(lines))
    if fingerprint:  # once the results are written
        from fingerprint import record

        record(name)
