"""SFT: the completion-only loss against a slow reference (one forward per completion token on its unpadded prefix),
the prompt never trained on, chat-message rows, token-id rows with their own mask (a multi-turn episode's tool
results as context), and train_sft.py as typed: it saves a policy train.py starts from."""

import csv
import json
import re

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lit_rlhf.algos.sft import SFTModule, completion_logprobs
from lit_rlhf.data.completion_datamodule import CompletionDataModule, load_completions
from lit_rlhf.data.preferences import collate_sequences, tokenize_pair_side
from lit_rlhf.errors import ConfigError
from tests.apps import run_app
from tests.conftest import TINY_PYTHIA
from tests.helpers import FAST, one_line_error


def test_the_loss_is_the_completion_tokens_cross_entropy_of_a_slow_per_token_reference():
    module = SFTModule(model={"name_or_path": TINY_PYTHIA, "lora": None})
    module.configure_model()
    tokenizer = module.tokenizer
    rows = [("The movie was", " wonderful and kind."), ("I think", " so.")]
    sides = [tokenize_pair_side(tokenizer, p, c, max_length=64, max_prompt_length=32) for p, c in rows]
    batch = collate_sequences(sides, tokenizer.pad_token_id)
    logprobs, _, mask = completion_logprobs(module.policy, batch, chunk_size=4)
    loss = -logprobs.sum() / mask.sum()

    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for ids, prompt_length in sides:
            for t in range(prompt_length, len(ids)):  # completion tokens only: the prompt is context
                prefix = torch.tensor([ids[:t]])
                log_probs = torch.log_softmax(model(prefix).logits[0, -1].double(), -1)
                total -= float(log_probs[ids[t]])
                count += 1
    assert count == int(mask.sum())
    assert loss.item() == pytest.approx(total / count, rel=1e-4)


@pytest.mark.integration
def test_mean_token_accuracy_and_entropy_are_means_over_every_held_out_completion_token():
    """TRL's SFT `mean_token_accuracy` (the completion tokens that are the model's most likely token) and `entropy`,
    weighted by tokens over all held-out rows (3 batches of 4, 4 and 2 rows), as a slow loop over each row's full
    logits computes them."""
    import lightning as L

    data = CompletionDataModule(tokenizer=TINY_PYTHIA, dataset="sentiment_pairs", batch_size=4, num_eval_rows=10)
    module = SFTModule(model={"name_or_path": TINY_PYTHIA, "lora": None})
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    logged = trainer.validate(module, data, verbose=False)[0]
    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA).eval()
    top1, entropy = [], []
    with torch.no_grad():
        for ids, prompt_length in data.eval_rows:
            logits = model(torch.tensor([ids])).logits[0].double()  # T,V
            log_probs = torch.log_softmax(logits, -1)
            for t in range(prompt_length, len(ids)):
                top1.append(float(int(logits[t - 1].argmax()) == ids[t]))
                entropy.append(-float((log_probs[t - 1].exp() * log_probs[t - 1]).sum()))
    assert 0 < sum(top1) < len(top1)
    assert logged["eval/mean_token_accuracy"] == pytest.approx(sum(top1) / len(top1), rel=1e-6)
    assert logged["eval/entropy"] == pytest.approx(sum(entropy) / len(entropy), rel=1e-5)


def test_dft_weights_each_completion_token_s_loss_by_its_probability_as_a_constant():
    """TRL's loss_type=dft: -(sum of p(y_t) log p(y_t), p(y_t) taken as a constant) / (completion tokens), from a slow
    loop over each row's full logits; its gradient is the nll gradient with each token's term scaled by p(y_t)."""
    module = SFTModule(model={"name_or_path": TINY_PYTHIA, "lora": None}, loss_type="dft")
    module.configure_model()
    rows = [("The movie was", " wonderful and kind."), ("I think", " so.")]
    sides = [tokenize_pair_side(module.tokenizer, p, c, max_length=64, max_prompt_length=32) for p, c in rows]
    batch = collate_sequences(sides, module.tokenizer.pad_token_id)
    module.step(batch, "train").backward()
    got = {name: p.grad.clone() for name, p in module.policy.named_parameters()}
    module.policy.zero_grad()
    terms, count = [], 0
    for ids, prompt_length in sides:
        log_probs = torch.log_softmax(module.policy(torch.tensor([ids])).logits[0].double(), -1)  # T,V
        for t in range(prompt_length, len(ids)):
            logprob = log_probs[t - 1, ids[t]]
            terms.append(-logprob.detach().exp() * logprob)
            count += 1
    expected = torch.stack(terms).sum() / count
    expected.backward()
    with torch.no_grad():
        loss = module.step(batch, "train")
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    for name, p in module.policy.named_parameters():
        torch.testing.assert_close(got[name], p.grad.to(got[name].dtype), atol=1e-6, rtol=1e-4, msg=name)


def test_the_training_loss_is_over_every_rank_s_completion_tokens(monkeypatch):
    """As TRL's num_items_in_batch: a rank's summed token losses over all ranks' completion tokens, times the number
    of ranks (DDP averages the ranks' gradients), not over its own tokens."""
    from types import SimpleNamespace

    module = SFTModule(model={"name_or_path": TINY_PYTHIA, "lora": None})
    module.configure_model()
    rows = [("The movie was", " wonderful and kind."), ("I think", " so.")]
    sides = [tokenize_pair_side(module.tokenizer, p, c, max_length=64, max_prompt_length=32) for p, c in rows]
    batch = collate_sequences(sides, module.tokenizer.pad_token_id)
    with torch.no_grad():
        logprobs, _, mask = completion_logprobs(module.policy, batch, chunk_size=4)
        alone = module.step(batch, "train")  # outside a Trainer: one rank
        assert alone.item() == pytest.approx(-logprobs.sum().item() / mask.sum().item(), rel=1e-6)
        other_rank_tokens = 17
        module._trainer = SimpleNamespace(world_size=2, accumulate_grad_batches=1, strategy=SimpleNamespace(
            reduce=lambda tensor, reduce_op: tensor + (other_rank_tokens if tensor.dim() == 0 else 0)))
        monkeypatch.setattr(module, "log", lambda *args, **kwargs: None)
        monkeypatch.setattr(module, "log_metrics", lambda *args, **kwargs: None)
        loss = module.step(batch, "train")
    tokens = mask.sum().item()
    assert loss.item() == pytest.approx(-logprobs.sum().item() * 2 / (tokens + other_rank_tokens), rel=1e-6)
    assert module.num_completion_tokens == 2 * tokens + other_rank_tokens  # both steps' counts


@pytest.mark.integration
def test_under_gradient_accumulation_each_step_s_gradient_is_that_of_the_mean_over_its_micro_batches_tokens(tmp_path):
    """trainer.accumulate_grad_batches=2 over micro-batches of unequal completion tokens: the gradients each optimizer
    step applies are those of the summed token losses of its micro-batches over all their tokens (TRL's
    num_items_in_batch over the window), not the mean of each micro-batch's mean; the epoch's last window holds one
    micro-batch. The reference: one backward of each window's batches from the same weights (a learning rate of 1e-30
    leaves them)."""
    import functools

    import lightning as L

    rows = [{"input_ids": list(range(10, 13 + n)), "completion_mask": [0] * 3 + [1] * n} for n in (1, 2, 9, 13, 20)]
    data = CompletionDataModule(tokenizer=TINY_PYTHIA, dataset=token_rows(tmp_path, *rows), batch_size=2,
                                num_eval_rows=0, max_length=32, max_prompt_length=4)
    module = SFTModule(model={"name_or_path": TINY_PYTHIA, "lora": None},
                       optimizer=functools.partial(torch.optim.SGD, lr=1e-30))

    class Seen(L.Callback):
        def __init__(self):
            self.batches, self.grads = [], []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.batches.append(batch)

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            self.grads.append({name: p.grad.clone() for name, p in pl_module.policy.named_parameters()})

    seen = Seen()
    L.Trainer(accelerator="cpu", max_epochs=1, accumulate_grad_batches=2, logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
              callbacks=[seen]).fit(module, data)
    assert len(seen.batches) == 3 and len(seen.grads) == 2
    windows = [seen.batches[:2], seen.batches[2:]]
    counts = [int(batch["response_mask"][:, 1:].sum()) for batch in windows[0]]
    assert counts[0] != counts[1]  # else the two means agree
    for window, grads in zip(windows, seen.grads, strict=True):
        module.policy.zero_grad()
        summed, tokens = 0.0, 0
        for batch in window:
            logprobs, _, mask = completion_logprobs(module.policy, batch, module.hparams.logits_chunk_size)
            summed, tokens = summed - logprobs.sum(), tokens + int(mask.sum())
        (summed / tokens).backward()
        for name, p in module.policy.named_parameters():
            # float32 sums in another order: to a millionth of the tensor's largest entry
            torch.testing.assert_close(grads[name], p.grad, atol=1e-6 * float(p.grad.abs().max()), rtol=1e-4, msg=name)


def test_a_loss_type_trl_s_sft_does_not_have_is_one_line():
    with pytest.raises(ConfigError, match=r"^algo.loss_type='sigmoid' is not one of nll, chunked_nll, dft\.$"):
        SFTModule(model={"name_or_path": TINY_PYTHIA}, loss_type="sigmoid")


def test_padding_free_gives_every_completion_token_the_padded_layout_s_values_and_gradients(tmp_path):
    """Token-id rows of different lengths, one with two model turns around a tool result (context): the packed
    forward's logprobs, statistics and gradients are the right-padded batch's."""
    from lit_rlhf.ops.logprobs import TOKEN_STATISTICS

    episode = {"input_ids": [10, 11, 12, 20, 21, 30, 31, 22, 23], "completion_mask": [0, 0, 0, 1, 1, 0, 0, 1, 1]}
    data = CompletionDataModule(tokenizer=TINY_PYTHIA, dataset=token_rows(tmp_path, episode, {"input_ids": [5, 6, 7]},
                                                                          {"input_ids": [8, 9, 40, 41, 42]}),
                                batch_size=3, num_eval_rows=0, max_length=16, max_prompt_length=4)
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA).eval()
    results = []
    for pad_token_id in (None, 0):
        model.zero_grad()
        logprobs, values, mask = completion_logprobs(model, batch, 3, 1024.0, TOKEN_STATISTICS, pad_token_id)
        logprobs.sum().backward()
        real = mask.bool()
        results.append((logprobs[real].detach(), torch.stack([values[name][real] for name in TOKEN_STATISTICS]),
                        {name: p.grad.clone() for name, p in model.named_parameters()}))
    (padded, padded_values, padded_grads), (packed, packed_values, packed_grads) = results
    assert len(packed) == 4 + 2 + 4  # the episode's model turns, the rows' every token but the first
    torch.testing.assert_close(packed, padded, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed_values, padded_values, atol=1e-5, rtol=1e-5)
    for name, grad in packed_grads.items():
        torch.testing.assert_close(grad, padded_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_chat_message_rows_are_rendered_by_the_chat_template_and_refused_without_one(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": [{"role": "user", "content": "Hi"}],
                                "completion": [{"role": "assistant", "content": "Hello"}]}) + "\n")
    tokenizer = AutoTokenizer.from_pretrained(TINY_PYTHIA)
    with pytest.raises(ConfigError, match="holds chat messages and the tokenizer has no chat template"):
        load_completions(str(rows), tokenizer)
    tokenizer.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}" \
                              "{% if add_generation_prompt %}<assistant>{% endif %}"
    assert load_completions(str(rows), tokenizer) == [("<user>Hi<assistant>", "<assistant>Hello")]


def token_rows(tmp_path, *rows):
    path = tmp_path / "tokens.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_token_id_rows_are_trained_where_their_completion_mask_says(tmp_path):
    # a prompt (3 tokens), a model turn (2), a tool result (2, context), a model turn (2); then a row without a mask
    episode = {"input_ids": [10, 11, 12, 20, 21, 30, 31, 22, 23], "completion_mask": [0, 0, 0, 1, 1, 0, 0, 1, 1],
               "prompt": "ignored when input_ids are given"}
    data = CompletionDataModule(tokenizer=TINY_PYTHIA, dataset=token_rows(tmp_path, episode, {"input_ids": [5, 6, 7]}),
                                batch_size=2, num_eval_rows=0, max_length=8, max_prompt_length=4)
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    by_first_id = {int(row[0]): i for i, row in enumerate(batch["input_ids"])}
    i, j = by_first_id[10], by_first_id[5]
    assert batch["input_ids"][i].tolist() == episode["input_ids"][:8]  # the first max_length tokens
    assert batch["response_mask"][i].tolist() == episode["completion_mask"][:8]
    assert batch["input_ids"][j, :3].tolist() == [5, 6, 7] and batch["response_mask"][j].tolist() == [1] * 3 + [0] * 5
    assert batch["attention_mask"][j].tolist() == [1] * 3 + [0] * 5

    module = SFTModule(model={"name_or_path": TINY_PYTHIA, "lora": None})
    module.configure_model()
    logprobs, _, mask = completion_logprobs(module.policy, batch, chunk_size=4)
    assert mask[i].tolist() == [0, 0, 1, 1, 0, 0, 1]  # token t+1 predicted at t: the tool result is never a target
    assert logprobs[i][~mask[i].bool()].abs().sum() == 0


@pytest.mark.parametrize(("row", "message"), [
    ({"input_ids": [1, 10**9]}, "'input_ids' must be a non-empty list of token ids below"),
    ({"input_ids": [True, False, True]}, "'input_ids' must be a non-empty list of token ids below"),  # not 1, 0, 1
    ({"input_ids": [1, 2], "completion_mask": [1]}, "'completion_mask' must be a list of 0/1, one per input_ids"),
    ({"input_ids": [1, 2, 3], "completion_mask": [1, 0, 0]}, "no token to train on within data.max_length"),
])
def test_a_bad_token_id_row_is_one_line_naming_the_row(tmp_path, row, message):
    data = CompletionDataModule(tokenizer=TINY_PYTHIA, dataset=token_rows(tmp_path, {"input_ids": [1, 2]}, row),
                                num_eval_rows=0)
    with pytest.raises(ConfigError, match="row 2") as error:
        data.setup("fit")
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.integration
def test_train_sft_py_as_typed_saves_a_policy_that_train_py_starts_from(tmp_path):
    trained = run_app("train_sft.py", "hydra.run.dir=sft", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "Held-out rows (64): loss" in trained.stdout
    with open(tmp_path / "sft" / "csv" / "metrics.csv") as file:
        columns = set(next(csv.reader(file)))
    assert {"loss", "entropy", "mean_token_accuracy", "num_tokens", "num_completion_tokens", "eval/loss",
            "eval/entropy", "eval/mean_token_accuracy"} <= columns  # TRL's names, no _step/_epoch
    assert not any(name.endswith(("_step", "_epoch")) for name in columns), columns
    line = one_line_error(run_app("evaluate.py", f"ckpt_path={tmp_path / 'sft' / 'checkpoints' / 'last.ckpt'}",
                                  cwd=tmp_path))
    assert "is a checkpoint of SFTModule (an SFT run), not of train.py; the policy it trained is <run dir>/policy: " \
           "evaluate it with evaluate.py policy_path=<run dir>/policy" in line, line
    folder = re.search(r"python train.py model.name_or_path=(\S+)", trained.stdout).group(1)
    rl = run_app("train.py", f"model.name_or_path={folder}", *FAST, "hydra.run.dir=rl", cwd=tmp_path)
    assert rl.returncode == 0, rl.stderr[-3000:]
    line = one_line_error(run_app("train_sft.py", "data.completion_column=answer", "hydra.run.dir=bad", cwd=tmp_path))
    assert "no 'answer' column" in line and "data.completion_column" in line


@pytest.mark.integration
def test_a_logged_sft_run_prints_nothing_a_user_cannot_act_on(tmp_path):
    """stdout and stderr to files, as a cluster job's: no Lightning eval-mode warning or cloud tip, no transformers
    progress bars (carriage returns in a log), a model summary without FLOPs nobody counted."""
    from tests.apps import run_process

    result = run_process("train_sft.py", "hydra.run.dir=sft", "data.num_eval_rows=8", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert "Trainable params" in output  # the model summary is there
    for noise in ("module(s) in eval mode", "Loading weights", "Writing model shards", "Tip: For seamless cloud",
                  "FLOPs", "configured with model summary callbacks"):
        assert noise not in output, noise
