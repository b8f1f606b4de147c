"""algo.divergence=generalized_jsd against TRL 1.16's GKDTrainer.generalized_jsd_loss on the same logits: the loss
and its gradient with respect to the student's logits, for several beta and temperatures, with masked positions.

    make setup-trl                      # TRL 1.16 in .venv-trl (not a dependency of lit_rlhf)
    python bench/gkd_loss_vs_trl.py     # a few seconds

lit_rlhf's side is lit_rlhf.ops.divergence.chunked_generalized_jsd (what DistillationModule runs, chunked through an
output layer) averaged over the unmasked positions; TRL's is its staticmethod with labels (-100 where masked) and
reduction="batchmean". Writes bench/results/gkd_loss_vs_trl.md and .json and the table into docs/distillation.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

CASES = [(beta, temperature) for beta in (0.0, 0.1, 0.5, 0.9, 1.0) for temperature in (1.0, 0.7)]
SHAPE = (3, 5, 6, 50)  # batch, positions, hidden, vocabulary
TRL_PYTHON = Path(__file__).resolve().parents[1] / ".venv-trl" / "bin" / "python"


def inputs(seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    batch, positions, hidden, vocab = SHAPE
    labels = torch.randint(0, vocab, (batch, positions), generator=generator)
    labels[0, -2:] = -100  # masked positions, as padding
    labels[2, 0] = -100
    return {"hidden": torch.randn(batch, positions, hidden, generator=generator, dtype=torch.float64),
            "weight": torch.randn(vocab, hidden, generator=generator, dtype=torch.float64) * 0.7,
            "teacher_logits": torch.randn(batch, positions, vocab, generator=generator, dtype=torch.float64) * 2,
            "labels": labels}


def trl_side(path: Path) -> None:
    """Run by .venv-trl's python: TRL's loss and the gradient it gives the student's logits, for every case."""
    from trl.experimental.gkd.gkd_trainer import GKDTrainer

    cases = torch.load(path)
    for case in cases:
        student = (case["hidden"] @ case["weight"].T).requires_grad_(True)
        loss = GKDTrainer.generalized_jsd_loss(student, case["teacher_logits"], labels=case["labels"],
                                               beta=case["beta"], temperature=case["temperature"])
        loss.backward()
        case["trl_loss"], case["trl_grad"] = loss.detach(), student.grad
    torch.save(cases, path)


def lit_side(case: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss through the output layer (as the module runs it) and the gradient of the student's logits (the same
    function given the logits, through an identity layer)."""
    from lit_rlhf.ops.divergence import chunked_generalized_jsd

    real = case["labels"] != -100

    def mean_divergence(hidden: torch.Tensor, head: torch.nn.Module) -> torch.Tensor:
        divergence, _, _ = chunked_generalized_jsd(hidden[real], head, lambda at: case["teacher_logits"][real][at],
                                                   case["labels"][real], case["beta"], case["temperature"],
                                                   chunk_size=4)
        return divergence.sum() / real.sum()

    head = torch.nn.Linear(SHAPE[2], SHAPE[3], bias=False, dtype=torch.float64)
    head.weight.data.copy_(case["weight"])
    loss = mean_divergence(case["hidden"], head)
    logits = (case["hidden"] @ case["weight"].T).requires_grad_(True)
    mean_divergence(logits, torch.nn.Identity()).backward()
    return loss.detach(), logits.grad


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trl", type=Path, help=argparse.SUPPRESS)  # the TRL side, in .venv-trl
    args = parser.parse_args()
    if args.trl:
        trl_side(args.trl)
        sys.exit(0)
    from results_blocks import publish

    if not TRL_PYTHON.exists():
        sys.exit("error: TRL's environment is missing; run `make setup-trl` first (TRL 1.16 in .venv-trl)")
    cases = [{**inputs(seed), "beta": beta, "temperature": temperature}
             for seed, (beta, temperature) in enumerate(CASES)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cases.pt"
        torch.save(cases, path)
        done = subprocess.run([str(TRL_PYTHON), __file__, "--trl", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"error: TRL's side failed: {done.stderr.strip()[-800:]}")
        cases = torch.load(path)
    title = (f"lit_rlhf's `algo.divergence=generalized_jsd` against TRL 1.16 `GKDTrainer.generalized_jsd_loss` "
             f"(labels with masked positions, reduction batchmean) on the same float64 logits, {SHAPE[0]} sequences "
             f"x {SHAPE[1]} positions x {SHAPE[3]} tokens; lit_rlhf computes the softmaxes in float32, hence "
             f"differences at float32 precision (`python bench/gkd_loss_vs_trl.py`):")
    header = "| beta | temperature | TRL's loss | lit_rlhf's loss | max abs difference (loss) | "
    header += "max abs difference (gradient of the student's logits) |"
    rows, lines = [], [title, "", header, "|---|---|---|---|---|---|"]
    for case in cases:
        loss, grad = lit_side(case)
        loss_gap = float((loss - case["trl_loss"]).abs())
        grad_gap = float((grad - case["trl_grad"]).abs().max())
        rows.append({"beta": case["beta"], "temperature": case["temperature"], "trl_loss": float(case["trl_loss"]),
                     "loss": float(loss), "loss_gap": loss_gap, "grad_gap": grad_gap})
        lines.append(f"| {case['beta']} | {case['temperature']} | {float(case['trl_loss']):.6f} | {float(loss):.6f} | "
                     f"{loss_gap:.1e} | {grad_gap:.1e} |")
    publish("gkd_loss_vs_trl", {"rows": rows, "shape": SHAPE}, lines, ["docs/distillation.md"], fingerprint=False)
