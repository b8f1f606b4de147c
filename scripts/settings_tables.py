"""Rewrites the settings tables of docs/configuration.md from the dataclasses' field docs."""

import argparse
from pathlib import Path

from lit_rlhf.cli.settings_tables import fill_tables

if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()  # --help; no options
    page = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
    page.write_text(fill_tables(page.read_text()))
    print(f"Wrote {page}")
