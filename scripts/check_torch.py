"""The torch that make's TORCH installed, against the range pyproject.toml admits (run by the Makefile's set-up before
the package installs): one line naming the installed release, the range and the fix, where pip would otherwise stop
with its resolver's report. A bare TORCH=torch takes PyPI's newest release, which may be past the range.

    python scripts/check_torch.py     # exit code 2 (and the line) if the installed torch is out of range
"""

from __future__ import annotations

import operator
import re
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPARE = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq,
           "!=": operator.ne}


def torch_range() -> str:
    """pyproject.toml's torch specifier, e.g. ">=2.9.1,<2.15"."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(re.sub(r"^torch\s*", "", d) for d in dependencies if re.match(r"torch\s*[<>=!]", d))


def release(text: str) -> tuple[int, ...]:
    """The release numbers of a version: "2.15.0+cu128" -> (2, 15, 0)."""
    return tuple(int(part) for part in re.match(r"\d+(\.\d+)*", text).group().split("."))


def admits(specifier: str, installed: str) -> bool:
    """Whether a specifier of release clauses (">=2.9.1,<2.15") admits a version; a local build tag is ignored."""
    for clause in specifier.split(","):
        op, bound = re.fullmatch(r"\s*(>=|<=|==|!=|<|>)\s*([\d.]+)\s*", clause).groups()
        have, want = release(installed), release(bound)
        width = max(len(have), len(want))
        if not COMPARE[op](have + (0,) * (width - len(have)), want + (0,) * (width - len(want))):
            return False
    return True


def main() -> int:
    installed, specifier = version("torch"), torch_range()
    if admits(specifier, installed):
        return 0
    print(f"error: TORCH installed torch {installed}, which lit_rlhf does not admit (torch{specifier}); pass a release "
          f'in that range, e.g. make train TORCH="torch{specifier}"', file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
