"""The embedded models: the default tiny pythia-architecture model (scripts/build_assets.py), the arithmetic task's
(scripts/build_arithmetic.py) and the calculator tool-use task's (scripts/build_calculator.py)."""

from pathlib import Path

TINY_PYTHIA = str(Path(__file__).parent / "tiny-pythia")
TINY_ARITHMETIC = str(Path(__file__).parent / "tiny-arithmetic")
TINY_CALCULATOR = str(Path(__file__).parent / "tiny-calculator")


def asset_path(name: str) -> str:
    """Absolute path of a shipped asset directory (used by the `asset:` config resolver)."""
    path = Path(__file__).parent / name
    if not path.exists():
        raise FileNotFoundError(f"no shipped asset {name!r} in {path.parent}; run `make assets`.")
    return str(path)
