"""Algorithms from the user's own package: `python train.py algo=<name> 'hydra.searchpath=[pkg://my_algos.conf]'`
imports `my_algos.conf` (and so `my_algos`) before the config is composed, so that the settings dataclass the
package registers (lit_rlhf.config.registry.algorithm) types `algo/<name>.yaml` like a built-in one
(docs/extending.md). Only a package the command line names is imported."""

from __future__ import annotations

import importlib
import re

from lit_rlhf.errors import ConfigError

SEARCHPATH = re.compile(r"^\+{0,2}hydra\.searchpath=(.*)$")


def searchpath_packages(overrides: list[str]) -> list[str]:
    """The packages of the pkg:// entries of a hydra.searchpath override, in order."""
    packages = []
    for override in overrides:
        match = SEARCHPATH.match(override)
        if match:
            packages += re.findall(r"pkg://([A-Za-z_][\w.]*)", match.group(1))
    return packages


def import_searchpath_packages(overrides: list[str]) -> None:
    """Imports the packages a hydra.searchpath override names, so that what they register is known when the
    config is composed."""
    for package in searchpath_packages(overrides):
        try:
            importlib.import_module(package)
        except ImportError as err:
            raise ConfigError(f"hydra.searchpath names pkg://{package}, which does not import ({err}); install the "
                              f"package (pip install -e <its folder>) or put its folder on PYTHONPATH.") from None
