"""data.num_eval_prompts=0 trains on every prompt: the reports that read held-out prompts (samples, the before/after
summary, the end-of-run evaluation) are left out with a line, and evaluate.py says what to pass."""

import json
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from lit_rlhf.callbacks.heldout import heldout_batch
from lit_rlhf.cli import sweeps
from lit_rlhf.errors import ConfigError
from lit_rlhf.evaluation import compare_with_reference
from tests.apps import run_app
from tests.conftest import make_datamodule
from tests.helpers import FAST


def test_with_no_prompt_held_out_there_is_no_heldout_batch():
    datamodule = make_datamodule(num_eval_prompts=0)
    datamodule.setup("fit")
    assert len(datamodule.train_prompts) == 1000
    assert heldout_batch(SimpleNamespace(datamodule=datamodule), SimpleNamespace(device="cpu")) is None
    held = make_datamodule(num_eval_prompts=2)
    held.setup("fit")
    assert len(heldout_batch(SimpleNamespace(datamodule=held), SimpleNamespace(device="cpu"))["input_ids"]) == 2
    with pytest.raises(ConfigError, match=r"^data.num_eval_prompts=-1 must be a whole number >= 0 \(0: none held "
                                          r"out\).$"):  # it held out all but one prompt
        make_datamodule(num_eval_prompts=-1)


def test_an_evaluation_with_no_prompts_is_one_line_that_says_what_to_pass():
    with pytest.raises(ConfigError, match=r"no held-out prompts to evaluate on \(data.num_eval_prompts=0 holds none "
                                          r"out\); pass data.num_eval_prompts=16"):
        compare_with_reference(None, [])


def test_a_run_holding_none_out_has_no_objective_and_a_sweep_that_optimizes_a_heldout_metric_is_refused(monkeypatch):
    cfg = OmegaConf.create({"optimized_metric": "eval/rlhf_reward", "data": {"num_eval_prompts": 0}})
    assert sweeps.config_objective({"objective/scores": 1.0}, cfg) is None
    sweeps.check_optimized_metric(cfg, [])  # a single run: nothing to say
    monkeypatch.setattr(sweeps, "in_multirun", lambda: True)
    with pytest.raises(ConfigError, match=r"^optimized_metric='eval/rlhf_reward' is measured on held-out data, and "
                                          r"data.num_eval_prompts=0 holds none out; optimize a training metric "
                                          r"\(optimized_metric=objective/rlhf_reward\), or hold some out.$"):
        sweeps.check_optimized_metric(cfg, [])
    pairs = OmegaConf.create({"optimized_metric": "eval/rewards/accuracies", "data": {"num_eval_pairs": 0}})
    with pytest.raises(ConfigError, match="data.num_eval_pairs=0 holds none out; optimize a training metric, or"):
        sweeps.config_objective({"loss": 0.5}, pairs)


@pytest.mark.integration
def test_a_run_that_holds_no_prompt_out_ends_with_its_reports_left_out_and_no_objective(tmp_path):
    """It stopped at its first held-out sample with a bare StopIteration."""
    reports = [a for a in FAST if not a.startswith(("callbacks.", "data.num_eval_prompts"))]
    result = run_app("train.py", "hydra.run.dir=run", *reports, "steps=2", "data.num_eval_prompts=0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "No held-out prompts (data.num_eval_prompts=0): no end-of-run evaluation." in result.stdout + result.stderr
    assert "warning" not in result.stdout + result.stderr
    assert not (tmp_path / "run" / "evaluation").exists()
    outcome = json.loads((tmp_path / "run" / "result.json").read_text())
    assert (outcome["status"], outcome["objective"]) == ("ok", None)
