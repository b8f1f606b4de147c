"""An evaluation's outputs: a printed table, evaluation.json, generations.jsonl and scores.png."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lit_rlhf.errors import writing
from lit_rlhf.evaluation.compare import Evaluation
from lit_rlhf.terminal import plain_console

SIDE_ROWS = (("score_mean", "mean score"), ("score_std", "score std"), ("length_mean", "mean response length"),
             ("eos_rate", "EOS rate"), ("distinct_1", "distinct-1"), ("distinct_2", "distinct-2"))


def print_report(evaluation: Evaluation, console: Console | None = None) -> None:
    s = evaluation.summary
    title = f"Policy vs reference: {s['num_prompts']} prompts x {s['samples_per_prompt']} samples, seed {s['seed']}"
    table = Table(title=title, min_width=len(title))  # as wide as its title, which rich would otherwise wrap
    for column in ("", "policy", "reference"):
        table.add_column(column)
    for key, label in SIDE_ROWS:
        table.add_row(label, f"{s['policy'][key]:.3f}", f"{s['reference'][key]:.3f}")
    table.add_row("KL to reference", f"{s['policy']['kl_mean']:.3f}", "0")
    console = console or plain_console()
    console.print(table)
    diff, win = s["score_difference"], s["win_rate"]
    level = f"{diff['confidence']:.0%} CI"
    console.print(f"score difference (policy - reference): {diff['mean']:+.3f}  {level} "
                  f"[{diff['ci_low']:+.3f}, {diff['ci_high']:+.3f}]")
    console.print(f"win rate of the policy ({s['judge']}, ties count 1/2): {win['mean']:.1%}  {level} "
                  f"[{win['ci_low']:.1%}, {win['ci_high']:.1%}]")
    if "gold" in s:
        gold = s["gold"]
        console.print(f"gold score ({gold['reward']}): policy {gold['policy_score']:.3f}, reference "
                      f"{gold['reference_score']:.3f}, difference {gold['difference']['mean']:+.3f}  {level} "
                      f"[{gold['difference']['ci_low']:+.3f}, {gold['difference']['ci_high']:+.3f}]")
    for name, sides in s.get("task_metrics", {}).items():
        for stat, policy in sides["policy"].items():
            reference = sides["reference"][stat]
            console.print(f"{name} {stat}: policy {percent_interval(policy)}, reference "
                          f"{percent_interval(reference)} ({level})")
    for source, metrics in s.get("task_metrics_by_source", {}).items():  # a mixed dataset's tasks (data_source)
        for name, sides in metrics.items():
            console.print(f"{name} on {source}: policy {percent_interval(sides['policy']['accuracy'])}, reference "
                          f"{percent_interval(sides['reference']['accuracy'])} ({level})")
    if "episodes" in s:
        policy, reference = s["episodes"]["policy"], s["episodes"]["reference"]
        console.print(f"episodes calling a tool: policy {percent_interval(policy['tool_call_rate'])}, reference "
                      f"{percent_interval(reference['tool_call_rate'])}")
        console.print(f"tool errors per episode: policy {policy['tool_errors_mean']:.2f}, reference "
                      f"{reference['tool_errors_mean']:.2f}; turns: policy {policy['turns_mean']:.2f}, reference "
                      f"{reference['turns_mean']:.2f}")
    console.print(f"KL estimator: {s['kl_estimator']}")


def percent_interval(value: dict[str, float]) -> str:
    return f"{value['mean']:.1%} [{value['ci_low']:.1%}, {value['ci_high']:.1%}]"


def write_report(evaluation: Evaluation, out_dir: str | Path) -> Path:
    """Writes evaluation.json, generations.jsonl and scores.png to out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with writing(out / "evaluation.json"):  # a full disk's line names the file
        (out / "evaluation.json").write_text(json.dumps(evaluation.summary, indent=2) + "\n")
    with writing(out / "generations.jsonl"), open(out / "generations.jsonl", "w") as f:
        for record in evaluation.records:
            f.write(json.dumps(record) + "\n")
    with writing(out / "scores.png"):
        plot_scores(evaluation, out / "scores.png")
    return out


def plot_scores(evaluation: Evaluation, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policy = [r["policy_score"] for r in evaluation.records]
    reference = [r["reference_score"] for r in evaluation.records]
    low, high = min(policy + reference), max(policy + reference)
    bins = [low + (high - low) * i / 30 for i in range(31)] if high > low else 10
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(reference, bins=bins, alpha=0.5, label=f"reference (mean {sum(reference) / len(reference):.3f})")
    ax.hist(policy, bins=bins, alpha=0.5, label=f"policy (mean {sum(policy) / len(policy):.3f})")
    ax.set_xlabel("score")
    ax.set_ylabel("completions")
    ax.set_title("Score distributions on the evaluation prompts")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
