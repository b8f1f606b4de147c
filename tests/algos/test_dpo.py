"""DPOModule: sequence logprobs against a slow per-sequence reference, the loss against hand-computed values, a
start at log 2 (the policy is its reference), learning separable pairs, and a saved policy equal to the trained."""

import functools
import math

import lightning as L
import pytest
import torch

from lit_rlhf.algos.dpo import DPOModule, sequence_logprobs, token_logprobs, weighted_sums
from lit_rlhf.algos.dpo_losses import DPOLoss, PairLogprobs
from lit_rlhf.data.preference_datamodule import PreferenceDataModule
from lit_rlhf.data.preferences import collate_pairs
from lit_rlhf.errors import ConfigError
from tests.algos.test_reward_model import separable_pairs
from tests.conftest import LORA, TINY_PYTHIA
from tests.helpers import assert_readable_as_umask_allows


def log_sigmoid(x):
    return math.log(1 / (1 + math.exp(-x)))


def test_dpo_loss_matches_hand_computed_values():
    pairs = PairLogprobs(*(torch.tensor([v]) for v in (-10.0, -12.0, -11.0, -11.5, 4, 5)))
    logits = 0.1 * ((-10.0 + 11.0) - (-12.0 + 11.5))  # 0.15
    assert DPOLoss(beta=0.1)(pairs).item() == pytest.approx(-log_sigmoid(logits))
    smoothed = -0.9 * log_sigmoid(logits) - 0.1 * log_sigmoid(-logits)
    assert DPOLoss(beta=0.1, cdpo_epsilon=0.1)(pairs).item() == pytest.approx(smoothed)  # cDPO


@pytest.mark.parametrize("chunk_size, budget", [(None, None), (3, 0.0), (3, 1024.0)])  # full; chunked: recomputed, kept
def test_sequence_logprobs_sum_the_response_tokens_as_a_slow_loop_does(chunk_size, budget):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA).eval()
    items = [{"chosen": ([5, 6, 7, 8], 2), "rejected": ([5, 9], 1), "margin": 0.0},
             {"chosen": ([11, 12, 13], 1), "rejected": ([11, 14, 15, 16, 17], 3), "margin": 0.0}]
    batch = collate_pairs(items, pad_token_id=0)
    sequence_logprobs(model, batch, chunk_size, budget).sum().backward()  # the gradient: the full logits' below
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    sequence_logprobs(model, batch).sum().backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, atol=1e-5, rtol=1e-4, msg=name)
    with torch.no_grad():
        fast = sequence_logprobs(model, batch, chunk_size, budget)
        slow = []
        for ids, prompt_length in [items[0]["chosen"], items[1]["chosen"], items[0]["rejected"], items[1]["rejected"]]:
            logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)  # T,V
            slow.append(sum(logprobs[t - 1, ids[t]].item() for t in range(prompt_length, len(ids))))
    torch.testing.assert_close(fast, torch.tensor(slow), atol=1e-4, rtol=1e-5)


def test_padding_free_logprobs_and_their_gradients_are_the_padded_layout_s():
    """Packed sequences (no pad token computed) give each response token the logprob, statistics (entropy, top1,
    mean_logit, log_sum_p2) and gradient the right-padded batch gives it."""
    from transformers import AutoModelForCausalLM

    from lit_rlhf.ops.logprobs import TOKEN_STATISTICS

    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA).eval()
    items = [{"chosen": ([5, 6, 7, 8, 9, 10, 11], 2), "rejected": ([5, 9], 1), "margin": 0.0},
             {"chosen": ([11, 12, 13], 1), "rejected": ([11, 14, 15, 16, 17], 3), "margin": 0.0}]
    batch = collate_pairs(items, pad_token_id=0)
    results = []
    for pad_token_id in (None, 0):
        model.zero_grad()
        logprobs, values, response = token_logprobs(model, batch, 3, 1024.0, pad_token_id, TOKEN_STATISTICS)
        sums = weighted_sums(logprobs, response, 0.5)
        sums.sum().backward()
        real = response.bool()
        statistics = torch.stack([values[name][real] for name in TOKEN_STATISTICS])
        results.append((sums.detach(), logprobs[real].detach(), statistics,
                        {name: p.grad.clone() for name, p in model.named_parameters()}))
    (padded_sums, padded_tokens, padded_values, padded_grads), (sums, tokens, values, grads) = results
    assert len(tokens) == len(padded_tokens) == 5 + 2 + 1 + 2  # the response tokens of chosen 0, 1, rejected 0, 1
    torch.testing.assert_close(sums, padded_sums, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(tokens, padded_tokens, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, padded_values, atol=1e-5, rtol=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, padded_grads[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.integration
def test_a_padding_free_fit_trains_what_the_padded_one_trains(tmp_path):
    trained = []
    for padding_free in (False, True):
        L.seed_everything(0)
        data = PreferenceDataModule(tokenizer=TINY_PYTHIA, dataset=separable_pairs(tmp_path / "pairs.jsonl", n=40),
                                    batch_size=8, num_eval_pairs=8)
        module = DPOModule(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, padding_free=padding_free,
                           optimizer=functools.partial(torch.optim.AdamW, lr=3e-3))
        L.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, limit_val_batches=0).fit(module, data)
        assert (module.packing_pad_id is not None) == padding_free
        trained.append([p.detach().clone() for p in module.policy.parameters() if p.requires_grad])
    for packed, padded in zip(trained[1], trained[0], strict=True):
        torch.testing.assert_close(packed, padded, atol=1e-5, rtol=1e-4)
    assert any(p.abs().sum() > 0 for p in trained[1])


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_ld_alpha_weights_the_longer_response_s_tokens_past_the_shorter_one_s_length(chunk_size):
    """LD-DPO: pair 0's chosen (3 response tokens) against its rejected (1), pair 1's chosen (1) against its rejected
    (3): the first token of each counts fully, the longer one's 2nd and 3rd by ld_alpha."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA).eval()
    items = [{"chosen": ([5, 6, 7, 8], 1), "rejected": ([5, 9], 1), "margin": 0.0},
             {"chosen": ([11, 12], 1), "rejected": ([11, 14, 15, 16], 1), "margin": 0.0}]
    batch = collate_pairs(items, pad_token_id=0)
    with torch.no_grad():
        weighted = sequence_logprobs(model, batch, chunk_size, 1024.0, ld_alpha=0.25)
        assert torch.equal(sequence_logprobs(model, batch, chunk_size, 1024.0, ld_alpha=1.0),
                           sequence_logprobs(model, batch, chunk_size, 1024.0))
        slow = []
        for ids, prompt_length in [items[0]["chosen"], items[1]["chosen"], items[0]["rejected"], items[1]["rejected"]]:
            logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)  # T,V
            slow.append(sum(logprobs[t - 1, ids[t]].item() * (1.0 if t - prompt_length < 1 else 0.25)
                            for t in range(prompt_length, len(ids))))
    torch.testing.assert_close(weighted, torch.tensor(slow), atol=1e-4, rtol=1e-5)


@pytest.mark.integration
def test_the_token_metrics_are_means_over_every_held_out_response_token(tmp_path):
    """TRL's DPO `entropy` (every response token), `mean_token_accuracy` (the chosen responses' tokens that are the
    most likely one), `logits/chosen` and `logits/rejected` (the mean logit over the vocabulary): weighted by tokens
    over all held-out pairs (3 batches of 4, 4 and 2 pairs), as a slow loop over each response's full logits computes
    them."""
    from transformers import AutoModelForCausalLM

    data = PreferenceDataModule(tokenizer=TINY_PYTHIA, dataset=separable_pairs(tmp_path / "pairs.jsonl", n=20),
                                batch_size=4, num_eval_pairs=10)
    module = DPOModule(model={"name_or_path": TINY_PYTHIA, "lora": LORA})
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    logged = trainer.validate(module, data, verbose=False)[0]
    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA).eval()
    sums = {"entropy": [], "mean_token_accuracy": [], "logits/chosen": [], "logits/rejected": []}
    with torch.no_grad():
        for item in data.eval_pairs:
            for side in ("chosen", "rejected"):
                ids, prompt_length = item[side]
                logits = model(torch.tensor([ids])).logits[0].double()  # T,V
                log_probs = torch.log_softmax(logits, -1)
                for t in range(prompt_length, len(ids)):
                    sums["entropy"].append(-float((log_probs[t - 1].exp() * log_probs[t - 1]).sum()))
                    sums[f"logits/{side}"].append(float(logits[t - 1].mean()))
                    if side == "chosen":
                        sums["mean_token_accuracy"].append(float(int(logits[t - 1].argmax()) == ids[t]))
    assert 0 < sum(sums["mean_token_accuracy"]) < len(sums["mean_token_accuracy"])  # both kinds of token
    for name, values in sums.items():
        assert logged[f"eval/{name}"] == pytest.approx(sum(values) / len(values), rel=1e-5, abs=1e-6), name


def test_the_training_token_means_add_every_rank_s_sums_and_counts(monkeypatch):
    """In training, a token metric is the sum over every rank's tokens over their count (one reduction of the sums
    and counts, as TRL gathers them), not the mean of the ranks' means; num_tokens adds the ranks' attention masks."""
    from types import SimpleNamespace

    module = DPOModule(model={"name_or_path": TINY_PYTHIA, "lora": LORA})
    other_rank = torch.tensor([10.0, 1.0, 8.0, 1.0])  # its totals (a, b), then its counts (a, b)
    reduced = []

    def reduce(tensor, reduce_op):
        assert reduce_op == "sum"
        reduced.append(tensor)
        return tensor + (other_rank if tensor.dim() else 7)

    module._trainer = SimpleNamespace(strategy=SimpleNamespace(reduce=reduce))
    logged = {}
    monkeypatch.setattr(module, "log_metrics", lambda metrics, batch_size, stage: logged.update(metrics))
    monkeypatch.setattr(module, "log", lambda name, value, **kwargs: logged.update({name: value}))
    values, mask = torch.tensor([[1.0, 2.0, 5.0]]), torch.tensor([[1, 1, 0]])  # this rank: total 3 over 2 tokens
    module.log_token_means({"a": (values, mask), "b": (values, mask.new_zeros(1, 3))}, "train")
    assert len(reduced) == 1  # one reduction for every metric
    assert logged["a"].item() == pytest.approx(13 / 10) and logged["b"].item() == pytest.approx(1.0)
    module.count_tokens(torch.tensor([[1, 1, 0], [1, 1, 1]]))
    module.count_tokens(torch.tensor([[1, 0, 0]]))
    assert module.num_tokens == (5 + 7) + (1 + 7) and logged["num_tokens"] == 20.0


def moved_module_and_two_pairs(**settings):
    """A LoRA DPOModule whose policy is away from its reference (adapters off), and a batch of two pairs whose
    responses are 2 and 2 tokens (chosen), 1 and 2 (rejected)."""
    torch.manual_seed(0)
    module = DPOModule(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, **settings)
    module.configure_model()
    with torch.no_grad():
        for name, param in module.policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    items = [{"chosen": ([5, 6, 7, 8], 2), "rejected": ([5, 9], 1), "margin": 0.0},
             {"chosen": ([11, 12, 13], 1), "rejected": ([11, 14, 15, 16, 17], 3), "margin": 0.0}]
    return module, items, collate_pairs(items, pad_token_id=0)


def test_a_step_gives_the_length_normalized_losses_each_response_s_own_token_count():
    """ipo and sigmoid_norm divide each response's log-ratio by its response tokens (2, 2 chosen; 1, 2 rejected)."""
    module, items, batch = moved_module_and_two_pairs(loss_type=["ipo", "sigmoid_norm"], beta=0.5)
    with torch.no_grad():
        loss = module.step(batch, "train")
        policy = sequence_logprobs(module.policy, batch).tolist()
        with module.reference.active() as reference:
            ref = sequence_logprobs(reference, batch).tolist()
    logratio = [p - r for p, r in zip(policy, ref, strict=True)]  # chosen 0, chosen 1, rejected 0, rejected 1
    per_token = [logratio[0] / 2 - logratio[2] / 1, logratio[1] / 2 - logratio[3] / 2]
    ipo = sum((d - 1 / (2 * 0.5)) ** 2 for d in per_token) / 2
    sigmoid_norm = sum(-log_sigmoid(0.5 * d) for d in per_token) / 2
    assert abs(logratio[0]) > 1e-3 and loss.item() == pytest.approx(ipo + sigmoid_norm, rel=1e-5)


@pytest.mark.parametrize("chunk_size, padding_free", [(None, False), (3, False), (3, True)],
                         ids=["full logits", "chunked", "padding-free"])
def test_use_weighting_weights_each_pair_s_loss_by_wpo_s_weights_of_a_slow_loop(chunk_size, padding_free):
    """WPO (TRL's use_weighting): a response's weight is exp(mean over its tokens of log p(y_t) - log sum_v p_v^2),
    a pair's the product of its two (no gradient), times that pair's sigmoid loss before the mean."""
    module, items, batch = moved_module_and_two_pairs(use_weighting=True, beta=0.5, logits_chunk_size=chunk_size,
                                                      padding_free=padding_free)
    loss = module.step(batch, "train")
    with torch.no_grad():
        with module.reference.active() as reference:
            ref = sequence_logprobs(reference, batch).tolist()
        sums, weights = [], []
        for ids, prompt_length in [items[0]["chosen"], items[1]["chosen"], items[0]["rejected"],
                                   items[1]["rejected"]]:
            log_probs = torch.log_softmax(module.policy(torch.tensor([ids])).logits[0].double(), -1)  # T,V
            tokens = range(prompt_length, len(ids))
            sums.append(sum(float(log_probs[t - 1, ids[t]]) for t in tokens))
            aligned = [float(log_probs[t - 1, ids[t]]) - math.log(float((log_probs[t - 1].exp() ** 2).sum()))
                       for t in tokens]
            weights.append(math.exp(sum(aligned) / len(aligned)))
    logratio = [p - r for p, r in zip(sums, ref, strict=True)]  # chosen 0, chosen 1, rejected 0, rejected 1
    expected = [-log_sigmoid(0.5 * (logratio[i] - logratio[i + 2])) * weights[i] * weights[i + 2] for i in (0, 1)]
    assert 0.0 < min(weights) and max(weights) < 0.9  # the weighting is not a no-op here
    assert loss.item() == pytest.approx(sum(expected) / 2, rel=1e-5)


@pytest.mark.integration
def test_dpo_starts_at_log_2_learns_separable_pairs_and_saves_the_trained_policy(tmp_path):
    from transformers import AutoModelForCausalLM

    L.seed_everything(0)
    data = PreferenceDataModule(tokenizer=TINY_PYTHIA, dataset=separable_pairs(tmp_path / "pairs.jsonl"),
                                batch_size=16, num_eval_pairs=32)
    module = DPOModule(model={"name_or_path": TINY_PYTHIA, "lora": LORA},
                       optimizer=functools.partial(torch.optim.AdamW, lr=3e-3))
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.validate(module, data)
    assert float(trainer.callback_metrics["eval/loss"]) == pytest.approx(math.log(2), abs=1e-6)
    assert float(trainer.callback_metrics["eval/rewards/margins"]) == pytest.approx(0.0, abs=1e-6)
    trainer.fit(module, data)
    assert float(trainer.callback_metrics["eval/rewards/accuracies"]) >= 0.9
    assert float(trainer.callback_metrics["eval/loss"]) < 0.3
    assert {"loss", "rewards/chosen", "rewards/accuracies"} <= set(trainer.callback_metrics)  # TRL's names, per step
    assert not any(name.endswith(("_step", "_epoch")) for name in trainer.callback_metrics)
    folder = module.save_policy(tmp_path / "policy")
    assert_readable_as_umask_allows(folder)  # the one exporter's (safetensors alone writes 0600)
    saved = AutoModelForCausalLM.from_pretrained(folder).eval()
    module.policy.eval()
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        torch.testing.assert_close(saved(ids).logits, module.policy(input_ids=ids).logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("settings, expected", [
    ({"beta": 0}, "algo.beta=0 must be a finite number > 0"),
    ({"beta": True}, "algo.beta=True must be a finite number > 0"),
    ({"cdpo_epsilon": 0.5}, r"algo.cdpo_epsilon=0.5 must be a number in \[0, 0.5\)"),
    ({"cdpo_epsilon": True}, r"algo.cdpo_epsilon=True must be a number in \[0, 0.5\)"),
    ({"ld_alpha": 1.5}, r"algo.ld_alpha=1.5 must be in \[0, 1\] \(1: plain DPO; null: off\)"),
    ({"label_smoothing": 0.1}, "algo.label_smoothing=0.1 is read by algo.loss_type=robust|exo_pair|aot|aot_unpaired "
                               "only, not by sigmoid \\(TRL's sigmoid loss ignores it\\); conservative DPO is "
                               "algo.cdpo_epsilon here"),
])
def test_bad_dpo_settings_are_one_line(settings, expected):
    with pytest.raises(ConfigError, match=expected):
        DPOModule(model={"name_or_path": TINY_PYTHIA}, **settings)
