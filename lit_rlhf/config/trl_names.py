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
    "gradient_accumulation_steps": ("algo.gradient_accumulation_steps",),
    "steps_per_generation": "algo.num_mini_batches x algo.gradient_accumulation_steps (the parts each rollout is "
                            "trained in)",
    "generation_batch_size": "data.batch_size x the samples per prompt (the sequences of each rollout)",
    "log_completions": "callbacks.generation_samples (on: samples.jsonl and the held-out table)",
    "reward_funcs": "reward._target_=[module.function,...] (or reward=reward_model reward.name_or_path=<folder>)",
    "reward_weights": "+reward.weights.<name>=<weight>",
    "cast_lm_head_to_fp32": ("model.cast_lm_head_to_fp32",), "attn_implementation": ("model.attn_implementation",),
    "trust_remote_code": "model.trust_remote_code=true (and data.trust_remote_code=true for the tokenizer's code)",
    "ds3_gather_for_generation": "trainer=fsdp2 trainer.strategy.sharded_sampling (gathered weights for sampling: "
                                 "false, the default; sampling on the sharded model: true)",
    "max_length": ("data.max_length",),  # DPOConfig's (prompt + response tokens)
    # PPOConfig's
    "sft_model_path": ("model.name_or_path",), "reward_model_path": "reward=reward_model reward.name_or_path=<folder>",
    "total_episodes": "steps (RL steps of data.batch_size prompts each)",
    "local_rollout_forward_batch_size": ("algo.forward_batch_size",),
    "stop_token_id": "algo.stop_token=<the token as the tokenizer spells it> (or eos)",
    "num_sample_generations": "callbacks.generation_samples (samples.jsonl and the held-out table)",
    # SFT (train_sft.py): how its rows are trained on
    "max_seq_length": ("data.max_length",), "completion_only_loss": "always on",
    "assistant_only_loss": "always on", "dataset_text_field": "fixed to text",
    # GRPOConfig's generation and vLLM settings
    **{name: f"+algo.generation_kwargs.{name}=<value> algo.allow_biased_sampling=true"
       for name in ("top_p", "top_k", "min_p", "repetition_penalty")},
    "vllm_mode": "rollout=vllm (colocate: in the trainer's process) or rollout=vllm_server (server: vllm serve on "
                 "machines of its own)",
    "vllm_gpu_memory_utilization": "rollout=vllm rollout.gpu_memory_utilization=<fraction>",
    "vllm_max_model_length": "rollout=vllm rollout.max_model_len=<tokens>",
    "vllm_enable_sleep_mode": "rollout=vllm rollout.sleep=true",
    "vllm_model_impl": "rollout=vllm +rollout.engine_kwargs.model_impl=<impl>",
    **{name: "rollout=vllm_server rollout.urls=[http://<host>:<port>,...]"
       for name in ("vllm_server_base_url", "vllm_server_host", "vllm_server_port")},
    "vllm_server_timeout": "rollout=vllm_server rollout.retries and rollout.backoff_s (a server not up yet is "
                           "waited for backoff_s x (2^retries - 1) s)",
    "vllm_tensor_parallel_size": "a flag of the servers rollout=vllm_server samples on (vllm serve "
                                 "--tensor-parallel-size <n>)",
    "vllm_importance_sampling_correction": "algo.rollout_is_cap (null: off)",
    "vllm_importance_sampling_mode": ("algo.rollout_is_mode",),
    "vllm_importance_sampling_cap": ("algo.rollout_is_cap",),
    "vllm_importance_sampling_clip_max": ("algo.rollout_is_cap",),
    "vllm_importance_sampling_clip_min": ("algo.rollout_is_min",),
    # GRPOConfig's data, evaluation and logging settings
    "num_generations_eval": "one sample per held-out prompt (data.num_eval_prompts of them)",
    "max_tool_calling_iterations": "env.max_turns (model turns per episode, with env=calculator or an environment "
                                   "of your own)",
    "shuffle_dataset": "always on (each epoch's order drawn from data.seed; a resume continues it)",
    "remove_unused_columns": "always off (a row's other columns reach the reward functions by name)",
    "model_init_kwargs": "model.dtype, model.trust_remote_code and the other model.* settings",
    "cache_implementation": "rollout.compile_mode and rollout.static_cache_length (rollout=hf decodes with a "
                            "static cache)",
    **{name: "rollout=hf (the default: transformers' generate(), compiled) or rollout=vllm" for name in (
        "use_transformers_paged", "use_transformers_continuous_batching", "transformers_continuous_batching_config")},
    **{name: "callbacks.generation_samples (samples.jsonl and the held-out table)"
       for name in ("num_completions_to_print", "log_unique_prompts")},
    "entropy_coef": ("algo.entropy_coef",),
    # RLOOConfig's and GKD's / DistillationConfig's
    "normalize_advantages": ("algo.normalize_advantage",),
    "teacher_model_name_or_path": ("teacher.name_or_path",), "max_new_tokens": ("algo.response_length",),
    "teacher_model_init_kwargs": "teacher.dtype, teacher.trust_remote_code and teacher.adapter_path",
    "log_completions_steps": "callbacks.generation_samples.every_n_steps=<steps>",
}
# TRL settings with no equivalent here, and why (said where a key above would be).
NOT_HERE = {
    **{name: "train.py's algorithms, train_dpo.py and train_kto.py have it (algo.sync_ref_model); this app trains "
             "against no reference"
       for name in ("sync_ref_model", "ref_model_mixup_alpha", "ref_model_sync_steps")},
    # DPOConfig's
    "label_smoothing": "train_dpo.py has it (algo.label_smoothing, read by its robust, exo_pair and aot loss types)",
    **{name: f"train_dpo.py has it (algo.{name})" for name in ("loss_weights", "f_divergence_type",
                                                                "f_alpha_divergence_coef", "discopop_tau",
                                                                "ld_alpha", "precompute_ref_log_probs",
                                                                "precompute_ref_batch_size", "use_weighting")},
    # KTOConfig's
    **{name: f"train_kto.py has it (algo.{name})" for name in ("desirable_weight", "undesirable_weight")},
    "truncation_mode": "a prompt longer than data.max_prompt_length keeps its last tokens and the response its "
                       "first, within data.max_length",
    "activation_offloading": "model.gradient_checkpointing=true trades compute for activation memory instead",
    "dataset_num_proc": "rows are tokenized once, in the main process",
    "pad_token": "the tokenizer's own pad token; where it has none (or it is EOS), a padding token already in its "
                 "vocabulary, else one added (the embeddings resized)",
    "entropy_coef": "algo=grpo and algo=ppo have algo.entropy_coef; the other algorithms add no entropy term",
    **{name: "algo=grpo has it (adaptive entropy control); the other algorithms' entropy_coef (algo=ppo's) stays as "
             "set" for name in ("use_adaptive_entropy", "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta",
                                "entropy_target")},
    "multi_objective_aggregation": "algo=grpo has it; the other algorithms train on the rewards' weighted sum "
                                   "(TRL's sum_then_normalize)",
    **{name: "train.py's algorithms have it (algo.policy_loss=vespo)"
       for name in ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")},
    "vllm_group_port": "rollout=vllm_server sends the weights through the servers' HTTP API (shared memory or "
                       "rollout.weights_dir), with no NCCL group or port",
    "vllm_structured_outputs_regex": "rollouts are not constrained (a constraint would bias the sampled distribution)",
    "disable_dropout": "sampling and the old logprobs run without dropout, the update with the model's own",
    "pad_to_multiple_of": "the forwards pack sequences without padding (algo.padding_free)",
    **{name: "train_sft.py's algo.padding_free=true packs each batch's rows into its forwards (no padding computed); "
             "a batch stays data.batch_size rows, not blocks of data.max_length tokens"
       for name in ("packing", "packing_strategy", "eval_packing")},
    "chat_template_kwargs": "data.apply_chat_template=true applies the tokenizer's template with its defaults",
    "chat_template_path": "chat messages are rendered with the tokenizer's own template: save a tokenizer with the "
                          "template you want (tokenizer.chat_template, save_pretrained) and point data.tokenizer (or "
                          "model.tokenizer_name_or_path) at that folder",
    "eos_token": "the tokenizer's own EOS ends each completion and text row: save a tokenizer with another eos_token "
                 "to change it",
    "dataset_kwargs": "the data module tokenizes the rows; rows of token ids (input_ids, with completion_mask) are "
                      "taken as they are, which is what skip_prepare_dataset is for",
    "lr_scheduler_kwargs": "algo.lr_scheduler={...} takes the scheduler with its arguments",
    "use_liger_kernel": "the logprobs come from the last hidden states in chunks (algo.logits_chunk_size), never "
                        "holding the whole logits, the memory Liger's fused kernels save",
    "torch_empty_cache_steps": "the CUDA allocator's cache is left to PyTorch",
    "log_completions_hub_repo": "completions are written to the run directory (samples.jsonl), never pushed",
    "log_multimodal": "text models only",
    "reward_clip_range": "scores are not clipped as they are (score_transforms=reward_normalizer's "
                         "reward_clip_range=c clips the normalized scores to [-c, c])",
    "mask_truncated_completions": "algo=grpo and algo=rloo have it; the other algorithms train on every "
                                  "response's tokens",
    "lmbda": "algo=distill samples every sequence from the student (GKD's lmbda = 1)",
    "teacher_model_revision": "a Hub name is read at the revision the local cache holds (download the revision "
                              "you want, or give teacher.name_or_path a local folder)",
    "vllm_sync_frequency": "the trained weights reach the rollout engine after every RL step (algo.max_staleness "
                           "bounds how old the weights a rollout samples with may be)",
    "seq_kd": "algo=distill never trains on the teacher's own samples",
    "teacher_model_name_or_path": "in this run: a teacher is algo=distill's (algo=distill teacher.name_or_path=...)",
}
# Where no key of ON_THE_COMMAND_LINE is in the app's config: what sets it there.
OTHERWISE = {"gradient_accumulation_steps": "+trainer.accumulate_grad_batches=<N>"}  # the pair apps: Lightning's
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
    **{name: f"generation_kwargs={{'{name}': ...}} with allow_biased_sampling=True" for name in (
        "top_p", "top_k", "min_p", "repetition_penalty")},
    "vllm_gpu_memory_utilization": "rollout_engine=VLLMEngine(gpu_memory_utilization=...)",
    "vllm_max_model_length": "rollout_engine=VLLMEngine(max_model_len=...)",
    "vllm_enable_sleep_mode": "rollout_engine=VLLMEngine(sleep=True)",
    "vllm_server_base_url": "rollout_engine=VLLMServerEngine(urls=[...])",
    "vllm_importance_sampling_correction": "rollout_is_cap=... (None: off)",
    "vllm_importance_sampling_mode": "rollout_is_mode=...", "vllm_importance_sampling_cap": "rollout_is_cap=...",
    "vllm_importance_sampling_clip_max": "rollout_is_cap=...",
    "vllm_importance_sampling_clip_min": "rollout_is_min=...",
}
PYTHON_NOTES = {"per_device_train_batch_size": ": the prompts of a step over all ranks",
                "num_train_epochs": ": RL steps", "max_steps": ": RL steps"}


def command_line_hint(name: str, cfg: DictConfig | None) -> str:
    """' (TRL's <name> is <key> here)' for a TRL setting this app sets under another key or as a choice, else ''.
    A name some algorithms have (NOT_HERE says which) is pointed to as algo.<name> where the composed algo has it."""
    where = ON_THE_COMMAND_LINE.get(name) or ((f"algo.{name}",) if name in NOT_HERE else None)
    if cfg is None or (where is None and name not in NOT_HERE):
        return ""
    if isinstance(where, str):
        return f" (TRL's {name} is {where} here)"
    found = next((key for key in where or () if has_key(cfg, key)), None)
    if found:
        return f" (TRL's {name} is {found} here{NOTES.get(found, '')})"
    return f" (TRL's {name} is {OTHERWISE[name]} here)" if name in OTHERWISE else not_here(name)


def has_key(cfg: DictConfig, key: str) -> bool:
    """Whether the config has this dotted key, a required value (???) included."""
    parent, _, name = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    return isinstance(node, DictConfig) and name in node.keys()  # `in node` is False for a ??? value


def not_here(name: str) -> str:
    return f" (TRL's {name} has no equivalent here: {NOT_HERE[name]})" if name in NOT_HERE else ""


def python_hint(name: str) -> str:
    """' (TRL's <name> is <argument> here)' for a TRL setting given to a module's or PromptDataModule's constructor."""
    return f" (TRL's {name} is {IN_PYTHON[name]} here{PYTHON_NOTES.get(name, '')})" if name in IN_PYTHON \
        else not_here(name)
