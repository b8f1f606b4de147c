"""The embedded default: a tiny pythia-architecture model and tokenizer, built by scripts/build_assets.py."""

from pathlib import Path

TINY_PYTHIA = str(Path(__file__).parent / "tiny-pythia")


def asset_path(name: str) -> str:
    """Absolute path of a shipped asset directory (used by the `asset:` config resolver)."""
    path = Path(__file__).parent / name
    if not path.exists():
        raise FileNotFoundError(f"no shipped asset {name!r} in {path.parent}; run `make assets`.")
    return str(path)
