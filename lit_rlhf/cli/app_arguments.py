"""An app's command line as Hydra reads it, by Hydra's own argument parser: the overrides apart from the flags and
their values (`--cfg job`, `--config-dir DIR`), and the flags that choose the primary config (`--config-path/-cp`,
`--config-name/-cn`, `--config-dir/-cd`). The apps' one-line errors and `--help` compose as Hydra does, and a
command that repeats the run (the printed resume command) repeats those flags."""

from __future__ import annotations

import argparse
import contextlib
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AppArguments:
    overrides: list[str]
    config_dir: Path  # the primary config's directory: the app's conf/, or --config-path's
    config_name: str  # the app's, or --config-name's
    extra_config_dir: Path | None  # --config-dir's, searched after config_dir
    wants_help: bool
    printed_config: str | None  # --cfg's part (job, hydra, all), or "info": Hydra prints it and runs nothing


def hydra_arguments(argv: list[str]) -> argparse.Namespace | None:
    """Hydra's parse of the command line; None where Hydra's parser refuses it (Hydra says why when it parses it)."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()

    def refuse(message: str):
        raise ValueError(message)

    parser.error = refuse  # never print argparse's usage here: Hydra's own parse prints it
    try:
        return parser.parse_args(argv)
    except (ValueError, argparse.ArgumentError):
        return None


def app_arguments(argv: list[str], config_dir: Path, config_name: str) -> AppArguments:
    """sys.argv (the app's file first) read as Hydra reads it; config_dir and config_name are the app's own."""
    args = hydra_arguments(argv[1:])
    if args is None:
        return AppArguments([a for a in argv[1:] if not a.startswith("-")], config_dir, config_name, None,
                            any(a in ("--help", "-h") for a in argv[1:]), None)
    if args.config_path is not None:  # relative to the app's file, as in @hydra.main
        config_dir = Path(argv[0]).resolve().parent / args.config_path
    extra = Path(args.config_dir).resolve() if args.config_dir is not None else None
    return AppArguments(list(args.overrides), config_dir, args.config_name or config_name, extra, args.help,
                        args.cfg or ("info" if args.info is not None else None))


def config_flags(argv: list[str]) -> str:
    """The flags of `argv` that choose the primary config, as shell words (--config-dir's directory made absolute:
    the command may be run from elsewhere); "" where there are none."""
    args = hydra_arguments(argv)
    if args is None:
        return ""
    flags = []
    if args.config_path is not None:
        flags += ["--config-path", args.config_path]
    if args.config_name is not None:
        flags += ["--config-name", args.config_name]
    if args.config_dir is not None:
        flags += ["--config-dir", str(Path(args.config_dir).resolve())]
    return shlex.join(flags)


# --config-dir of this process's command line: composition for its errors and --help searches it as Hydra does
_command_line_config_dir: list[Path] = []


def search_command_line_config_dir(extra: Path | None) -> None:
    _command_line_config_dir[:] = [extra] if extra is not None else []


@contextlib.contextmanager
def hydra_initialized(config_dir: Path, job_name: str = "app") -> Iterator[None]:
    """initialize_config_dir(config_dir), with the command line's --config-dir searched after it (before the
    structured configs), where Hydra's main puts it."""
    from hydra import initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(config_dir), job_name=job_name):
        if _command_line_config_dir:
            from hydra._internal.hydra import Hydra
            from hydra._internal.utils import create_config_search_path
            from hydra.core.config_search_path import SearchPathQuery
            from hydra.core.global_hydra import GlobalHydra

            search_path = create_config_search_path(f"file://{config_dir}")
            search_path.prepend(provider="command-line", path=f"file://{_command_line_config_dir[0]}",
                                anchor=SearchPathQuery(provider="schema"))
            GlobalHydra.instance().clear()
            Hydra.create_main_hydra2(task_name=job_name, config_search_path=search_path)
        yield
