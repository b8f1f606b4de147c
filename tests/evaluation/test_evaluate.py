"""evaluate.py and the end-of-training evaluation on the embedded default."""

import json

import pytest
from hydra import compose, initialize_config_dir

from lit_rlhf.cli.evaluate import evaluate
from lit_rlhf.cli.resolvers import register_resolvers
from lit_rlhf.rewards import VaderSentiment
from tests.apps import ROOT, run_app
from tests.helpers import matches, signal_this_process

pytestmark = pytest.mark.xdist_group("trained_run")  # one worker trains the module's run, once


def run_in(script, *overrides, out):
    return run_app(script, f"hydra.run.dir={out}", *overrides, cwd=ROOT)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A short RLOO run through train.py; its end-of-training evaluation is on by default. Its gold reward (VADER of
    prompt and completion, where the trained reward scores the completion) is scored beside the reward."""
    out = tmp_path_factory.mktemp("run")
    result = run_in("train.py", "steps=8", "algo.optimizer.lr=3e-3", "trainer.val_check_interval=8",
                    "callbacks.generation_samples=null", "gold=vader", "gold.rewards.vader.include_prompt=true",
                    out=out)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def evaluate_with(*overrides, out):
    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("evaluate", overrides=[f"paths.root_dir={out}", f"paths.output_dir={out}", *overrides])
    return evaluate(cfg)


@pytest.mark.integration
def test_a_short_rloo_run_beats_its_reference_with_a_positive_interval_and_a_winning_rate(trained_run):
    summary = json.loads((trained_run / "evaluation" / "evaluation.json").read_text())
    assert summary["num_prompts"] == 16 and summary["samples_per_prompt"] == 4
    assert summary["score_difference"]["ci_low"] > 0, summary["score_difference"]
    assert summary["win_rate"]["mean"] > 0.5 and summary["judge"] == "RewardJudge"
    assert summary["policy"]["score_mean"] > summary["reference"]["score_mean"]
    assert 0 < summary["policy"]["kl_mean"] < 10 and summary["kl_estimator"].startswith("k1")
    rows = [json.loads(line) for line in (trained_run / "evaluation" / "generations.jsonl").open()]
    assert len(rows) == 16 * 4
    assert sum(r["policy_score"] for r in rows) / len(rows) == pytest.approx(summary["policy"]["score_mean"])
    assert (trained_run / "evaluation" / "scores.png").stat().st_size > 10_000
    with open(trained_run / "csv" / "metrics.csv") as f:
        header = f.readline()
    assert "eval/win_rate" in header and "eval/score_diff" in header and "eval/rlhf_reward" in header
    assert "eval/gold_score_diff" in header and "gold/score" in header


@pytest.mark.integration
def test_the_evaluation_scores_the_gold_reward_on_both_sides(trained_run):
    summary = json.loads((trained_run / "evaluation" / "evaluation.json").read_text())
    rows = [json.loads(line) for line in (trained_run / "evaluation" / "generations.jsonl").open()]
    gold = VaderSentiment(include_prompt=True)
    for side in ("policy", "reference"):
        expected = gold([r["prompt"] for r in rows], [r[side] for r in rows])
        assert [r[f"{side}_gold"] for r in rows] == pytest.approx(expected.tolist())
        assert summary["gold"][f"{side}_score"] == pytest.approx(expected.mean().item())
    by_prompt = {}
    for r in rows:
        by_prompt.setdefault(r["prompt_index"], []).append(r["policy_gold"] - r["reference_gold"])
    per_prompt = [sum(v) / len(v) for v in by_prompt.values()]
    assert summary["gold"]["reward"] == "vader"
    assert summary["gold"]["difference"]["mean"] == pytest.approx(sum(per_prompt) / len(per_prompt))
    assert summary["gold"]["difference"]["ci_low"] <= summary["gold"]["difference"]["mean"]


@pytest.mark.integration
def test_evaluate_py_on_the_checkpoint_reproduces_the_end_of_training_report(trained_run, tmp_path):
    evaluation = evaluate_with(f"ckpt_path={trained_run}/checkpoints/last.ckpt", out=tmp_path)
    # the checkpoint's gold reward too: the command line names none
    assert evaluation.summary == json.loads((trained_run / "evaluation" / "evaluation.json").read_text())
    assert (tmp_path / "evaluation.json").exists() and (tmp_path / "generations.jsonl").exists()


@pytest.mark.integration
@pytest.mark.parametrize("signame, code, by", [("SIGTERM", 143, "SIGTERM"), ("SIGINT", 130, "Ctrl-C")])
def test_ctrl_c_or_sigterm_stops_evaluate_py_in_one_line_and_leaves_no_run_directory(signame, code, by, trained_run,
                                                                                     tmp_path):
    """Stopped while it loads and samples (the judge's construction signals): Ctrl-C printed a traceback, SIGTERM
    ended the process by its default action, and each left an empty run directory."""
    out = tmp_path / "evaluation_run"
    result = run_in("evaluate.py", f"ckpt_path={trained_run}/checkpoints/last.ckpt",
                    "judge._target_=tests.helpers.RewardThatSignalsWhileBuilt", f"+judge.signame={signame}", out=out)
    assert result.returncode == code, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (f"stopped by {by} before the results were written: nothing "
                                                      f"was written.")
    assert not out.exists()


@pytest.mark.integration
def test_an_exported_model_directory_evaluates_against_the_base_model(trained_run, tmp_path):
    export = run_app("lit_rlhf.export", str(trained_run / "checkpoints" / "last.ckpt"), str(tmp_path / "hf"),
                     cwd=ROOT, module=True)
    assert export.returncode == 0, export.stderr[-2000:]
    # the card names the run's reward, from the checkpoint (the export has no reward object)
    assert "on the reward vader: lit_rlhf.rewards.VaderSentiment." in (tmp_path / "hf" / "README.md").read_text()
    from_export = evaluate_with(f"policy_path={tmp_path / 'hf'}", "gold=vader",
                                "gold.rewards.vader.include_prompt=true", out=tmp_path / "eval").summary
    from_ckpt = json.loads((trained_run / "evaluation" / "evaluation.json").read_text())
    assert from_export["reference"] == from_ckpt["reference"]  # the base model, loaded from model.name_or_path
    # merged LoRA weights round differently from the adapter path: the same samples up to float noise
    assert from_export["policy"]["score_mean"] == pytest.approx(from_ckpt["policy"]["score_mean"], abs=0.03)
    assert from_export["policy"]["kl_mean"] == pytest.approx(from_ckpt["policy"]["kl_mean"], rel=0.05)
    assert from_export["win_rate"]["mean"] == pytest.approx(from_ckpt["win_rate"]["mean"], abs=0.05)
    assert from_export["gold"]["reference_score"] == from_ckpt["gold"]["reference_score"]  # gold= on the command line
    assert from_export["gold"]["policy_score"] == pytest.approx(from_ckpt["gold"]["policy_score"], abs=0.03)


@pytest.mark.integration
def test_sigterm_while_the_export_writes_stops_it_in_one_line_without_a_half_written_folder(trained_run, tmp_path,
                                                                                           monkeypatch):
    """SIGTERM as the merged model is written (the folder made): it ended the process by the default action and left
    the folder half-written."""
    from lit_rlhf.models import export

    def merged_then_signalled(model, on_a_copy):
        model = merged(model, on_a_copy)
        signal_this_process("SIGTERM")
        return model

    merged = export.merged
    monkeypatch.setattr(export, "merged", merged_then_signalled)
    result = run_app("lit_rlhf.export", str(trained_run / "checkpoints" / "last.ckpt"), str(tmp_path / "hf"),
                     cwd=ROOT, module=True)
    assert result.returncode == 143, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == ("stopped by SIGTERM before the results were written: nothing "
                                                      "was written.")
    assert not (tmp_path / "hf").exists()


def test_the_reference_against_itself_has_zero_kl_zero_difference_and_only_ties(tmp_path):
    summary = evaluate_with("data.num_eval_prompts=6", "samples_per_prompt=2", out=tmp_path).summary
    assert summary["policy"]["kl_mean"] == 0.0
    assert summary["score_difference"]["mean"] == 0.0 and summary["win_rate"]["mean"] == 0.5
    assert summary["policy"] == {**summary["reference"], "kl_mean": 0.0}


@pytest.mark.integration
def test_a_user_defined_judge_plugs_in_through_the_config(trained_run, tmp_path):
    evaluation = evaluate_with(f"ckpt_path={trained_run}/checkpoints/last.ckpt",
                               "judge._target_=tests.helpers.ShorterWins", out=tmp_path)
    assert evaluation.summary["judge"] == "ShorterWins"
    expected = [1.0 if len(r["policy"]) < len(r["reference"]) else 0.0 if len(r["policy"]) > len(r["reference"])
                else 0.5 for r in evaluation.records]
    assert evaluation.summary["win_rate"]["mean"] == pytest.approx(sum(expected) / len(expected))
    assert [r["judgment"] for r in evaluation.records] == expected


@pytest.mark.integration
def test_an_llm_judge_at_an_endpoint_decides_the_pairs(trained_run, tmp_path):
    from tests.remote.fake_server import FakeRewardServer, longer_wins_judge

    with FakeRewardServer(longer_wins_judge) as endpoint:
        evaluation = evaluate_with(f"ckpt_path={trained_run}/checkpoints/last.ckpt",
                                   "judge._target_=lit_rlhf.rewards.LLMPairwiseJudge", "+judge.model=judge-1",
                                   f"+judge.base_url={endpoint.url}/v1", out=tmp_path)
    assert evaluation.summary["judge"] == "LLMPairwiseJudge"
    expected = [1.0 if len(r["policy"]) > len(r["reference"]) else 0.0 if len(r["policy"]) < len(r["reference"])
                else 0.5 for r in evaluation.records]
    assert [r["judgment"] for r in evaluation.records] == expected and len(endpoint.requests) == len(expected)


@pytest.mark.integration
def test_a_task_metric_whose_column_the_runs_prompts_lack_is_one_line_before_sampling(trained_run, tmp_path):
    """evaluate.py ckpt_path=<a sentiment run> task_metrics=exact_match ended in a ValueError traceback after the
    policy and reference had sampled every held-out prompt."""
    result = run_in("evaluate.py", f"ckpt_path={trained_run}/checkpoints/last.ckpt", "task_metrics=exact_match",
                    out=tmp_path / "eval")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: task metric exact_match needs the dataset column 'answer', which the prompts' rows do not have")


@pytest.mark.integration
def test_evaluate_py_reports_a_bad_checkpoint_path_in_one_line(tmp_path):
    result = run_in("evaluate.py", "ckpt_path=missing.ckpt", out=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ckpt_path='missing.ckpt' is not a file")


@pytest.mark.integration
@pytest.mark.parametrize("path, line", [
    ("runs/rloo-policy/",  # a trailing slash: no Hub name
     "error: policy_path='runs/rloo-policy/' is no folder here, and not a Hugging Face Hub name (owner/name) either; "
     "give the path of a folder that save_pretrained wrote, or a Hub name."),
    ("someone/rloo-policy",  # may be a Hub name: looked up, and named as typed, not as the model.name_or_path it fills
     "error: model 'someone/rloo-policy' is not available here ... or point policy_path at a local directory.")])
def test_evaluate_py_reports_a_policy_path_that_is_no_folder_in_one_line(path, line, tmp_path):
    result = run_in("evaluate.py", f"policy_path={path}", out=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert matches(last, line), last
