"""The Hydra application behind evaluate.py: load a trained policy and compare it with its reference."""

from __future__ import annotations

from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from transformers import AutoConfig

from lit_rlhf.checkpoints.loading import load_checkpoint_file, require_rl_checkpoint
from lit_rlhf.cli.evaluation_checks import check_evaluation, check_evaluation_device
from lit_rlhf.cli.run_dirs import discard_unused_run_dir
from lit_rlhf.cli.trained_settings import TrainedSettings, trained_settings
from lit_rlhf.data import PromptDataModule
from lit_rlhf.envs import as_env_spec
from lit_rlhf.errors import ConfigError
from lit_rlhf.evaluation import Evaluation, compare_with_reference, print_report, write_report
from lit_rlhf.export import load_from_checkpoint
from lit_rlhf.interrupts import StoppedBySignal, set_up_stops_on_signals
from lit_rlhf.models.loading import from_pretrained
from lit_rlhf.noise import silence_known_noise
from lit_rlhf.rewards import load_reward


def load_module(cfg: DictConfig):
    """The RLHF module to evaluate and the settings it was trained with: from a checkpoint, from an exported
    directory, or untrained."""
    if cfg.get("ckpt_path"):
        checkpoint = load_checkpoint_file(cfg.ckpt_path)
        require_rl_checkpoint(checkpoint, cfg.ckpt_path)
        trained = trained_settings(cfg, checkpoint)
        module = load_from_checkpoint(cfg.ckpt_path, reward=instantiate(trained.reward),
                                      rollout_engine=instantiate(cfg.rollout),
                                      trust_remote_code=bool(cfg.get("trust_remote_code")), checkpoint=checkpoint,
                                      settings=trained.algo_overrides)
        module.use_run_task([instantiate(spec) for spec in (trained.task_metrics or {}).values()],
                            as_env_spec(instantiate(trained.env) if trained.env else None))
        return module, trained
    trained = TrainedSettings(cfg.reward, cfg.get("task_metrics"), cfg.get("env"), None, {}, cfg.get("gold"))
    model = OmegaConf.to_container(cfg.model, resolve=True)
    if cfg.get("policy_path"):
        if (Path(cfg.policy_path) / "adapter_config.json").exists():
            raise ConfigError(f"policy_path={cfg.policy_path!r} holds a peft adapter; export the merged model "
                              f"(python -m lit_rlhf.export CKPT OUT) or pass ckpt_path=CKPT.")
        # its config first: a policy_path that is not there is named as typed, not as the model.name_or_path it fills
        from_pretrained(AutoConfig.from_pretrained, cfg.policy_path, "model", key="policy_path", weights=False,
                        trust_remote_code=bool(model.get("trust_remote_code")))
        # the exported policy, against the model it started from
        model.update(name_or_path=cfg.policy_path, reference_name_or_path=model["name_or_path"], lora=None,
                     adapter_path=None)
    module = instantiate(cfg.algo, model=model, reward=instantiate(cfg.reward), optimizer=None, _convert_="all")
    module.configure_model()
    return module, trained


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(str(device))
    except RuntimeError as err:
        raise ConfigError(f"device={device!r} is not a device; use auto, cpu or cuda.") from err
    check_evaluation_device(str(device))
    return resolved


def evaluate_until_stopped(cfg: DictConfig) -> Evaluation:
    """evaluate.py's task: evaluate(cfg), whose loading, sampling and scoring (minutes) Ctrl-C or SIGTERM stops in one
    line (StoppedBySignal; Ctrl-C printed a traceback, SIGTERM ended the process by its default action), its run
    directory removed (it holds nothing yet)."""
    try:
        with set_up_stops_on_signals(StoppedBySignal):
            evaluation = compare_as_configured(cfg)
    except StoppedBySignal:
        discard_unused_run_dir(cfg)
        raise
    report_evaluation(evaluation, cfg)
    return evaluation


def evaluate(cfg: DictConfig) -> Evaluation:
    """The trained policy compared with its reference as cfg says, printed and written to the run directory."""
    evaluation = compare_as_configured(cfg)
    report_evaluation(evaluation, cfg)
    return evaluation


def report_evaluation(evaluation: Evaluation, cfg: DictConfig) -> None:
    print_report(evaluation)
    out = write_report(evaluation, cfg.paths.output_dir)
    print(f"\nWrote {out}/evaluation.json, generations.jsonl, scores.png")


def compare_as_configured(cfg: DictConfig) -> Evaluation:
    silence_known_noise()
    check_evaluation(cfg)  # evaluate.py checked them before its imports; a caller from Python has not
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    judge = instantiate(cfg.judge)  # its settings checked before the model loads
    module, trained = load_module(cfg)
    if trained.gold:  # scored on both sides beside the reward (summary["gold"])
        module.sampler.use_gold(instantiate(trained.gold))
        load_reward(module.sampler.gold)
    module = module.to(device).eval()
    policy_tokenizer = module.hparams.model["name_or_path"]
    if trained.data is not None:  # the run's own prompts and held-out split
        datamodule = PromptDataModule(**{**trained.data, "tokenizer": policy_tokenizer})
    else:
        datamodule = instantiate(cfg.data, tokenizer=policy_tokenizer)
    datamodule.setup("validate")
    if getattr(datamodule, "rows", None):  # the columns the reward, gold and task metrics read, as a fit checks them
        module.sampler.check_rows(datamodule.rows, datamodule.hparams.dataset, module.task_metrics)
    return compare_with_reference(module, datamodule.val_dataloader(), cfg.samples_per_prompt, cfg.seed,
                                  judge, cfg.confidence, cfg.num_bootstraps)
