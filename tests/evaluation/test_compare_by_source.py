"""The evaluation of a mixed dataset reports each task apart (task_metrics_by_source), against hand counts."""

from types import SimpleNamespace

import torch

from lit_rlhf.evaluation.compare import compare_with_reference
from lit_rlhf.tasks.metrics import ExactMatch


def sampled(completions, answers, sources):
    n = len(completions)
    return {"prompts": ["q"] * n, "completions": completions, "transcripts": completions, "scores": [0.0] * n,
            "kl": [0.0] * n, "lengths": torch.ones(n), "contains_stop": torch.ones(n, dtype=torch.bool),
            "prompt_index": torch.arange(n) // 2, "columns": {"answer": answers, "data_source": sources},
            "gold": None}


def test_each_task_gets_its_own_accuracy_on_its_prompts():
    # 3 prompts x 2 samples: prompts 0 and 2 are "calc", prompt 1 "arith"
    answers, sources = ["1", "1", "2", "2", "3", "3"], ["calc", "calc", "arith", "arith", "calc", "calc"]
    policy = sampled([" Answer: 1", " Answer: 0", " Answer: 2", " Answer: 2", " Answer: 3", " Answer: 3"], answers,
                     sources)
    reference = sampled([" Answer: 0"] * 6, answers, sources)
    module = SimpleNamespace(
        sample_heldout=lambda batch, seed, samples_per_prompt, from_reference: reference if from_reference else policy,
        hparams=SimpleNamespace(kl_estimator="k1"), sampler=SimpleNamespace(gold=None), task_metrics=[ExactMatch()],
        device=torch.device("cpu"))
    evaluation = compare_with_reference(module, [{"input_ids": torch.zeros(3, 1)}], samples_per_prompt=2,
                                        num_bootstraps=40)
    by_source = evaluation.summary["task_metrics_by_source"]
    assert by_source["calc"]["exact_match"]["policy"]["accuracy"]["mean"] == 0.75  # prompt 0: 1/2, prompt 2: 2/2
    assert by_source["calc"]["exact_match"]["policy"]["pass@2"]["mean"] == 1.0
    assert by_source["arith"]["exact_match"]["policy"]["accuracy"]["mean"] == 1.0
    assert by_source["arith"]["exact_match"]["reference"]["accuracy"]["mean"] == 0.0
    assert evaluation.flat_metrics()["eval/exact_match/calc"] == 0.75
