"""bench/pair_defaults.py and bench/preferences.py: a saved model is scored on gold-labelled pairs as its training
scored them (DPO's policy by its implicit reward against a plain loop, a proxy reward model with EOS ending each
response)."""

import importlib.util
import json

import pytest
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


def test_a_proxy_is_scored_on_gold_pairs_as_its_training_scored_them(tmp_path, monkeypatch):
    """bench/preferences.py's gold accuracy reads each response as train_reward_model.py's pairs end it (with EOS),
    through the reward lit_rlhf trains against: the pairs it orders are those the training path orders."""
    from transformers import AutoModelForSequenceClassification

    bench = pair_defaults(monkeypatch)
    from preferences import gold_accuracy

    rows = [json.loads(line) for line in (ROOT / "lit_rlhf" / "data" / "sentiment" / "pairs.jsonl").open()][:24]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    data = PreferenceDataModule(tokenizer=str(bench.TINY), dataset=str(pairs), num_eval_pairs=0, batch_size=24)
    data.setup("fit")  # the tokenizer as training sets it up (its pad token), saved beside the model as training does
    torch.manual_seed(0)
    proxy = AutoModelForSequenceClassification.from_pretrained(bench.TINY, num_labels=1)  # a random head
    proxy.config.pad_token_id = data.tokenizer.pad_token_id  # the head reads the last token that is not padding
    proxy.save_pretrained(tmp_path / "proxy")
    data.tokenizer.save_pretrained(tmp_path / "proxy")
    batch = next(iter(data.train_dataloader()))
    with torch.no_grad():
        chosen, rejected = proxy.eval()(input_ids=batch["input_ids"],
                                        attention_mask=batch["attention_mask"]).logits[:, 0].chunk(2)
    expected = int((chosen > rejected).sum()) / len(chosen)
    assert 0 < expected < 1
    assert gold_accuracy(tmp_path / "proxy", pairs) == pytest.approx(expected)
