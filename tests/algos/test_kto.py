"""KTO: TRL's loss types by hand; a step's loss, reference point and gradients against a slow loop over each row's
full logits; the labelled rows (preference pairs unpaired, labels checked, the KL rows rotated within the batch); and
train_kto.py as typed."""

import csv
import json
import math
import re

import pytest
import torch

from lit_rlhf.algos.kto import KTOModule, kto_losses, unbalanced_weights_line
from lit_rlhf.data.labeled_completions import LabeledCompletionDataModule, collate_labeled
from lit_rlhf.data.preferences import tokenize_pair_side
from lit_rlhf.errors import ConfigError
from tests.apps import run_app
from tests.conftest import TINY_PYTHIA


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_kto_and_apo_zero_unpaired_losses_match_hand_computed_values():
    logratios = torch.tensor([0.5, -1.0, 2.0, 0.0])
    desirable = torch.tensor([True, False, False, True])
    kto = kto_losses(logratios, desirable, torch.tensor(0.3), 0.2, "kto", 1.5, 0.7)
    expected = [1.5 * (1 - sigmoid(0.2 * (0.5 - 0.3))), 0.7 * (1 - sigmoid(0.2 * (0.3 + 1.0))),
                0.7 * (1 - sigmoid(0.2 * (0.3 - 2.0))), 1.5 * (1 - sigmoid(0.2 * (0.0 - 0.3)))]
    assert kto.tolist() == pytest.approx(expected, rel=1e-6)
    apo = kto_losses(logratios, desirable, torch.tensor(0.3), 0.2, "apo_zero_unpaired", 1.5, 0.7)
    expected = [1.5 * (1 - sigmoid(0.1)), 0.7 * sigmoid(-0.2), 0.7 * sigmoid(0.4), 1.5 * (1 - sigmoid(0.0))]
    assert apo.tolist() == pytest.approx(expected, rel=1e-6)


ROWS = [("The movie was", " wonderful and kind.", True), ("I think", " it was bad and far too long.", False),
        ("Overall", " fine", True), ("Review:", " dull", False)]


def summed_logprobs(model: torch.nn.Module, ids: list[int], prompt: int) -> torch.Tensor:
    """One unpadded row's completion logprobs summed, from its full logits (float64)."""
    log_probs = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)  # T,V
    return torch.stack([log_probs[t - 1, ids[t]] for t in range(prompt, len(ids))]).sum()


@pytest.mark.parametrize(("loss_type", "chunk_size"), [("kto", None), ("kto", 4), ("apo_zero_unpaired", 4)])
def test_a_step_s_loss_and_gradients_are_a_slow_loop_s_over_each_row_and_its_kl_row(loss_type, chunk_size):
    """Full fine-tuning (the reference a frozen copy), the policy moved off it: the reference point z is the mean
    log-ratio of the rows' KL rows (row i's prompt, row i-1's completion), with no gradient; each row's loss as TRL's
    (weights 1.3 desirable, 0.8 undesirable), averaged over the rows. apo_zero_unpaired has no z."""
    module = KTOModule(model={"name_or_path": TINY_PYTHIA, "lora": None}, beta=0.5, desirable_weight=1.3,
                       undesirable_weight=0.8, logits_chunk_size=chunk_size, loss_type=loss_type)
    module.configure_model()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in module.policy.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    sequences = [tokenize_pair_side(module.tokenizer, p, c, max_length=64, max_prompt_length=32) for p, c, _ in ROWS]
    labels = [label for *_, label in ROWS]
    batch = collate_labeled(list(zip(sequences, labels, strict=True)), module.tokenizer.pad_token_id, 64)
    module.step(batch, "train").backward()
    got = {name: p.grad.clone() for name, p in module.policy.named_parameters()}
    module.policy.zero_grad()

    policy, reference = module.policy, module.frozen_reference
    with torch.no_grad():
        kl_terms = []
        for i, (ids, prompt) in enumerate(sequences):
            other, other_prompt = sequences[i - 1]
            kl_ids = ids[:prompt] + other[other_prompt:]
            kl_terms.append(summed_logprobs(policy, kl_ids, prompt) - summed_logprobs(reference, kl_ids, prompt))
        z = torch.stack(kl_terms).mean()
    assert z > 0.05  # the clamp at 0 leaves it
    assert module.reference_point(batch).item() == pytest.approx(z.item(), rel=1e-4)
    terms = []
    for (ids, prompt), desirable in zip(sequences, labels, strict=True):
        with torch.no_grad():
            reference_logprob = summed_logprobs(reference, ids, prompt)
        r = summed_logprobs(policy, ids, prompt) - reference_logprob
        if loss_type == "apo_zero_unpaired":
            terms.append(1.3 * (1 - torch.sigmoid(0.5 * r)) if desirable else 0.8 * torch.sigmoid(0.5 * r))
        else:
            terms.append(1.3 * (1 - torch.sigmoid(0.5 * (r - z))) if desirable else
                         0.8 * (1 - torch.sigmoid(0.5 * (z - r))))
    expected = torch.stack(terms).mean()
    expected.backward()
    with torch.no_grad():
        loss = module.step(batch, "train")
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    for name, p in policy.named_parameters():
        scale = float(p.grad.abs().max())
        torch.testing.assert_close(got[name], p.grad.to(got[name].dtype), atol=1e-5 * scale, rtol=1e-4, msg=name)


@pytest.mark.parametrize(("other_rank", "expected"), [(0.6, 0.3), (-0.6, 0.0)])
def test_the_reference_point_is_the_mean_of_the_ranks_means_clamped_at_zero(other_rank, expected):
    """As TRL gathers it: each rank's mean over its KL rows, averaged over the ranks (a stubbed second rank; the
    policy here is its reference, so this rank's mean is 0), then clamped at 0."""
    from types import SimpleNamespace

    module = KTOModule(model={"name_or_path": TINY_PYTHIA, "lora": None})
    module.configure_model()
    sequences = [tokenize_pair_side(module.tokenizer, p, c, max_length=64, max_prompt_length=32) for p, c, _ in ROWS]
    batch = collate_labeled([(s, True) for s in sequences], module.tokenizer.pad_token_id, 64)
    module._trainer = SimpleNamespace(world_size=2, strategy=SimpleNamespace(
        reduce=lambda tensor, reduce_op: tensor + other_rank))
    assert module.reference_point(batch).item() == pytest.approx(expected, abs=1e-6)


def test_the_held_out_margin_is_of_every_rank_s_rows_means(monkeypatch):
    """eval/rewards/margins: the desirable rows' mean reward minus the undesirable rows', each over the held-out rows
    of every rank (a stubbed second rank adds its sums and counts), not the mean of the ranks' margins."""
    from types import SimpleNamespace

    module = KTOModule(model={"name_or_path": TINY_PYTHIA})
    module.on_validation_epoch_start()
    rewards, desirable = torch.tensor([0.5, 1.5, -1.0, -2.0, -0.5]), torch.tensor([True, True, False, False, False])
    module.heldout_rewards += torch.tensor([float((rewards * desirable).sum()), 2.0,
                                            float((rewards * ~desirable).sum()), 3.0], dtype=torch.float64)
    other_rank = torch.tensor([3.0, 1.0, 1.0, 1.0], dtype=torch.float64)  # one desirable (3.0), one undesirable (1.0)
    module._trainer = SimpleNamespace(sanity_checking=True, strategy=SimpleNamespace(
        reduce=lambda tensor, reduce_op: tensor + other_rank))
    logged = {}
    monkeypatch.setattr(module, "log", lambda name, value, **kwargs: logged.update({name: value}))
    module.on_validation_epoch_end()
    assert logged["eval/rewards/margins"] == pytest.approx((0.5 + 1.5 + 3.0) / 3 - (-1.0 - 2.0 - 0.5 + 1.0) / 4)


def rows_file(tmp_path, rows) -> str:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_preference_pairs_are_two_labelled_rows_each_and_a_pair_is_held_out_whole(tmp_path):
    pairs = [{"prompt": f"Prompt {i}:", "chosen": f" good {i}", "rejected": f" bad {i}"} for i in range(6)]
    data = LabeledCompletionDataModule(tokenizer=TINY_PYTHIA, dataset=rows_file(tmp_path, pairs), num_eval_rows=2)
    data.setup("fit")
    assert len(data.eval_rows) == 4 and len(data.train_rows) == 8
    decode = data.tokenizer.decode
    for rows in (data.train_rows, data.eval_rows):
        texts = {(decode(ids[:prompt]), decode(ids[prompt:]), label) for (ids, prompt), label in rows}
        prompts = {prompt for prompt, _, _ in texts}
        assert texts == {(p, f" {kind} {p[7:-1]}{data.tokenizer.eos_token}", kind == "good")
                         for p in prompts for kind in ("good", "bad")}  # both rows of each pair, on one side


def test_labelled_rows_give_their_labels_and_kl_rows_of_each_prompt_with_the_row_before_s_completion(tmp_path):
    rows = [{"prompt": "A:", "completion": " yes", "label": True},
            {"prompt": "Bee:", "completion": " no no", "label": 0},
            {"prompt": "C:", "completion": " maybe", "label": 1}]
    data = LabeledCompletionDataModule(tokenizer=TINY_PYTHIA, dataset=rows_file(tmp_path, rows), num_eval_rows=0,
                                       batch_size=3)
    data.setup("fit")
    items = sorted(data.train_rows, key=lambda item: data.tokenizer.decode(item[0][0]))
    batch = collate_labeled(items, data.tokenizer.pad_token_id, 256)
    assert batch["label"].tolist() == [True, False, True]
    for i, ((ids, prompt), _) in enumerate(items):
        other, other_prompt = items[i - 1][0]
        kl_ids = ids[:prompt] + other[other_prompt:]
        assert batch["kl_input_ids"][i, :len(kl_ids)].tolist() == kl_ids
        assert batch["kl_response_mask"][i].tolist() == [0] * prompt + [1] * (len(kl_ids) - prompt) + \
            [0] * (batch["kl_input_ids"].shape[1] - len(kl_ids))


@pytest.mark.parametrize(("rows", "message"), [
    ([{"prompt": "A", "completion": " b", "label": True}, {"prompt": "A", "completion": " b", "label": "yes"}],
     "row 2: 'label' is 'yes'; give true (a desirable completion) or false (an undesirable one), or 1/0."),
    ([{"prompt": "A", "completion": " b"}] * 2, "row 1: no 'label' column (it has ['completion', 'prompt']); set "
                                                "data.label_column"),
])
def test_a_bad_label_is_one_line_naming_the_row(tmp_path, rows, message):
    data = LabeledCompletionDataModule(tokenizer=TINY_PYTHIA, dataset=rows_file(tmp_path, rows), num_eval_rows=0)
    with pytest.raises(ConfigError, match=re.escape(message)) as error:
        data.setup("fit")
    assert "\n" not in str(error.value)


def test_unequal_numbers_of_desirable_and_undesirable_rows_get_trl_s_advice_on_the_weights():
    """TRL's ranges (the KTO paper's eq. 8): 100 desirable and 300 undesirable rows want desirable_weight in
    [3 x 1, 3 x 1.33] or undesirable_weight in [1 / 3 / 1.33, 1 / 3]; none when either weight is in its range or the
    numbers are equal."""
    line = unbalanced_weights_line(100, 300, 1.0, 1.0)
    assert "set algo.desirable_weight in [3, 3.99] or algo.undesirable_weight in [0.25, 0.33] (not both)" in line
    assert "100 desirable and 300 undesirable" in line and "\n" not in line
    assert unbalanced_weights_line(100, 300, 3.5, 1.0) is None
    assert unbalanced_weights_line(100, 300, 1.0, 0.3) is None
    assert unbalanced_weights_line(200, 200, 1.0, 5.0) is None


def test_bad_kto_settings_are_one_line():
    from types import SimpleNamespace

    with pytest.raises(ConfigError, match=r"^algo.loss_type='sigmoid' is not one of kto, apo_zero_unpaired\.$"):
        KTOModule(model={"name_or_path": TINY_PYTHIA}, loss_type="sigmoid")
    with pytest.raises(ConfigError, match=r"^algo.desirable_weight=0 must be > 0\.$"):
        KTOModule(model={"name_or_path": TINY_PYTHIA}, desirable_weight=0)
    for loss_type, refused in (("kto", True), ("apo_zero_unpaired", False)):  # a batch of one row, as TRL
        module = KTOModule(model={"name_or_path": TINY_PYTHIA}, loss_type=loss_type)
        module._trainer = SimpleNamespace(strategy=None, datamodule=SimpleNamespace(
            hparams=SimpleNamespace(batch_size=1)))
        if refused:
            with pytest.raises(ConfigError, match=r"^data.batch_size=1 with algo.loss_type=kto: the KL row"):
                module.setup("fit")
        else:
            module.setup("fit")


@pytest.mark.integration
def test_train_kto_py_as_typed_learns_the_bundled_pairs_labels_and_saves_a_policy_evaluate_py_takes(tmp_path):
    trained = run_app("train_kto.py", "hydra.run.dir=kto", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    margin = re.search(r"Held-out rows \(128\): reward margin ([+-]\d\.\d{4}) ", trained.stdout)
    assert margin and float(margin.group(1)) > 0, trained.stdout[-2000:]  # desirable rows above undesirable ones
    with open(tmp_path / "kto" / "csv" / "metrics.csv") as file:
        columns = set(next(csv.reader(file)))
    trl_names = {"loss", "kl", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen",
                 "logps/rejected", "logits/chosen", "logits/rejected", "entropy", "num_tokens"}
    assert trl_names | {f"eval/{name}" for name in trl_names - {"num_tokens"}} <= columns, columns
    command = re.search(r"python evaluate.py (.+)", trained.stdout).group(1).split()
    evaluated = run_app("evaluate.py", *command, "data.num_eval_prompts=4", cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]


def test_the_held_out_line_says_when_the_held_out_rows_hold_one_label_only():
    """A small held-out draw may hold desirable rows only: no margin is logged, and the run's last line says why
    instead of leaving the held-out figures out."""
    from lit_rlhf.cli.preferences import kto_margin

    assert kto_margin({"eval/rewards/margins": 0.25}).startswith("reward margin +0.2500 (beta x the log-ratio")
    assert kto_margin({}) == ("no reward margin (the held-out rows are all desirable or all undesirable: raise "
                              "data.num_eval_rows)")
