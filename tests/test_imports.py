"""`import lit_rlhf` imports what every run needs and nothing a run may not use: loggers, the Hydra app, datasets,
the VADER analyzer and math-verify load when a run uses them."""

import subprocess
import sys

from tests.helpers import ROOT

OPTIONAL = ("wandb", "tensorboard", "tensorboardX", "vaderSentiment", "hydra", "datasets", "math_verify", "optuna")


def test_import_lit_rlhf_loads_no_optional_library():
    code = ("import sys, lit_rlhf, lit_rlhf.callbacks, lit_rlhf.tasks.metrics; "
            f"print(','.join(m for m in {OPTIONAL!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "", result.stdout
