"""The command line of a benchmark that takes no options: `--help` prints its docstring and exits, and any other
argument is refused with argparse's usage line, so that a typo or `--help` never starts a run of many minutes that
rewrites its results files."""

import argparse


def takes_no_options(doc: str | None) -> None:
    argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
