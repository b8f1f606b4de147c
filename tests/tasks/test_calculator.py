"""The embedded tool-use task learns, as a user runs it: a short `experiment=calculator_grpo` raises held-out
exact-match accuracy and the tool-call rate (eval/* at step 0 against the last validation); samples and the
evaluation of its checkpoint show the conversations and the tool use."""

import csv
import json

import pytest

from tests.apps import run_app


@pytest.mark.integration
def test_a_short_calculator_run_learns_to_call_its_tool_and_answers_right_more_often(tmp_path):
    # 6 RL steps at 3x the preset's learning rate, 32 held-out questions: the gains below with room to spare (exact
    # match 0.12 -> 0.59, tool calls 0.22 -> 0.97)
    result = run_app("train.py", "experiment=calculator_grpo", "steps=6", "algo.optimizer.lr=3e-3",
                     "data.num_eval_prompts=32",
                     "trainer.val_check_interval=6", "callbacks.evaluation=null", "callbacks.curves=null",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = next(tmp_path.glob("logs/calculator_grpo/runs/*"))
    curve = [{k: float(v) for k, v in row.items() if v} for row in csv.DictReader((run_dir / "csv/metrics.csv").open())
             if row.get("eval/exact_match")]
    first, last = curve[0], curve[-1]
    assert first["step"] == 0 and last["step"] == 5
    assert last["eval/exact_match"] >= first["eval/exact_match"] + 0.2, (first, last)
    assert last["eval/tool_calls_mean"] >= first["eval/tool_calls_mean"] + 0.3, (first, last)
    assert "[env:" in result.stdout  # the training summary shows the conversations (its cells wrap lines)
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").open()]
    called = [s for s in samples if len(s["turns"]) == 3]
    assert called and [t["role"] for t in called[-1]["turns"]] == ["model", "env", "model"]
    assert called[-1]["turns"][1]["text"].startswith(" <result>")
    assert "[env: <result>" in called[-1]["response"]  # the conversation, the environment's turn marked

    evaluation = run_app("evaluate.py", f"ckpt_path={run_dir}/checkpoints/last.ckpt", "samples_per_prompt=1",
                         cwd=tmp_path)
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    assert "episodes calling a tool: policy" in evaluation.stdout
    summary = json.loads(next(tmp_path.glob("logs/evaluate/runs/*/evaluation.json")).read_text())
    episodes = summary["episodes"]
    assert episodes["policy"]["tool_call_rate"]["mean"] > episodes["reference"]["tool_call_rate"]["mean"] + 0.3


def test_the_calculator_refuses_typed_numbers_past_its_digit_limit_too():
    from lit_rlhf.tasks.calculator import MAX_DIGITS, calculator

    with pytest.raises(ValueError, match=f"more than {MAX_DIGITS} digits"):
        calculator("9" * 180)
    with pytest.raises(ValueError, match=f"more than {MAX_DIGITS} digits"):
        calculator("-" + "9" * 31)
    assert calculator("9" * 30) == "9" * 30


def test_the_calculator_environment_scores_the_final_turns_answer_as_the_task_reward_does():
    from lit_rlhf.tasks.arithmetic import ArithmeticCorrect
    from lit_rlhf.tasks.calculator import CalculatorEnvironment

    for final, answer in ((" Answer: 42", 42), (" Answer: 41", 42), (" no answer", 42), (None, 42)):
        env = CalculatorEnvironment(answer=answer)
        if final is not None:
            assert env.step(final) == (None, True)
        expected = float(ArithmeticCorrect()([""], [final or ""], answer=[answer])[0])
        assert env.reward() == expected
    assert CalculatorEnvironment().reward() is None  # no answer column: nothing to score


def test_a_malformed_expression_is_the_tools_error_and_prints_no_syntax_warning():
    """`1if 2 else 3` from the model: an error the episode shows the model, never Python's SyntaxWarning ("invalid
    decimal literal") on the console."""
    import warnings

    from lit_rlhf.tasks.calculator import calculator

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError):
            calculator("1if 2 else 3")
    assert not [w for w in caught if issubclass(w.category, SyntaxWarning)]
