"""rollout=vllm tests: they run where vLLM is installed (`make test-vllm` runs them in .venv-vllm) and skip,
with the reason, where it is not."""

import importlib.util
import os
from pathlib import Path

import pytest

from tests.helpers import ROOT


def unavailable_reason() -> str | None:
    if importlib.util.find_spec("vllm") is not None:
        return None
    log = Path(os.environ.get("VLLM_UNAVAILABLE_FILE", ROOT / ".venv-vllm.unavailable"))  # make test-vllm sets it
    why = log.read_text().strip().replace("\n", " / ") if log.is_file() else "`make setup-vllm` installs it"
    return f"vLLM is not installed in this environment ({why})"


def pytest_collection_modifyitems(config, items):
    reason = unavailable_reason()
    if reason is None:
        return
    for item in items:
        if "tests/vllm" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason=reason))
