"""Learned rewards and over-optimization, measured against a gold reward, on the embedded sentiment task.

    python bench/preferences.py        # 15 to 30 min on 2 CPU cores (the first line of its results says)

1. Pairs: bench/preference_pairs.py samples two completions per prompt from the embedded model, VADER (the gold)
   picks `chosen`, 10% of the labels are flipped; a tenth of the prompts is held out with exact gold labels.
2. Proxies: `train_reward_model.py` (full fine-tuning of the embedded model) on seeded subsets of the pairs (250 and
   1000) and on all of them; their accuracy on the held-out pairs against the gold labels.
3. RL against each proxy, with the gold tracked: `train.py reward=reward_model reward.normalize=true gold=vader`,
   RLOO at two KL coefficients and PPO; each run's gold.json (gold and proxy against sqrt(KL)) and its end-of-run
   evaluation (gold score of policy and reference).
4. DPO on all pairs (`train_dpo.py`), evaluated against its reference by `evaluate.py policy_path=... reward=vader`.

Writes bench/results/preferences.md and .json, docs/images/preferences_gold_vs_kl.png and the table into
docs/preferences.md.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from statistics import fmean

from preference_pairs import make_pairs
from results_blocks import publish

from lit_rlhf.callbacks.gold import moving_average

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
FIGURE = ROOT / "docs" / "images" / "preferences_gold_vs_kl.png"
PROXY = ["data.batch_size=32", "model.lora=null", "algo.optimizer.lr=1e-3", "epochs=3"]
NO_SAMPLES = ["callbacks.generation_samples=null"]


def run(script: str, *overrides: str, run_dir: Path) -> float:
    """Runs a script as a user types it (into run_dir); its wall time in seconds."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, script, *overrides, f"hydra.run.dir={run_dir}", "overwrite_run_dir=true"],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{script} {' '.join(overrides)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def subset(rows_path: Path, count: int, out: Path, seed: int = 0) -> Path:
    rows = rows_path.read_text().splitlines()
    random.Random(seed).shuffle(rows)
    out.write_text("\n".join(rows[:count]) + "\n")
    return out


def gold_accuracy(folder: Path, heldout: Path) -> float:
    """Share of held-out pairs the proxy orders as the gold does. Each response is scored as the proxy trained on
    it: ended with EOS (train_reward_model.py ends every response of a pair with it, as TRL's RewardTrainer does)."""
    from lit_rlhf.rewards import SequenceClassifierReward

    rows = [json.loads(line) for line in heldout.open()]
    proxy = SequenceClassifierReward(str(folder), batch_size=64, dtype="float32")
    prompts, ended = [r["prompt"] for r in rows], [True] * len(rows)
    chosen = proxy(prompts, [r["chosen"] for r in rows], stopped=ended)
    rejected = proxy(prompts, [r["rejected"] for r in rows], stopped=ended)
    return (chosen > rejected).float().mean().item()


def rl_summary(run_dir: Path) -> dict:
    gold = json.loads((run_dir / "gold.json").read_text())
    evaluation = json.loads((run_dir / "evaluation" / "evaluation.json").read_text())
    points = gold["points"]
    return {"proxy_first10": fmean([p["proxy"] for p in points[:10]]),
            "proxy_last10": fmean([p["proxy"] for p in points[-10:]]),
            "gold_first10": fmean([p["gold"] for p in points[:10]]),
            "gold_last10": fmean([p["gold"] for p in points[-10:]]),
            "kl_last10": fmean([p["sqrt_kl"] ** 2 for p in points[-10:]]),
            "gold_peak": gold["gold_peak"], "gold_fell_after_peak": gold["gold_fell_after_peak"],
            "proxy_rose_after_gold_peak": gold["proxy_rose_after_gold_peak"], "fit": gold["fit"],
            "eval_gold_gain": evaluation["gold"]["difference"], "eval_kl": evaluation["policy"]["kl_mean"],
            "points": points}


def plot(runs: dict[str, dict], path: Path, window: int = 10) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (gold_ax, proxy_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for label, summary in runs.items():
        d = moving_average([p["sqrt_kl"] for p in summary["points"]], window)
        gold_ax.plot(d, moving_average([p["gold"] for p in summary["points"]], window), label=label)
        proxy_ax.plot(d, moving_average([p["proxy"] for p in summary["points"]], window), label=label)
    gold_ax.set(xlabel="sqrt(KL to the reference)", ylabel="gold score (VADER)", title="Gold")
    proxy_ax.set(xlabel="sqrt(KL to the reference)", ylabel="proxy score (normalized)", title="Proxy (trained on)")
    gold_ax.legend(fontsize=8)
    fig.suptitle(f"RL against learned proxies: moving averages over {window} RL steps")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def table(data: dict) -> list[str]:
    proxies = data["proxies"]
    lines = [f"Pairs: {data['pairs']['train_pairs']} training pairs ({data['pairs']['flipped']} labels flipped), "
             f"{data['pairs']['heldout_pairs']} held-out pairs with gold labels; `python bench/preferences.py` "
             f"({data['minutes']:.1f} min on {data['machine_cpus']} CPU cores).", "",
             "| proxy | pairs | held-out accuracy against the gold |", "|---|---:|---:|"]
    lines += [f"| {name} | {p['pairs']} | {p['gold_accuracy']:.3f} |" for name, p in proxies.items()]
    lines += ["", f"RL runs: {data['steps']} RL steps each; first and last: means over 10 steps; gold peak: the "
              "moving average over 10 steps at its best; fitted KL*: where d (alpha - beta log d) fitted to the gold "
              "gain peaks (none: beta <= 0, no peak within the form); evaluation: 16 held-out prompts x 4.", "",
              "| run | proxy score first → last | gold first → last | gold peak (RL step, KL) | gold fell after peak "
              "| proxy rose after gold peak | fitted KL* | evaluation: gold gain over the reference, 95% CI | KL |",
              "|---|---|---|---|---:|---:|---:|---|---:|"]
    for name, r in data["rl"].items():
        peak, fit, gain = r["gold_peak"], r["fit"], r["eval_gold_gain"]
        kl_star = f"{fit['peak_kl']:.1f}" if fit and "peak_kl" in fit else "none"
        lines.append(f"| {name} | {r['proxy_first10']:+.2f} → {r['proxy_last10']:+.2f} | {r['gold_first10']:+.3f} → "
                     f"{r['gold_last10']:+.3f} | {peak['gold_smoothed']:+.3f} ({peak['rl_step']}, "
                     f"{peak['kl']:.1f}) | {r['gold_fell_after_peak']:.3f} | {r['proxy_rose_after_gold_peak']:+.2f} | "
                     f"{kl_star} | {gain['mean']:+.3f} [{gain['ci_low']:+.3f}, {gain['ci_high']:+.3f}] | "
                     f"{r['eval_kl']:.1f} |")
    dpo = data["dpo"]
    gain = dpo["gold_gain"]
    lines.append(f"| DPO on all pairs ({dpo['command']}) | | | | | | | {gain['mean']:+.3f} [{gain['ci_low']:+.3f}, "
                 f"{gain['ci_high']:+.3f}] | {dpo['kl']:.1f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--small", type=int, nargs="+", default=[250, 1000], help="pairs of the smaller proxies")
    parser.add_argument("--out", type=Path, default=ROOT / "logs" / "bench_preferences")
    args = parser.parse_args()
    start = time.perf_counter()
    out = args.out.resolve()
    pairs = make_pairs(out / "pairs", passes=6)
    train, heldout = out / "pairs" / "train.jsonl", out / "pairs" / "heldout.jsonl"
    sources = {f"proxy-{n}": subset(train, n, out / "pairs" / f"train_{n}.jsonl") for n in args.small}
    sources[f"proxy-{pairs['train_pairs']}"] = train
    proxies = {}
    for name, source in sources.items():
        run_dir = out / name
        seconds = run("train_reward_model.py", f"data.dataset={source}", *PROXY, run_dir=run_dir)
        proxies[name] = {"pairs": len(source.read_text().splitlines()), "folder": str(run_dir / "reward_model"),
                         "seconds": seconds, "gold_accuracy": gold_accuracy(run_dir / "reward_model", heldout)}
        print(name, proxies[name], flush=True)
    largest = list(proxies)[-1]
    settings = [(f"RLOO, {name}, kl_coef {kl}", name, ["algo=rloo", f"algo.kl_coef={kl}"])
                for kl in (0.01, 0.001) for name in proxies]
    settings.append((f"PPO, {largest}, kl_coef 0.01", largest, ["algo=ppo", "algo.kl_coef=0.01"]))
    rl = {}
    for label, proxy, algo in settings:
        run_dir = out / "rl" / label.replace(", ", "_").replace(" ", "")
        seconds = run("train.py", *algo, "reward=reward_model", f"reward.name_or_path={proxies[proxy]['folder']}",
                      "reward.dtype=float32", "reward.normalize=true", "gold=vader", f"steps={args.steps}",
                      *NO_SAMPLES, run_dir=run_dir)
        rl[label] = {**rl_summary(run_dir), "seconds": seconds}
        print(label, {k: v for k, v in rl[label].items() if k != "points"}, flush=True)
    dpo_command = ["data.batch_size=32", "algo.optimizer.lr=5e-4"]
    run("train_dpo.py", f"data.dataset={train}", *dpo_command, run_dir=out / "dpo")
    run("evaluate.py", f"policy_path={out / 'dpo' / 'policy'}", "reward=vader", run_dir=out / "dpo_eval")
    evaluation = json.loads((out / "dpo_eval" / "evaluation.json").read_text())
    dpo = {"command": " ".join(dpo_command), "gold_gain": evaluation["score_difference"],
           "kl": evaluation["policy"]["kl_mean"]}
    plot(rl, FIGURE)
    import os

    data = {"pairs": pairs, "proxies": proxies, "steps": args.steps, "rl": rl, "dpo": dpo,
            "minutes": (time.perf_counter() - start) / 60, "machine_cpus": os.cpu_count()}
    publish("preferences", data, table(data), ["docs/preferences.md"])


if __name__ == "__main__":
    main()
