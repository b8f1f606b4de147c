"""TRL's setting names (TrainingArguments, GRPOConfig, RLOOConfig, ...) for what lit_rlhf sets under another name or
elsewhere: where each is set on the command line and in Python, for the one-line error of an unknown key."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

# On the command line: the keys that take the value (the first one the app's config has), or what to type where it
# is a choice rather than a key.
ON_THE_COMMAND_LINE = {
    "learning_rate": ("algo.optimizer.lr",), "max_completion_length": ("algo.response_length",),
    "max_prompt_length": ("data.max_prompt_length",), "per_device_train_batch_size": ("data.batch_size",),
    "num_train_epochs": ("epochs", "steps"), "max_steps": ("steps",), "epsilon": ("algo.cliprange",),
    "epsilon_low": ("algo.cliprange_low",), "epsilon_high": ("algo.cliprange_high",),
    "logging_steps": ("trainer.log_every_n_steps",), "gradient_checkpointing": ("model.gradient_checkpointing",),
    "output_dir": "hydra.run.dir=<folder>", "report_to": "logger=wandb (or tensorboard, csv, many)",
    "use_vllm": "rollout=vllm", "bf16": "model.dtype=bfloat16", "lr_scheduler_type": "algo.lr_scheduler={...}",
    "warmup_steps": "algo.lr_scheduler={...}", "warmup_ratio": "algo.lr_scheduler={...}",
    "eval_steps": ("trainer.val_check_interval",), "save_steps": ("callbacks.model_checkpoint.every_n_train_steps",),
    "save_total_limit": "callbacks.model_checkpoint.save_top_k=<N> +callbacks.model_checkpoint.monitor=step "
                        "+callbacks.model_checkpoint.mode=max (the newest N)",
    "per_device_eval_batch_size": ("data.eval_batch_size",), "num_iterations": ("algo.num_iterations",
                                                                                 "algo.num_ppo_epochs"),
    "optim": "algo.optimizer._target_=torch.optim.<class>", "adam_beta1": "+algo.optimizer.betas=[<beta1>,<beta2>]",
    "adam_beta2": "+algo.optimizer.betas=[<beta1>,<beta2>]", "adam_epsilon": "+algo.optimizer.eps=<epsilon>",
    "steps_per_generation": "algo.num_mini_batches x algo.gradient_accumulation_steps (the parts each rollout is "
                            "trained in)",
    "generation_batch_size": "data.batch_size x the samples per prompt (the sequences of each rollout)",
    "log_completions": "callbacks.generation_samples (on: samples.jsonl and the held-out table)",
    "reward_funcs": "reward._target_=[module.function,...] (or reward=reward_model reward.name_or_path=<folder>)",
    "reward_weights": "+reward.weights.<name>=<weight>",
    # SFT (train_sft.py): how its rows are trained on
    "max_seq_length": ("data.max_length",), "completion_only_loss": "always on",
    "assistant_only_loss": "always on", "dataset_text_field": "fixed to text",
}
NOTES = {"data.batch_size": ": the prompts (or rows) of a step over all ranks", "steps": ": RL steps",
         "trainer.val_check_interval": ": RL steps between held-out evaluations",
         "callbacks.model_checkpoint.every_n_train_steps": ": RL steps between checkpoints"}

# In Python: the argument of an RL module (RLOOModule(...), ...), of PromptDataModule or of Lightning's Trainer.
SCHEDULER = "lr_scheduler=<a function: optimizer -> LR scheduler>, e.g. functools.partial(LinearLR, ...)"
IN_PYTHON = {
    "learning_rate": "optimizer=functools.partial(torch.optim.AdamW, lr=...)",
    "max_completion_length": "response_length=...", "max_prompt_length": "PromptDataModule(max_prompt_length=...)",
    "per_device_train_batch_size": "PromptDataModule(batch_size=...)", "num_train_epochs": "rl_steps=...",
    "max_steps": "rl_steps=...",
    "epsilon": "cliprange=...", "epsilon_low": "cliprange_low=...", "epsilon_high": "cliprange_high=...",
    "logging_steps": "Trainer(log_every_n_steps=...)",
    "gradient_checkpointing": "model={..., 'gradient_checkpointing': True}",
    "output_dir": "Trainer(default_root_dir=...)", "report_to": "Trainer(logger=WandbLogger(...))",
    "use_vllm": "rollout_engine=VLLMEngine(...)", "bf16": "model={..., 'dtype': 'bfloat16'}",
    "lr_scheduler_type": SCHEDULER, "warmup_steps": SCHEDULER, "warmup_ratio": SCHEDULER,
    "save_total_limit": "Trainer(callbacks=[ModelCheckpoint(save_top_k=N, monitor='step', mode='max', ...)]) (the "
                        "newest N)",
}
PYTHON_NOTES = {"per_device_train_batch_size": ": the prompts of a step over all ranks",
                "num_train_epochs": ": RL steps", "max_steps": ": RL steps"}


def command_line_hint(name: str, cfg: DictConfig | None) -> str:
    """' (TRL's <name> is <key> here)' for a TRL setting this app sets under another key or as a choice, else ''."""
    where = ON_THE_COMMAND_LINE.get(name)
    if where is None or cfg is None:
        return ""
    if isinstance(where, str):
        return f" (TRL's {name} is {where} here)"
    found = next((key for key in where if OmegaConf.select(cfg, key, default="absent") != "absent"), None)
    return f" (TRL's {name} is {found} here{NOTES.get(found, '')})" if found else ""


def python_hint(name: str) -> str:
    """' (TRL's <name> is <argument> here)' for a TRL setting given to a module's or PromptDataModule's constructor."""
    return f" (TRL's {name} is {IN_PYTHON[name]} here{PYTHON_NOTES.get(name, '')})" if name in IN_PYTHON else ""
