"""The model card (README.md) written beside an exported policy: where it came from (base model, algorithm and its
settings, reward, RL steps), how it scored at the end of its run, and how to load it, as TRL writes one with every
trained model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lit_rlhf.rewards.weighted_sum import reward_name


def base_model(module: Any) -> str:
    return str(module.hparams.get("model", {}).get("name_or_path", "?"))


def reward_description(module: Any) -> str:
    """The reward as the run configured it (train.py's config), else the reward object's name."""
    config = (getattr(module, "run_config", None) or {}).get("reward")
    if isinstance(config, dict):
        parts = config.get("rewards") if isinstance(config.get("rewards"), dict) else {"": config}
        named = [f"{name + ': ' if name else ''}{part.get('_target_', '?')}" for name, part in parts.items()
                 if isinstance(part, dict)]
        if named:
            return ", ".join(named)
    return reward_name(module.reward) if getattr(module, "reward", None) is not None else "none"


def model_card(module: Any, folder: Path, adapter_only: bool = False, metrics: dict[str, float] | None = None) -> str:
    """README.md for the policy of `module` exported to `folder`; metrics: the end-of-run figures (eval/*, the
    evaluation's), when the export follows a run."""
    from lit_rlhf import __version__

    base, algorithm = base_model(module), type(module).__name__
    hub_name = not Path(base).exists()
    settings = {key: value for key, value in dict(module.hparams).items() if key != "model"}
    lines = ["---", "library_name: " + ("peft" if adapter_only else "transformers"),
             *([f"base_model: {base}"] if hub_name else []),
             f"tags: [lit_rlhf, {algorithm.removesuffix('Module').lower()}]", "---", "",
             f"# {folder.name}", "",
             f"{'A LoRA adapter' if adapter_only else 'A causal LM'} trained with lit_rlhf {__version__}: "
             f"{algorithm} for {getattr(module, 'rl_step', '?')} RL steps ({getattr(module, 'episode', '?')} "
             f"episodes) from `{base}`, on the reward {reward_description(module)}.", "",
             "## Settings", "", "```json", json.dumps(settings, indent=1, sort_keys=True, default=str), "```", ""]
    shown = {k: v for k, v in (metrics or {}).items() if k.startswith(("eval/", "evaluation/"))}
    if shown:
        lines += ["## End-of-run evaluation", "", "| metric | value |", "|---|---|",
                  *[f"| {key} | {value:.4g} |" for key, value in sorted(shown.items())], ""]
    load = (f'from peft import AutoPeftModelForCausalLM\n\nmodel = AutoPeftModelForCausalLM.from_pretrained("{folder}")'
            if adapter_only else
            f'from transformers import AutoModelForCausalLM, AutoTokenizer\n\n'
            f'model = AutoModelForCausalLM.from_pretrained("{folder}")\n'
            f'tokenizer = AutoTokenizer.from_pretrained("{folder}")')
    lines += ["## Use", "", "```python", load, "```", "",
              "With lit_rlhf: `python evaluate.py policy_path=<this folder> model.name_or_path=<the base model>` "
              "compares it with the model it started from; `python train.py model.name_or_path=<this folder>` "
              "trains on from it.", ""]
    return "\n".join(lines)
