"""SFT: the completion-only loss against a slow reference (one forward per completion token on its unpadded prefix),
the prompt never trained on, chat-message rows, and train_sft.py as typed: it saves a policy train.py starts from."""

import json
import re

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lit_rlhf.algos.sft import SFTModule, completion_logprobs
from lit_rlhf.data.completion_datamodule import load_completions
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


def test_train_sft_py_as_typed_saves_a_policy_that_train_py_starts_from(tmp_path):
    trained = run_app("train_sft.py", "hydra.run.dir=sft", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "Held-out rows (64): loss" in trained.stdout
    folder = re.search(r"python train.py model.name_or_path=(\S+)", trained.stdout).group(1)
    rl = run_app("train.py", f"model.name_or_path={folder}", *FAST, "hydra.run.dir=rl", cwd=tmp_path)
    assert rl.returncode == 0, rl.stderr[-3000:]
    line = one_line_error(run_app("train_sft.py", "data.completion_column=answer", "hydra.run.dir=bad", cwd=tmp_path))
    assert "no 'answer' column" in line and "data.completion_column" in line
