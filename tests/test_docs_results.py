"""Figures the docs quote from a benchmark are the benchmark's results file, never retyped: every
`<!-- results:NAME -->` block of docs/*.md holds bench/results/NAME.md as the benchmark wrote it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_results_block_in_the_docs_is_its_results_file():
    block = re.compile(r"<!-- results:(\w+) -->\n(.*?)\n?<!-- /results -->", re.S)
    blocks = [(page, name, text) for page in (ROOT / "docs").glob("*.md")
              for name, text in block.findall(page.read_text())]
    assert blocks, "no results block found"
    for page, name, text in blocks:
        results = (ROOT / "bench" / "results" / f"{name}.md").read_text().strip()
        assert text.strip() == results, f"{page.name}: the {name} block differs from bench/results/{name}.md"
