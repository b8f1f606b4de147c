"""lit_rlhf's imports run down the floors of scripts/import_graph.py, with no circle between modules."""

import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.integration  # runs a Trainer or an app


def test_imports_run_only_down_the_floors_and_form_no_circle():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "import_graph.py")], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 back-arrows; 0 circles" in result.stdout
