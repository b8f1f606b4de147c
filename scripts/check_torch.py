"""The torch that make's TORCH installed, against the range pyproject.toml admits (run by the Makefile's set-up before
the package installs, with `packaging` installed beside torch): one line naming the installed release, the range and
the fix, where pip would otherwise stop with its resolver's report. A bare TORCH=torch takes PyPI's newest release,
which may be past the range.

    python scripts/check_torch.py     # exit code 2 (and the line) if the installed torch is out of range
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def torch_range() -> str:
    """pyproject.toml's torch specifier as it is written there, e.g. ">=2.9.1,<2.16"."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    line = next(line for line in dependencies if Requirement(line).name == "torch")
    return line.removeprefix("torch").strip()


def admits(specifier: str, installed: str) -> bool:
    """Whether the range admits a build: a local tag (2.14.1+cu128) is its release's build, and a pre-release of a
    release in the range is admitted (a nightly the user chose)."""
    return SpecifierSet(specifier).contains(Version(installed).public, prereleases=True)


def main() -> int:
    installed, specifier = version("torch"), torch_range()
    if admits(specifier, installed):
        return 0
    print(f"error: TORCH installed torch {installed}, which lit_rlhf does not admit (torch{specifier}); pass a release "
          f'in that range, e.g. make train TORCH="torch{specifier}"', file=sys.stderr)
    return 2


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()  # --help; no options
    sys.exit(main())
