"""`import lit_rlhf` imports what every run needs and nothing a run may not use: loggers, the Hydra app, datasets,
the VADER analyzer and math-verify load when a run uses them; a module of ours imported alone (as a vLLM engine's
process imports its worker) loads no more of lit_rlhf than it needs."""

import subprocess
import sys

from tests.helpers import ROOT

OPTIONAL = ("wandb", "tensorboard", "tensorboardX", "vaderSentiment", "hydra", "datasets", "math_verify", "optuna")


def test_import_lit_rlhf_loads_no_optional_library_and_the_engine_process_loads_no_lightning():
    """One process: first what a vLLM engine's process imports of ours (its worker), which needs no Lightning, then
    what a run imports."""
    code = ("import sys, lit_rlhf.rollout.vllm_process, lit_rlhf.rollout.vllm_worker; "
            "print('lightning' in sys.modules or 'transformers' in sys.modules); "
            "import lit_rlhf, lit_rlhf.callbacks, lit_rlhf.tasks.metrics; "
            f"print(','.join(m for m in {OPTIONAL!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["False", ""], result.stdout


def test_the_packages_names_load_on_first_use():
    import lit_rlhf
    import lit_rlhf.models
    import lit_rlhf.rollout

    for package in (lit_rlhf, lit_rlhf.models, lit_rlhf.rollout):
        assert sorted(package.__all__) == sorted(package._EXPORTS)
        for name in package.__all__:
            assert getattr(package, name).__name__ == name
