"""Held-out metrics of a mixed dataset: each task's accuracy apart (eval/<metric>/<task>), weighted by its rows."""

from types import SimpleNamespace

import pytest
import torch

from lit_rlhf.algos.heldout import heldout_metrics
from lit_rlhf.data.datamodule import PromptRow
from lit_rlhf.tasks.metrics import ExactMatch, rows_by_source


def fake_module(completions, columns, eval_prompts):
    samples = {"completions": completions, "columns": columns, "mean_score": 0.0, "mean_kl": 0.0,
               "rlhf_reward": torch.zeros(len(completions)), "gold": None, "prompts": completions}
    datamodule = SimpleNamespace(eval_prompts=[PromptRow([1, 2], columns) for columns in eval_prompts])
    return SimpleNamespace(sample_heldout=lambda batch, seed: samples, task_metrics=[ExactMatch()],
                           trainer=SimpleNamespace(datamodule=datamodule))


def test_each_task_of_the_held_out_set_is_logged_with_its_own_weight():
    completions = [" Answer: 3", " Answer: 4", " Answer: 5", " Answer: 9", " Answer: 1"]
    columns = {"answer": ["3", "0", "5", "9", "2"], "data_source": ["calc", "calc", "arith", "calc", "arith"]}
    # the whole held-out set names a third task that this batch lacks: logged with weight 0, so ranks agree
    eval_prompts = [{"prompt": "p", "data_source": source} for source in ("calc", "arith", "other")]
    metrics = heldout_metrics(fake_module(completions, columns, eval_prompts), batch={}, batch_idx=0)
    value, size = metrics["eval/exact_match"]
    assert (value.item(), size) == (pytest.approx(0.6), 5)
    value, size = metrics["eval/exact_match/calc"]
    assert (value.item(), size) == (pytest.approx(2 / 3), 3)  # rows 0 and 3 of 0, 1, 3
    value, size = metrics["eval/exact_match/arith"]
    assert (value.item(), size) == (pytest.approx(0.5), 2)
    value, size = metrics["eval/exact_match/other"]
    assert size == 0


def test_one_task_or_no_source_column_logs_no_per_task_metric():
    completions, columns = [" Answer: 3"], {"answer": ["3"], "data_source": ["calc"]}
    metrics = heldout_metrics(fake_module(completions, columns, [{"prompt": "p", "data_source": "calc"}]), {}, 0)
    assert [name for name in metrics if name.startswith("eval/exact_match")] == ["eval/exact_match"]
    metrics = heldout_metrics(fake_module(completions, {"answer": ["3"]}, [{"prompt": "p"}]), {}, 0)
    assert [name for name in metrics if name.startswith("eval/exact_match")] == ["eval/exact_match"]


def test_task_names_from_the_dataset_reach_metric_names_with_control_characters_escaped():
    by_source = rows_by_source({"data_source": ["a\x1b[31m", "b", "a\x1b[31m"]})
    assert list(by_source.values()) == [[0, 2], [1]]
    assert all("\x1b" not in name for name in by_source)


def test_the_bundled_two_task_held_out_set_names_both_tasks_on_every_rank():
    """heldout_sources reads the datamodule's real held-out rows (PromptRows), not the batch's."""
    from lit_rlhf.algos.heldout import heldout_sources
    from lit_rlhf.assets import asset_path
    from tests.conftest import make_datamodule

    datamodule = make_datamodule(tokenizer=asset_path("tiny-two-task"), dataset="two_task", num_eval_prompts=300)
    datamodule.setup("fit")
    module = SimpleNamespace(trainer=SimpleNamespace(datamodule=datamodule))
    assert heldout_sources(module) == ["arithmetic", "calculator"]
