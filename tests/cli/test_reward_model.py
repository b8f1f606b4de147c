"""`python train_reward_model.py data.dataset=pairs.jsonl` as a user types it: it trains, saves a folder that
`python train.py reward=reward_model reward.name_or_path=<folder> reward.normalize=true` trains against, and bad
preference data is one line (exit code 2)."""

import csv
import json
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from lit_rlhf.algos.reward_model import bradley_terry_loss, pair_metrics
from lit_rlhf.data.epoch_shuffle import RankEpochShuffle
from lit_rlhf.data.preference_datamodule import PreferenceDataModule
from tests.algos.test_reward_model import separable_pairs
from tests.apps import run_app
from tests.helpers import FAST, one_line_error

pytestmark = pytest.mark.integration  # runs a Trainer or an app


def test_a_reward_model_trained_from_the_command_line_is_the_reward_of_an_rl_run(tmp_path):
    separable_pairs(tmp_path / "pairs.jsonl", n=96)
    trained = run_app("train_reward_model.py", "data.dataset=pairs.jsonl", "algo.optimizer.lr=3e-3", "epochs=2",
                      cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    folder = re.search(r"Reward model: (\S+)", trained.stdout).group(1)
    run_dir = re.search(r"Run directory: (\S+)", trained.stdout).group(1)
    result = json.loads((tmp_path / run_dir / "result.json").read_text())
    assert result["status"] == "ok" and result["objective"] >= 0.9  # val/accuracy, the sweep objective
    rl = run_app("train.py", *FAST, "reward=reward_model", f"reward.name_or_path={folder}",
                 "reward.dtype=float32", "reward.normalize=true", "callbacks.evaluation=null", cwd=tmp_path)
    assert rl.returncode == 0, rl.stderr[-3000:]


@pytest.mark.parametrize("rows, expected", [
    ([{"prompt": "Q", "answer": " a"}], "row 1: no 'chosen' column (it has ['answer', 'prompt'])"),
    ([{"prompt": "Q", "chosen": " a", "rejected": " a"}] * 4, "chosen equals rejected on every one of its 4 rows"),
])
def test_bad_preference_data_is_one_line(tmp_path, rows, expected):
    (tmp_path / "pairs.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = run_app("train_reward_model.py", "data.dataset=pairs.jsonl", cwd=tmp_path)
    assert expected in one_line_error(result)


def test_the_python_example_of_docs_preferences_runs(tmp_path, monkeypatch):
    """docs/preferences.md's example, with the embedded backbone in place of the hub name (no network here)."""
    from pathlib import Path

    from tests.conftest import TINY_PYTHIA

    text = (Path(__file__).resolve().parents[2] / "docs" / "preferences.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text.split("## From Python", 1)[1], re.S)
    separable_pairs(tmp_path / "pairs.jsonl", n=24)
    monkeypatch.chdir(tmp_path)
    quiet = "L.Trainer(max_epochs=1, accelerator='cpu', logger=False, enable_checkpointing=False)"
    code = code.replace('"EleutherAI/pythia-160m"', repr(str(TINY_PYTHIA))).replace("L.Trainer(max_epochs=1)", quiet)
    exec(compile(code, "docs/preferences.md", "exec"), {})
    assert (tmp_path / "my_reward_model" / "model.safetensors").is_file()
    assert (tmp_path / "my_reward_model" / "reward_stats.json").is_file()


def test_dpo_from_the_command_line_saves_a_policy_that_evaluate_py_compares_with_its_start(tmp_path):
    separable_pairs(tmp_path / "pairs.jsonl", n=64)
    trained = run_app("train_dpo.py", "data.dataset=pairs.jsonl", "algo.optimizer.lr=3e-3", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    run_dir = Path(re.search(r"Run directory: (.+)", trained.stdout).group(1).strip())
    assert (run_dir / "curves.png").stat().st_size > 10_000  # its loss, margins and accuracies, drawn by step
    command = re.search(r"python evaluate.py (.+)", trained.stdout).group(1).split()
    evaluated = run_app("evaluate.py", *command, "data.num_eval_prompts=4", cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "score difference (policy - reference)" in evaluated.stdout


@pytest.mark.parametrize("script, setting, expected", [
    ("train_reward_model.py", "algo.optimizer.lr=nan", "algo.optimizer.lr=nan must be a number > 0"),
    ("train_dpo.py", "algo.optimizer.lr=-1e-3", "algo.optimizer.lr=-0.001 must be a number > 0"),
    ("train_dpo.py", "model.lora.r=0", "model.lora.r=0 must be a whole number >= 1"),
    ("train_dpo.py", "+model.lora.rank=8", "model.lora"),
    # the embedded model's reward model trains in full (conf/reward_model_tuning/tiny.yaml): LoRA is given whole
    ("train_reward_model.py", "model.lora.r=8", "model.lora.r sets a key of model.lora, which is null in this config "
                                                "(`--cfg job` prints it); give model.lora whole, e.g. "
                                                "'model.lora={r: 8}' (its other keys at their defaults), or leave "
                                                "model.lora.r out."),
    ("train_dpo.py", "data.batch_size=true", "data.batch_size=True must be a whole number >= 1"),
    ("train_dpo.py", "algo.beta=true", "algo.beta=True must be a finite number > 0"),
    ("train_reward_model.py", "algo.center_rewards_coefficient=true",
     "algo.center_rewards_coefficient=True must be a finite number >= 0"),
    ("train_dpo.py", "algo.label_smoothing=0.1", "algo.label_smoothing=0.1 is read by algo.loss_type=robust|exo_pair|"
                                                 "aot|aot_unpaired only, not by sigmoid (TRL's sigmoid loss ignores "
                                                 "it); conservative DPO is algo.cdpo_epsilon here."),
    ("train_dpo.py", "algo.precompute_ref_batch_size=0", "algo.precompute_ref_batch_size=0 must be >= 1."),
    ("train_dpo.py", "algo.sync_ref_model=true", "algo.sync_ref_model=true with LoRA and algo.ref_model_mixup_alpha="
                                                 "0.6: a LoRA reference can only be reset to the policy"),
], ids=["rm-nan-lr", "dpo-negative-lr", "dpo-lora-r-0", "dpo-unknown-lora-key", "rm-lora-key-under-null",
        "dpo-bool-batch-size",
        "dpo-bool-beta", "rm-bool-centering", "dpo-label-smoothing", "dpo-precomputed-reference",
        "dpo-lora-reference-mix"])
def test_bad_preference_settings_are_one_line_before_work_starts(script, setting, expected, tmp_path):
    separable_pairs(tmp_path / "pairs.jsonl", n=24)
    line = one_line_error(run_app(script, "data.dataset=pairs.jsonl", setting, cwd=tmp_path))
    assert expected in line, line


@pytest.mark.parametrize("margin", ["abc", None], ids=["string", "null"])
def test_a_margin_that_is_not_a_number_is_one_line_naming_the_row(margin, tmp_path):
    rows = [{"prompt": "Q", "chosen": " good", "rejected": " bad", "m": 1.0}] * 3
    rows.append({"prompt": "Q", "chosen": " good", "rejected": " bad", "m": margin})
    (tmp_path / "pairs.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    line = one_line_error(run_app("train_reward_model.py", "data.dataset=pairs.jsonl", "data.margin_column=m",
                                  cwd=tmp_path))
    assert f"row 4 'm' is {margin!r}, not a finite number" in line, line


@pytest.mark.parametrize("script", ["train_reward_model.py", "train_dpo.py"])
def test_a_loss_that_goes_non_finite_stops_the_run_and_saves_no_model(script, tmp_path):
    separable_pairs(tmp_path / "pairs.jsonl", n=48)
    result = run_app(script, "data.dataset=pairs.jsonl", "algo.optimizer.lr=1e4", "epochs=3", "model.lora=null",
                     cwd=tmp_path)
    line = one_line_error(result)
    assert "is not finite (NaN or inf), so the run stops before the update applies it and saves no model" in line
    assert "lower algo.optimizer.lr (now 10000)" in line
    assert not list(tmp_path.glob("logs/*/runs/*/reward_model")) and not list(tmp_path.glob("logs/*/runs/*/policy"))


def test_a_dpo_resume_that_would_train_something_else_is_one_line(tmp_path):
    separable_pairs(tmp_path / "pairs.jsonl", n=24)
    first = run_app("train_dpo.py", "data.dataset=pairs.jsonl", "hydra.run.dir=run", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    resume = ["data.dataset=pairs.jsonl", "hydra.run.dir=run", "ckpt_path=last", "epochs=2"]
    line = one_line_error(run_app("train_dpo.py", *resume, "algo.beta=0.2", cwd=tmp_path))
    assert line.startswith("error: resume changes algo.beta (0.1 -> 0.2)"), line
    (tmp_path / "pairs.jsonl").write_text((tmp_path / "pairs.jsonl").read_text().replace("Review", "Film"))
    line = one_line_error(run_app("train_dpo.py", *resume, cwd=tmp_path))
    assert line.startswith("error: resume changes data.dataset (its file differs from the checkpoint's run"), line


def test_a_checkpoint_of_another_kind_is_named_as_such(tmp_path):
    separable_pairs(tmp_path / "pairs.jsonl", n=24)
    dpo = run_app("train_dpo.py", "data.dataset=pairs.jsonl", "hydra.run.dir=dpo", cwd=tmp_path)
    assert dpo.returncode == 0, dpo.stderr[-3000:]
    checkpoint = tmp_path / "dpo" / "checkpoints" / "last.ckpt"
    line = one_line_error(run_app("evaluate.py", f"ckpt_path={checkpoint}", cwd=tmp_path))
    assert "is a checkpoint of DPOModule (a preference run), not of train.py" in line, line
    # train.py resuming from it: named too (its settings differ from an RL run's, but that is not the point)
    line = one_line_error(run_app("train.py", *FAST, f"ckpt_path={checkpoint}", cwd=tmp_path))
    assert line == (f"error: ckpt_path={checkpoint} is a checkpoint of DPOModule (a preference run), not of train.py; "
                    f"the policy it trained is <run dir>/policy: evaluate it with evaluate.py policy_path=<run "
                    f"dir>/policy, or train on from it with train.py model.name_or_path=<run dir>/policy."), line
    line = one_line_error(run_app("train_reward_model.py", "data.dataset=pairs.jsonl", f"ckpt_path={checkpoint}",
                                  cwd=tmp_path))
    assert line.startswith("error: ckpt_path holds a checkpoint of train_dpo.py, not of train_reward_model.py"), line
    rl = run_app("train.py", *FAST, "hydra.run.dir=rl", cwd=tmp_path)
    assert rl.returncode == 0, rl.stderr[-3000:]
    line = one_line_error(run_app("train_dpo.py", "data.dataset=pairs.jsonl",
                                  f"ckpt_path={tmp_path / 'rl' / 'checkpoints' / 'last.ckpt'}", cwd=tmp_path))
    assert line.startswith("error: ckpt_path holds a checkpoint of train.py (an RL run), not of train_dpo.py"), line


def test_a_pickled_payload_as_a_preference_checkpoint_is_refused_in_one_line_without_running(tmp_path):
    import torch

    from tests.reliability.test_bad_inputs import Payload

    separable_pairs(tmp_path / "pairs.jsonl", n=24)
    torch.save({"state_dict": Payload(tmp_path / "PWNED")}, tmp_path / "payload.ckpt")
    line = one_line_error(run_app("train_dpo.py", "data.dataset=pairs.jsonl", "ckpt_path=payload.ckpt", cwd=tmp_path))
    assert line.startswith("error: ckpt_path='payload.ckpt'"), line
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("script, heldout", [
    ("train_reward_model.py", r"Held-out pairs \(64\): accuracy \d\.\d{3} \(chosen scored above rejected\)"),
    ("train_dpo.py", r"Held-out pairs \(64\): accuracy \d\.\d{3}, reward margin [+-]\d\.\d{4} "),
])
def test_without_a_dataset_the_scripts_train_on_the_bundled_pairs_and_print_the_held_out_figures(script, heldout,
                                                                                                   tmp_path):
    """As typed (a few batches here): the bundled pairs, 64 held out; the end says how the held-out pairs fare."""
    result = run_app(script, "+trainer.limit_train_batches=2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(heldout, result.stdout), result.stdout[-2000:]


def rewards_of(model, batches) -> tuple[torch.Tensor, torch.Tensor]:
    """The reward model's scores of the chosen and of the rejected responses of the batches of pairs."""
    chosen, rejected = [], []
    with torch.no_grad():
        for batch in batches:
            scores = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, 0]  # 2B
            chosen_scores, rejected_scores = scores.chunk(2)  # B, B
            chosen.append(chosen_scores)
            rejected.append(rejected_scores)
    return torch.cat(chosen), torch.cat(rejected)


def expected_figures(stage: str, chosen: torch.Tensor, rejected: torch.Tensor) -> dict[str, float]:
    figures = {"loss": bradley_terry_loss(chosen, rejected), **pair_metrics(chosen, rejected)}
    return {f"{stage}/{name}": float(value) for name, value in figures.items() if name != "reward_std"}


@pytest.mark.multi_rank
def test_under_ddp_the_logged_figures_and_reward_stats_are_of_every_ranks_pairs(tmp_path):
    """train_reward_model.py trainer=ddp on 2 CPU ranks, one step at a learning rate too small to move the weights:
    the logged figures are of both ranks' pairs, as the saved model scores them in one process: the training step's
    of both ranks' batches (as TRL gathers them), the held-out ones and reward_stats.json of all 64 held-out pairs,
    each rank having evaluated half (they were rank zero's share alone). DPO and SFT log through the same
    PairModule.log_metrics."""
    result = run_app("train_reward_model.py", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                     "epochs=1", "+trainer.limit_train_batches=1", "algo.optimizer.lr=1e-12", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    folder = tmp_path / re.search(r"Reward model: (\S+)", result.stdout).group(1)
    run_dir = tmp_path / re.search(r"Run directory: (\S+)", result.stdout).group(1)
    with open(run_dir / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))

    datamodule = PreferenceDataModule(tokenizer=str(folder), dataset="sentiment_pairs", batch_size=32)
    datamodule.setup("fit")
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    collate = datamodule.heldout_loader([]).collate_fn
    first_batches = [collate([datamodule.train_pairs[i] for i in list(RankEpochShuffle(
        len(datamodule.train_pairs), 32, seed=0, num_replicas=2, rank=rank))[:32]]) for rank in (0, 1)]
    trained = [expected_figures("train", *rewards_of(model, [batch])) for batch in first_batches]
    logged = next(row for row in rows if row.get("train/loss"))
    for name in trained[0]:
        assert float(logged[name]) == pytest.approx((trained[0][name] + trained[1][name]) / 2, abs=1e-5), name

    chosen, rejected = rewards_of(model, datamodule.val_dataloader())  # 64, 64
    logged = [row for row in rows if row.get("val/loss")][-1]
    for name, value in expected_figures("val", chosen, rejected).items():
        assert float(logged[name]) == pytest.approx(value, abs=1e-5), name
    stats = json.loads((folder / "reward_stats.json").read_text())
    both = torch.cat([chosen, rejected])
    assert stats["count"] == 128
    assert stats["mean"] == pytest.approx(float(both.mean()), abs=1e-5)
    assert stats["std"] == pytest.approx(float(both.std(unbiased=False)), abs=1e-5)
