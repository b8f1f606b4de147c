"""bench/pair_defaults.py: DPO's policy is scored on gold-labelled pairs by its implicit reward, as a plain loop over
each response token's log-probability under policy and reference orders them."""

import importlib.util
import json

import torch
from transformers import AutoModelForCausalLM

from lit_rlhf.data.preference_datamodule import PreferenceDataModule
from tests.apps import ROOT


def pair_defaults(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("pair_defaults", ROOT / "bench" / "pair_defaults.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plain_logprob_sums(model, batch) -> torch.Tensor:
    """Per row: the sum over its response tokens t of log softmax(logits at t - 1)[token t]."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    sums = []
    for row in range(len(batch["input_ids"])):
        total = 0.0
        for t in range(1, batch["input_ids"].shape[1]):
            if batch["response_mask"][row, t]:
                total += torch.log_softmax(logits[row, t - 1].double(), -1)[batch["input_ids"][row, t]].item()
        sums.append(total)
    return torch.tensor(sums)


def test_dpo_pairs_are_ordered_by_the_implicit_reward(tmp_path, monkeypatch):
    bench = pair_defaults(monkeypatch)
    rows = [json.loads(line) for line in (ROOT / "lit_rlhf" / "data" / "sentiment" / "pairs.jsonl").open()][:12]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    torch.manual_seed(0)
    policy = AutoModelForCausalLM.from_pretrained(bench.TINY)
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    policy.save_pretrained(tmp_path / "policy")
    reference = AutoModelForCausalLM.from_pretrained(bench.TINY)

    data = PreferenceDataModule(tokenizer=str(bench.TINY), dataset=str(pairs), num_eval_pairs=0, batch_size=12)
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    with torch.no_grad():
        ratios = plain_logprob_sums(policy.eval(), batch) - plain_logprob_sums(reference.eval(), batch)  # 2B
    chosen, rejected = ratios.chunk(2)
    expected = int((chosen > rejected).sum()) / len(chosen)
    assert 0 < expected < 1  # the perturbed policy orders some pairs each way: the count is tested, not a constant
    assert bench.dpo_gold_accuracy(tmp_path / "policy", pairs) == expected
