"""What the preference scripts' first commands show: `python train_reward_model.py` and `python train_dpo.py` as
typed (the embedded model's own settings, conf/*_tuning/tiny.yaml) and with the settings any other model gets.

    python bench/pair_defaults.py     # ~3 min on 2 CPU cores; writes bench/results/pair_defaults.{md,json}

Each run prints its accuracy on the 64 pairs it holds out of the bundled ones. Beside it, the saved model is scored
on a larger set of pairs labelled by the gold (VADER) that it never trained on: bench/preference_pairs.py's held-out
pairs (seed 1, exact labels), less any pair that is also among the bundled ones. The reward model orders a pair by
its two scores, DPO's policy by its implicit reward (the log-ratio to the reference, the model it started from).
"""

import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from command_line import takes_no_options
from preference_pairs import TINY, make_pairs
from preferences import gold_accuracy
from results_blocks import publish

ROOT = Path(__file__).resolve().parents[1]
BUNDLED_PAIRS = ROOT / "lit_rlhf" / "data" / "sentiment" / "pairs.jsonl"
# the settings a model without a tuning file gets (the scripts' own: LoRA, the real-model rates, 1 epoch): the
# embedded model's tuning entry removed from the defaults list
REAL_MODEL = {"train_reward_model.py": ["~reward_model_tuning"], "train_dpo.py": ["~dpo_tuning"]}
SAVED = {"train_reward_model.py": "reward_model", "train_dpo.py": "policy"}  # the folder each script saves
HELD_OUT = re.compile(r"Held-out pairs \((\d+)\): accuracy ([\d.]+)(?:, reward margin ([+-][\d.]+).*loss ([\d.]+))?")
GOLD_PASSES, GOLD_SEED = 6, 1


def unseen_gold_pairs(folder: Path) -> Path:
    """bench/preference_pairs.py's held-out pairs with exact gold labels, less the bundled ones (a model trains on
    those): folder/gold.jsonl."""
    import json

    make_pairs(folder, passes=GOLD_PASSES, noise=0.0, seed=GOLD_SEED)

    def key(row: dict) -> tuple:
        return row["prompt"], frozenset((row["chosen"], row["rejected"]))

    bundled = {key(json.loads(line)) for line in BUNDLED_PAIRS.open()}
    rows = [line for line in (folder / "heldout.jsonl").open() if key(json.loads(line)) not in bundled]
    (folder / "gold.jsonl").write_text("".join(rows))
    return folder / "gold.jsonl"


def dpo_gold_accuracy(policy: Path, pairs: Path) -> float:
    """Share of the pairs whose chosen response the policy gives the larger implicit reward
    (log pi(y|x) - log pi_ref(y|x), the reference being the embedded model it started from), as DPO's own
    rewards/accuracies counts."""
    import torch
    from transformers import AutoModelForCausalLM

    from lit_rlhf.algos.dpo import sequence_logprobs
    from lit_rlhf.data.preference_datamodule import PreferenceDataModule

    data = PreferenceDataModule(tokenizer=str(TINY), dataset=str(pairs), num_eval_pairs=0, batch_size=64)
    data.setup("fit")
    policy_model, reference = (AutoModelForCausalLM.from_pretrained(path).eval() for path in (policy, TINY))
    right = total = 0
    with torch.no_grad():
        for batch in data.train_dataloader():
            policy_chosen, policy_rejected = sequence_logprobs(policy_model, batch).chunk(2)  # B, B
            reference_chosen, reference_rejected = sequence_logprobs(reference, batch).chunk(2)  # B, B
            right += int(((policy_chosen - reference_chosen) > (policy_rejected - reference_rejected)).sum())
            total += len(policy_chosen)
    return right / total


def run(script: str, args: list[str], gold: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = subprocess.run([sys.executable, str(ROOT / script), *args], cwd=tmp, capture_output=True, text=True,
                                env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
        seconds = time.perf_counter() - start
        if result.returncode != 0:
            sys.exit(f"error: python {script} {' '.join(args)} failed: {result.stderr[-2000:]}")
        saved = next(Path(tmp).glob(f"logs/**/{SAVED[script]}"))
        scored = gold_accuracy(saved, gold) if script == "train_reward_model.py" else dpo_gold_accuracy(saved, gold)
    pairs, accuracy, margin, loss = HELD_OUT.search(result.stdout).groups()
    return {"pairs": int(pairs), "accuracy": float(accuracy), "margin": None if margin is None else float(margin),
            "loss": None if loss is None else float(loss), "gold_accuracy": scored, "seconds": round(seconds, 1)}


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        gold = unseen_gold_pairs(Path(folder))
        gold_pairs = sum(1 for _ in gold.open())
        for script in ("train_reward_model.py", "train_dpo.py"):
            rows.append({"command": f"python {script}", **run(script, [], gold)})
            rows.append({"command": shlex.join(["python", script, *REAL_MODEL[script]]),
                         **run(script, REAL_MODEL[script], gold)})
    lines = ["The bundled pairs; after training, the run's own held-out pairs and pairs labelled by the gold that no "
             f"run trained on ({gold_pairs}: `bench/preference_pairs.py`, seed {GOLD_SEED}, {GOLD_PASSES} passes, "
             "less the bundled ones; the reward model orders a pair by its scores, DPO by its implicit reward); 2 "
             "CPU cores; `python bench/pair_defaults.py`.", "",
             "| command | held-out accuracy | margin (DPO) | loss (DPO) | accuracy on the gold's pairs | seconds |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        margin = "" if row["margin"] is None else f"{row['margin']:+.4f}"
        loss = "" if row["loss"] is None else f"{row['loss']:.4f}"
        lines.append(f"| `{row['command']}` | {row['accuracy']:.3f} ({row['pairs']} pairs) | {margin} | {loss} | "
                     f"{row['gold_accuracy']:.3f} | {row['seconds']:.0f} |")
    publish("pair_defaults", {"rows": rows, "gold_pairs": gold_pairs, "gold_seed": GOLD_SEED,
                              "gold_passes": GOLD_PASSES}, lines, ["docs/preferences.md"])


if __name__ == "__main__":
    takes_no_options(__doc__)
    main()
