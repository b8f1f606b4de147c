"""The Hydra application behind evaluate.py: load a trained policy and compare it with its reference."""

from __future__ import annotations

from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lit_rlhf.cli.noise import silence_known_noise
from lit_rlhf.errors import ConfigError
from lit_rlhf.evaluation import Evaluation, compare_with_reference, print_report, write_report
from lit_rlhf.export import load_from_checkpoint


def load_module(cfg: DictConfig):
    """The RLHF module to evaluate: from a checkpoint, from an exported directory, or untrained."""
    reward = instantiate(cfg.reward)
    if cfg.get("ckpt_path") and cfg.get("policy_path"):
        raise ConfigError("give ckpt_path or policy_path, not both.")
    if cfg.get("ckpt_path"):
        module = load_from_checkpoint(cfg.ckpt_path, reward=reward, rollout_engine=instantiate(cfg.rollout),
                                      trust_remote_code=bool(cfg.get("trust_remote_code")))
        module.task_metrics = [instantiate(spec) for spec in (cfg.get("task_metrics") or {}).values()]
        return module
    model = OmegaConf.to_container(cfg.model, resolve=True)
    if cfg.get("policy_path"):
        if (Path(cfg.policy_path) / "adapter_config.json").exists():
            raise ConfigError(f"policy_path={cfg.policy_path!r} holds a peft adapter; export the merged model "
                              f"(python -m lit_rlhf.export CKPT OUT) or pass ckpt_path=CKPT.")
        # the exported policy, against the model it started from
        model.update(name_or_path=cfg.policy_path, reference_name_or_path=model["name_or_path"], lora=None,
                     adapter_path=None)
    module = instantiate(cfg.algo, model=model, reward=reward, optimizer=None, _convert_="all")
    module.configure_model()
    return module


def resolve_device(device: str) -> torch.device:
    return torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)


def evaluate(cfg: DictConfig) -> Evaluation:
    silence_known_noise()
    torch.manual_seed(cfg.seed)
    module = load_module(cfg).to(resolve_device(cfg.device)).eval()
    datamodule = instantiate(cfg.data, tokenizer=module.hparams.model["name_or_path"])  # the policy's tokenizer
    datamodule.setup("validate")
    evaluation = compare_with_reference(module, datamodule.val_dataloader(), cfg.samples_per_prompt, cfg.seed,
                                        instantiate(cfg.judge), cfg.confidence, cfg.num_bootstraps)
    print_report(evaluation)
    out = write_report(evaluation, cfg.paths.output_dir)
    print(f"\nWrote {out}/evaluation.json, generations.jsonl, scores.png")
    return evaluation
