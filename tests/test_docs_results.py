"""Figures the docs quote from a benchmark are the benchmark's results file, never retyped: every
`<!-- results:NAME -->` block of README.md and docs/*.md holds bench/results/NAME.md as the benchmark wrote it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_results_block_in_the_docs_is_its_results_file():
    block = re.compile(r"<!-- results:(\w+) -->\n(.*?)\n?<!-- /results -->", re.S)
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    blocks = [(page, name, text) for page in pages for name, text in block.findall(page.read_text())]
    assert {name for _, name, _ in blocks} >= {"algorithms", "calculator"}
    for page, name, text in blocks:
        results = (ROOT / "bench" / "results" / f"{name}.md").read_text().strip()
        assert text.strip() == results, f"{page.name}: the {name} block differs from bench/results/{name}.md"
