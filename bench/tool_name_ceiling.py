"""Why every LoRA run on the calculator task levels off near 70%: the choice of tool name is a logit LoRA cannot move.

The embedded model learned from its pre-training corpus to name the right tool (`calculator`) two times in three and
a tool that does not exist (`compute`, `calc`, `calculate`) otherwise, and a wrong name fails the episode. The
logit gap between `calculator` and the others at the token after `<call>` is the final hidden state, normalized by
the final LayerNorm, times the difference of their output-layer rows. With the LayerNorm and the output layer frozen
(LoRA adapts the linear layers before them), the normalized state has a fixed norm, so the gap cannot exceed
|d * gamma| * sqrt(H) + d . beta (d: the rows' difference, gamma and beta: the LayerNorm's weight and bias, H: the
hidden size), however the layers before it change. This script reports:

- the gap's bound and the largest p(calculator) it allows, for the base model and the embedded teacher;
- p(calculator) after 30 AdamW steps that do nothing but raise it, on 16 prompts, with LoRA (r 16, all-linear, as
  model.lora) and with full fine-tuning, at the learning rate of the embedded experiments and at 10 times it.

    python bench/tool_name_ceiling.py      # about a minute on 2 CPU cores

Writes bench/results/tool_name_ceiling.md and .json and the table into docs/distillation.md.
"""

from __future__ import annotations

import json
import math

import torch
from command_line import takes_no_options
from peft import LoraConfig, get_peft_model
from results_blocks import ROOT, publish
from transformers import AutoModelForCausalLM, AutoTokenizer

ASSETS = ROOT / "lit_rlhf" / "assets"
TOOLS = ("calculator", "compute", "calc", "calculate")
STEPS, LRS = 30, (1e-3, 1e-2)


def prompts(tokenizer) -> torch.Tensor:
    """The first 16 bundled questions, each followed by " <call>" (three-digit products: equal token counts)."""
    rows = (ROOT / "lit_rlhf" / "data" / "calculator" / "prompts.jsonl").read_text().splitlines()[:16]
    return tokenizer([json.loads(row)["prompt"] + " <call>" for row in rows], return_tensors="pt").input_ids


def p_right_tool(model, ids: torch.Tensor, tool_ids: list[int]) -> torch.Tensor:
    return model(input_ids=ids).logits[:, -1].float().softmax(-1)[:, tool_ids[0]]  # 16


def bound(model, tool_ids: list[int]) -> tuple[float, float]:
    """The largest logit gap between the right tool and the mean of the wrong ones the frozen LayerNorm and output
    layer allow, and the p(calculator) it gives against three wrong names of equal logits."""
    rows = model.get_output_embeddings().weight.detach().float()
    norm = model.gpt_neox.final_layer_norm
    d = rows[tool_ids[0]] - rows[tool_ids[1:]].mean(0)
    gap = float((d * norm.weight.detach()).norm() * math.sqrt(d.numel()) + d @ norm.bias.detach())
    return gap, math.exp(gap) / (math.exp(gap) + len(tool_ids) - 1)


def trained(folder, ids, tool_ids, lora: bool, lr: float) -> float:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(folder)
    if lora:
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    for _ in range(STEPS):
        loss = -p_right_tool(model, ids, tool_ids).log().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        return float(p_right_tool(model, ids, tool_ids).mean())


if __name__ == "__main__":
    takes_no_options(__doc__)
    tokenizer = AutoTokenizer.from_pretrained(ASSETS / "tiny-calculator")
    tool_ids = tokenizer.convert_tokens_to_ids(list(TOOLS))
    ids = prompts(tokenizer)
    rows, lines = [], ["The token after `<call>` on 16 held-in questions (`python bench/tool_name_ceiling.py`): the "
                       "largest logit gap the frozen final LayerNorm and output layer allow, the p(calculator) that "
                       f"gap gives, p(calculator) now, and after {STEPS} AdamW steps that only raise it:", "",
                       "| model | bound on the logit gap | largest p(calculator) under LoRA | p(calculator) | LoRA, lr "
                       "1e-3 | LoRA, lr 1e-2 | full fine-tuning, lr 1e-3 | full fine-tuning, lr 1e-2 |",
                       "|---|---|---|---|---|---|---|---|"]
    for name in ("tiny-calculator", "tiny-calculator-teacher"):
        folder = ASSETS / name
        model = AutoModelForCausalLM.from_pretrained(folder)
        gap, largest = bound(model, tool_ids)
        with torch.no_grad():
            now = float(p_right_tool(model, ids, tool_ids).mean())
        after = {f"{'lora' if lora else 'full'}_{lr:g}": trained(folder, ids, tool_ids, lora, lr)
                 for lora in (True, False) for lr in LRS}
        rows.append({"model": name, "gap_bound": gap, "largest_p": largest, "p": now, "after": after})
        lines.append(f"| {name} | {gap:.2f} | {largest:.3f} | {now:.3f} | " + " | ".join(
            f"{after[key]:.3f}" for key in ("lora_0.001", "lora_0.01", "full_0.001", "full_0.01")) + " |")
    publish("tool_name_ceiling", {"rows": rows, "steps": STEPS}, lines, ["docs/distillation.md"], fingerprint=False)
