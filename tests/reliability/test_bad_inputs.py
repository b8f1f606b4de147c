"""Bad inputs, typed as a user types them, end with one line `error: ...` and exit code 2, before any
training work. docs/reliability.md keeps the table of these cases (checked below)."""

import importlib.util
import json
import os
import random
import shutil
from pathlib import Path

import pytest
import torch

from tests.apps import run_app, run_process
from tests.helpers import FAST, ROOT, matches, one_line_error

TINY = ROOT / "lit_rlhf" / "assets" / "tiny-pythia"
# teacher=routed with one teacher, for the rows whose data_source is "films"
ROUTED_TO_FILMS = ("teacher.teachers={films: {_target_: lit_rlhf.teachers.CausalLMTeacher, name_or_path: "
                   f"'{TINY}'}}}}")
FSDP2_ONE_RANK = ["trainer=fsdp2", "trainer.accelerator=cpu", "trainer.devices=1"]


class Payload:
    """A pickle that runs a command when unpickled without weights_only."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def write_pickled_model_and_adapter(directory: Path) -> None:
    import torch

    model = directory / "pickled_model"
    shutil.copytree(TINY, model)
    (model / "model.safetensors").unlink()
    torch.save({"x": Payload(directory / "PWNED")}, model / "pytorch_model.bin")
    adapter = directory / "pickled_adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 8, "lora_alpha": 16, "target_modules": ["query_key_value"],
        "base_model_name_or_path": str(TINY)}))
    torch.save({"x": Payload(directory / "PWNED")}, adapter / "adapter_model.bin")


def write_models_pointing_outside_or_broken(directory: Path) -> None:
    """Model folders whose weight index names a file outside them (by `..` and by an absolute path), whose index is
    not JSON, and whose safetensors file is cut short."""
    from safetensors import safe_open

    with safe_open(TINY / "model.safetensors", framework="pt") as f:
        names = list(f.keys())
    shutil.copy(TINY / "model.safetensors", directory / "elsewhere.safetensors")
    for folder, target in (("index_up", "../elsewhere.safetensors"),
                           ("index_absolute", str(directory / "elsewhere.safetensors")), ("index_not_json", None),
                           ("truncated_weights", None)):
        model = directory / folder
        model.mkdir()
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            shutil.copy(TINY / name, model / name)
        index = model / "model.safetensors.index.json"
        if target is not None:
            index.write_text(json.dumps({"metadata": {}, "weight_map": {name: target for name in names}}))
        elif folder == "index_not_json":
            shutil.copy(TINY / "model.safetensors", model / "model-00001-of-00001.safetensors")
            index.write_text('{"weight_map": {"gpt_neox.embed_in.weight": "model-00001-of-00001.safetensors"')
        else:
            data = (TINY / "model.safetensors").read_bytes()
            (model / "model.safetensors").write_bytes(data[: len(data) // 2])


# config values no model or tokenizer is built from: transformers raises errors of other kinds for each (a strict
# dataclass's validation error, KeyError, ZeroDivisionError, RuntimeError, TypeError, AttributeError), which were
# tracebacks
MALFORMED_CONFIGS = {"folder_hidden_size_text": ("config.json", {"hidden_size": "big"}),
                     "folder_unknown_activation": ("config.json", {"hidden_act": "\x1b]0;pwned\x07gelu"}),
                     "folder_no_heads": ("config.json", {"num_attention_heads": 0}),
                     "folder_negative_vocab": ("config.json", {"vocab_size": -1}),
                     "folder_max_length_text": ("tokenizer_config.json", {"model_max_length": "big"}),
                     "folder_added_tokens_number": ("tokenizer_config.json", {"added_tokens_decoder": 7})}


def write_incomplete_model_folders(directory: Path) -> None:
    """A model folder that is empty, one whose config.json is not JSON, one without weights, and MALFORMED_CONFIGS."""
    (directory / "folder_empty").mkdir()
    for folder in ("folder_config_not_json", "folder_without_weights", *MALFORMED_CONFIGS):
        shutil.copytree(TINY, directory / folder)
    (directory / "folder_config_not_json" / "config.json").write_text("{not json")
    (directory / "folder_without_weights" / "model.safetensors").unlink()
    for folder, (name, values) in MALFORMED_CONFIGS.items():
        config = json.loads((TINY / name).read_text())
        (directory / folder / name).write_text(json.dumps({**config, **values}))


def write_inputs(directory: Path) -> None:
    write_pickled_model_and_adapter(directory)
    write_models_pointing_outside_or_broken(directory)
    write_incomplete_model_folders(directory)
    (directory / "bad_line.jsonl").write_text('{"prompt": "a b"}\n{"prompt": "c\n')
    (directory / "empty.jsonl").write_text("")
    (directory / "not_utf8.jsonl").write_bytes(b'\xff\xfe{"prompt": "x"}\n')
    (directory / "all_empty.jsonl").write_text('{"prompt": ""}\n{"prompt": " "}\n')
    (directory / "null_prompt.jsonl").write_text('{"prompt": "fine"}\n{"prompt": null}\n')
    (directory / "prompts.txt").write_text("a prompt\n")
    (directory / "a_dir").mkdir()
    (directory / "a_run" / "checkpoints").mkdir(parents=True)  # a run directory, as train.py leaves it
    (directory / "a_run" / "checkpoints" / "last.ckpt").write_bytes(b"")
    (directory / "a_file").write_text("x")
    (directory / "random.ckpt").write_bytes(random.Random(0).randbytes(2048))
    (directory / "empty.ckpt").write_bytes(b"")
    (directory / "sharded.ckpt").mkdir()  # what trainer=fsdp2 on 2 ranks writes, as far as the checks read
    torch.save({"world_size": 2}, directory / "sharded.ckpt" / "meta.pt")
    model = directory / "model_without_tokenizer"
    model.mkdir()
    for name in ("config.json", "model.safetensors"):
        (model / name).write_bytes((ROOT / "lit_rlhf" / "assets" / "tiny-pythia" / name).read_bytes())
    (directory / "some_without_answer.jsonl").write_text("".join(
        json.dumps({"prompt": f"What is {i}+1?", **({"answer": i + 1} if i != 3 else {})}) + "\n" for i in range(24)))
    (directory / "prompts_column.jsonl").write_text("".join(
        json.dumps({"prompt": f"The film number {i} was", "prompts": "x"}) + "\n" for i in range(24)))
    rows = "".join(f'"The film number {i} was",{i}\n' for i in range(24))
    (directory / "unclosed.csv").write_text('prompt,answer\n"The film",1\n"The show",2\n"The play,3\n' + rows)
    (directory / "extra_field.csv").write_text('prompt,answer\n"The film",1\nThe show,2,3\n' + rows)
    (directory / "with_blank_lines.jsonl").write_text(
        "\n".join(json.dumps({"prompt": f"The movie number {i} was"}) + "\n" for i in range(24)))
    (directory / "two_sources.jsonl").write_text("".join(  # row 7 names a teacher no run configures
        json.dumps({"prompt": f"The film number {i} was", "data_source": "poetry" if i == 6 else "films"}) + "\n"
        for i in range(24)))


# (what the user did, train.py arguments, the start of what the error line must say after "error: ")
CASES = [
    ("a weight index naming a file through ..", ["model=causal_lm", "model.name_or_path=index_up"],
     "model.name_or_path='index_up': its model.safetensors.index.json names '../elsewhere.safetensors', outside the "
     "model's folder"),
    ("a weight index naming an absolute path", ["model=causal_lm", "model.name_or_path=index_absolute"],
     "model.name_or_path='index_absolute': its model.safetensors.index.json names '/"),
    ("a weight index naming an absolute path, sharded loading",
     [*FSDP2_ONE_RANK, "model=causal_lm", "model.name_or_path=index_absolute"],
     "model.name_or_path='index_absolute': its model.safetensors.index.json names '/"),
    ("a weight index that is not JSON", ["model=causal_lm", "model.name_or_path=index_not_json"],
     "model.name_or_path='index_not_json': its model.safetensors.index.json is not a weight index"),
    ("a truncated safetensors file", ["model=causal_lm", "model.name_or_path=truncated_weights"],
     "model.name_or_path='truncated_weights' holds a safetensors file that cannot be read"),
    ("rollout.shared_prefill that is not true or false", ["rollout.shared_prefill=abc"],
     "rollout.shared_prefill='abc' must be true or false"),
    ("a static cache length that is not a number", ["rollout.static_cache_length=abc"],
     "rollout.static_cache_length='abc' must be a whole number >= 1 (or null)"),
    ("a fractional static cache length", ["rollout.static_cache_length=100.5"],
     "rollout.static_cache_length=100.5 must be a whole number >= 1 (or null)"),
    ("trainer.strategy.cpu_offload that is not true or false", [*FSDP2_ONE_RANK, "trainer.strategy.cpu_offload=abc"],
     "trainer.strategy.cpu_offload='abc' must be true or false"),
    ("a LoRA reference mixed with the policy", ["algo=grpo", "algo.sync_ref_model=true"],
     "algo.sync_ref_model=true with LoRA and algo.ref_model_mixup_alpha=0.6: a LoRA reference can only be reset to "
     "the policy (a mix of two adapters is no adapter of their rank); set algo.ref_model_mixup_alpha=1, or "
     "model.lora=null for TRL's mix of whole weights."),
    ("a reference that follows the policy with no KL term", ["algo=grpo", "model.lora=null", "algo.sync_ref_model=true",
                                                             "algo.beta=0"],
     "algo.sync_ref_model=true with algo.kl_coef=0 (beta): no KL term reads the reference, so there is nothing to "
     "move; set algo.kl_coef > 0 or algo.sync_ref_model=false."),
    ("a float32 output layer with a LoRA adapter on it",
     ["model.cast_lm_head_to_fp32=true", "model.lora.target_modules=[query_key_value,lm_head]"],
     "model.cast_lm_head_to_fp32=true with a LoRA adapter on the output layer (model.lora.target_modules names it): "
     "remove it from target_modules, or set model.cast_lm_head_to_fp32=false."),
    ("a float32 output layer under trainer=fsdp2", [*FSDP2_ONE_RANK, "model.cast_lm_head_to_fp32=true"],
     "model.cast_lm_head_to_fp32=true is not supported with trainer=fsdp2 (a sharded unit holds one dtype, and the "
     "output layer shares one with the final norm); use trainer=ddp or set model.cast_lm_head_to_fp32=false."),
    ("the trained reward, scaled, as gold", ["gold=vader", "reward.weights.vader=0.5"],
     "gold= names the trained reward (scaled: only the weights differ)"),
    ("mistyped ckpt_path", ["ckpt_path=no_such.ckpt"], "ckpt_path='no_such.ckpt' is not a file"),
    ("the run directory as ckpt_path", ["ckpt_path=a_run"], "ckpt_path='a_run' is a directory that holds checkpoints, "
     "not one; give one of them, e.g. ckpt_path=a_run/checkpoints/last.ckpt"),
    ("a directory that is no checkpoint as ckpt_path", ["ckpt_path=a_dir"],
     "ckpt_path='a_dir' is a directory without meta.pt, not a checkpoint"),
    ("a model path that is no folder", ["model=causal_lm", "model.name_or_path=/path/to/any/causal-lm"],
     "model.name_or_path='/path/to/any/causal-lm' is no folder here, and not a Hugging Face Hub name (owner/name)"),
    ("a teacher's adapter path that is no folder",
     ["experiment=two_task_distill", "teacher.teachers.calculator.adapter_path=./no_adapter"],
     "teacher.teachers.calculator.adapter_path='./no_adapter' is no folder here"),
    ("0-byte checkpoint", ["ckpt_path=empty.ckpt"], "ckpt_path='empty.ckpt' cannot be read"),
    ("random bytes as checkpoint", ["ckpt_path=random.ckpt"], "ckpt_path='random.ckpt' cannot be read"),
    ("sharded checkpoint resumed without trainer=fsdp2", ["ckpt_path=sharded.ckpt"],
     "ckpt_path='sharded.ckpt' is a sharded checkpoint (trainer=fsdp2)"),
    ("sharded checkpoint resumed on another number of ranks", [*FSDP2_ONE_RANK, "ckpt_path=sharded.ckpt"],
     "ckpt_path='sharded.ckpt' was written by 2 ranks and this run has 1"),
    ("trainer=fsdp2 with micro-batches by token count", [*FSDP2_ONE_RANK, "algo.max_tokens_per_micro_batch=64"],
     "algo.max_tokens_per_micro_batch=64 makes ranks run different numbers of micro-batches"),
    ("CPU offload without trainer=fsdp2", ["trainer.strategy.cpu_offload=true"],
     "trainer.strategy.cpu_offload=true is a setting of trainer=fsdp2"),
    ("an mmap threshold above glibc's ceiling", [*FSDP2_ONE_RANK, "trainer.strategy.host_mmap_threshold_mib=64"],
     "trainer.strategy.host_mmap_threshold_mib=64 must be a whole number of MiB from 1 to 32"),
    ("an mmap threshold without trainer=fsdp2", ["trainer.strategy.host_mmap_threshold_mib=1"],
     "trainer.strategy.host_mmap_threshold_mib=1 is a setting of trainer=fsdp2"),
    ("sharded sampling with rollout=vllm", [*FSDP2_ONE_RANK, "trainer.strategy.sharded_sampling=true", "rollout=vllm"],
     "trainer.strategy.sharded_sampling=true samples through the sharded model's generate() (rollout=hf)"),
    ("sharded sampling with a multi-turn environment",
     [*FSDP2_ONE_RANK, "trainer.strategy.sharded_sampling=true", "env=calculator", "data=calculator",
      "model=tiny-calculator"], "trainer.strategy.sharded_sampling=true samples single-turn rollouts"),
    ("sharded loading of a model without safetensors", [*FSDP2_ONE_RANK, "model.name_or_path=pickled_model"],
     "model.name_or_path='pickled_model' has no safetensors weights, which sharded loading reads by slices"),
    ("ckpt_path=last without a checkpoint", ["ckpt_path=last"], "ckpt_path=last:"),
    ("a negative staleness bound", ["algo.max_staleness=-1"], "algo.max_staleness=-1 must be >= 0"),
    ("a fractional staleness bound", ["algo.max_staleness=0.5"], "algo.max_staleness='0.5' must be of type integer"),
    ("async mode with dynamic sampling's refill", ["algo=grpo", "algo.max_staleness=1",
                                                   "algo.filter_zero_std_groups=true", "algo.max_refill_rounds=2"],
     "algo.max_staleness=1 cannot refill a step with dynamic sampling"),
    ("async mode with trainer=fsdp2", [*FSDP2_ONE_RANK, "algo.max_staleness=1"],
     "algo.max_staleness=1 needs trainer=ddp or one process"),
    ("async draws below 1", ["algo.max_staleness=1", "algo.async_draws=0"],
     "algo.async_draws=0 must be >= 1"),
    ("env.max_concurrency below 1", ["env=calculator", "env.max_concurrency=0"],
     "env.max_concurrency=0 must be a whole number >= 1"),
    ("malformed JSONL line", ["data=files", "data.dataset=bad_line.jsonl"], "data.dataset='bad_line.jsonl', line 2"),
    ("empty prompt file", ["data=files", "data.dataset=empty.jsonl"], "data.dataset='empty.jsonl' holds no rows"),
    ("a split of one prompt file", ["data=files", "data.dataset=prompts_column.jsonl", "data.split=test"],
     "data.split='test' picks a split of a hub dataset or a dataset folder, and data.dataset='prompts_column.jsonl' is "
     "one file, read whole; leave data.split out (train), or give a folder of a file per split"),
    ("non-UTF-8 prompt file", ["data=files", "data.dataset=not_utf8.jsonl"], "data.dataset='not_utf8.jsonl' is not"),
    ("a folder without data files as dataset", ["data=files", "data.dataset=a_dir"],
     "data.dataset='a_dir' cannot be read as a dataset folder (EmptyDatasetError"),
    ("a dataset path that does not exist", ["data=files", "data.dataset=./no_such_folder"],
     "data.dataset='./no_such_folder': no such file or folder"),
    ("all prompts empty", ["data=files", "data.dataset=all_empty.jsonl"], "data.dataset='all_empty.jsonl': every"),
    ("a null prompt", ["data=files", "data.dataset=null_prompt.jsonl"], "data.dataset='null_prompt.jsonl', row 2"),
    ("a .txt prompt file", ["data=files", "data.dataset=prompts.txt"], "data.dataset='prompts.txt': .txt files"),
    ("data=files without data.dataset", ["data=files"], "data.dataset is not set"),
    ("negative learning rate", ["algo.optimizer.lr=-1"], "algo.optimizer.lr=-1 must be a number > 0"),
    ("LoRA rank 0", ["model.lora.r=0"], "model.lora.r=0 must be a whole number >= 1"),
    ("a callback switched off with false", ["callbacks.curves=false"],
     "callbacks.curves=false is not a callback's config; null switches it off: callbacks.curves=null"),
    ("LoRA switched off with false", ["model.lora=false"],
     "model.lora=false: model.lora is a mapping of settings; set them one by one"),
    ("seed not a number", ["seed=abc"], "seed='abc' must be a whole number"),
    ("steps not a number", ["steps=ten"], "steps='ten' must be a whole number"),
    ("a Trainer limit that trains nothing", ["+trainer.limit_train_batches=0"],
     "trainer.limit_train_batches=0 trains no RL step; remove it (steps=N sets the run's length)"),
    ("missing_eos_penalty not a number", ["algo.missing_eos_penalty=abc"],
     "algo.missing_eos_penalty='abc' must be of type float"),
    ("negative cliprange", ["algo.cliprange=-1"], "algo.cliprange=-1.0 must be > 0"),
    ("negative max_grad_norm", ["algo.max_grad_norm=-1"], "algo.max_grad_norm=-1.0 must be > 0"),
    ("misspelled generation_kwargs key", ["+algo.generation_kwargs.top_kk=3"], "algo.generation_kwargs.top_kk is not"),
    ("chat template the tokenizer lacks", ["data.apply_chat_template=true"], "data.apply_chat_template=true, but"),
    ("missing adapter_path", ["model.adapter_path=no_such_adapter"], "adapter 'no_such_adapter' is not available"),
    ("an adapter folder as the model", ["model=causal_lm", "model.name_or_path=pickled_adapter"],
     f"model.name_or_path='pickled_adapter' holds a peft adapter (adapter_config.json, no config.json), not a whole "
     f"model; load it onto its base with model.adapter_path=pickled_adapter model.name_or_path={TINY}."),
    ("an adapter folder as a routed teacher",
     ["experiment=two_task_distill", "teacher.teachers.calculator.name_or_path=pickled_adapter"],
     "teacher.teachers.calculator.name_or_path='pickled_adapter' holds a peft adapter (adapter_config.json, no "
     "config.json), not a whole model; load it onto its base with teacher.teachers.calculator.adapter_path="
     "pickled_adapter teacher.teachers.calculator.name_or_path="),
    ("a run directory as the model", ["model=causal_lm", "model.name_or_path=a_run"],
     "model.name_or_path='a_run' is a run's folder, not a model folder; export its checkpoint (python -m "
     "lit_rlhf.export a_run/checkpoints/last.ckpt OUT_DIR) and give OUT_DIR"),
    ("a model path in a folder here that lacks it", ["model.name_or_path=a_run/policy"],  # a Hub-shaped name
     "tokenizer 'a_run/policy' is not available here ... or point model.name_or_path at a local directory. (If you "
     "meant a path: the folder 'a_run' is here, but holds no 'policy'.)"),
    ("model directory without tokenizer", ["model=causal_lm", "model.name_or_path=model_without_tokenizer"],
     "model_without_tokenizer has no tokenizer files"),
    ("export_dir is a file", ["export_dir=a_file"], "export_dir='a_file' is a file"),
    ("reward model path that does not exist", ["reward=reward_model", "reward.name_or_path=no_such_reward_model"],
     "tokenizer 'no_such_reward_model' is not available"),
    ("a gold reward equal to the trained reward", ["gold=vader"], "gold= names the trained reward"),
    ("a reward model folder without its head", ["reward=reward_model", f"reward.name_or_path={TINY}",
                                                "reward.dtype=float32"],
     f"reward.name_or_path={str(TINY)!r} has no weights for 'score.weight'"),
    ("unknown key", ["algo.kl_coeff=0.1"], "algo.kl_coeff is not a setting (did you mean 'kl_coef'?)"),
    ("misspelled LoRA key", ["model.lora.rr=8"], "model.lora.rr is not a setting (did you mean 'r'?)"),
    ("a setting typed at the wrong level", ["algo.lr=1e-3"],
     "algo.lr is not a setting (did you mean 'algo.optimizer.lr'?)"),
    ("Lightning's gradient clipping", ["trainer.gradient_clip_val=1.0"],
     "trainer.gradient_clip_val is not a setting (the RL modules do this in their own update: set algo.max_grad_norm "
     "instead)"),
    ("Lightning's gradient clipping, added", ["+trainer.gradient_clip_val=1.0"],
     "trainer.gradient_clip_val=1.0: the RL modules optimize by hand, clipping and accumulating gradients in their "
     "own update, which Lightning's gradient_clip_val cannot reach; set algo.max_grad_norm instead"),
    ("Lightning's checkpointing switched off", ["+trainer.enable_checkpointing=false"],
     "trainer.enable_checkpointing=false: the checkpoints are written by callbacks; to write none, drop "
     "trainer.enable_checkpointing and set callbacks.model_checkpoint=null callbacks.checkpoint_on_interrupt=null"),
    ("a Trainer argument the trainer group lacks", ["trainer.deterministic=true"],
     "trainer.deterministic is not a setting (a Lightning Trainer argument that the trainer group does not list: add "
     "it, +trainer.deterministic=...)"),
    ("misspelled group option", ["algo=rlooo"], "algo=rlooo is not an option of algo (did you mean 'rloo'?)"),
    ("an offline fit as an RL algorithm", ["algo=dpo"], "algo=dpo is not an option of algo (distill, grpo, ppo, "
     "reinforce_pp, rloo): dpo trains with an app of its own, python train_dpo.py (its --help lists its settings)."),
    ("a + on a key the config has", ["+seed=1"], "seed is already in the config: set it without the + (seed=1)"),
    ("a + on a group the defaults choose", ["+algo=rloo"],
     "algo is already chosen by the defaults: choose algo=rloo without the +."),
    ("a ~ the shell did not expand", ["hydra.run.dir=~/runs/a"],
     "'hydra.run.dir=~/runs/a': Hydra does not expand ~ (your shell does, unquoted); write the path out: "
     "hydra.run.dir=$HOME/runs/a"),
    ("several values without -m", ["algo=rloo,ppo"],
     "algo=rloo,ppo names several options of the group algo: add -m to run each (python train.py -m algo=rloo,ppo)"),
    ("a group removed with ~", ["~model"], "~model removed model, which this run reads; choose one instead: model="),
    ("a ${...} that names no setting", ["model.name_or_path=${oops}"],
     "model.name_or_path=${oops} cannot be resolved: oops is not a setting of the config"),
    ("GRPO with one sample per prompt", ["algo=grpo", "algo.num_generations=1"],
     "algo.num_generations=1: a group-relative advantage needs at least 2 samples per prompt"),
    ("REINFORCE++-baseline with one sample per prompt", ["algo=reinforce_pp", "algo.samples_per_prompt=1"],
     "algo.samples_per_prompt=1 with algo.baseline=group: a group baseline needs at least 2"),
    ("a key under a group left at none", ["env.max_turns=3"],
     "env.max_turns is not a setting (env is none in this run, with no keys to set; choose one first"),
    ("a key new to an open mapping, without its +", ["algo.generation_kwargs.top_p=0.9"],
     "algo.generation_kwargs.top_p is not a setting (algo.generation_kwargs takes keys it does not have yet with a "
     "+: +algo.generation_kwargs.top_p=<value>)"),
    ("delta at or below 1", ["algo=grpo", "algo.delta=1"],
     "algo.delta=1.0 caps the unclipped ratio, and at or below 1 it takes the gradient"),
    ("a top_entropy_quantile above 1", ["algo=grpo", "algo.top_entropy_quantile=1.5"],
     "algo.top_entropy_quantile=1.5 must be a finite number >= 0 and <= 1."),
    ("cliprange_low above cliprange_high", ["algo=grpo", "algo.cliprange_low=0.3", "algo.cliprange_high=0.2"],
     "algo.cliprange_low=0.3 is above algo.cliprange_high=0.2"),
    ("unknown loss_type", ["algo=grpo", "algo.loss_type=dapoo"],
     "algo.loss_type='dapoo' is not one of bnpo, grpo, dr_grpo, dapo, luspo (did you mean 'dapo'?)"),
    ("unknown scale_rewards", ["algo=grpo", "algo.scale_rewards=std"],
     "algo.scale_rewards='std' is not one of group, batch, none"),
    ("negative beta", ["algo=grpo", "algo.beta=-0.1"], "algo.beta=-0.1 must be >= 0"),
    ("the GSM8K preset offline", ["experiment=gsm8k_grpo_qwen"],
     "tokenizer 'Qwen/Qwen2.5-0.5B-Instruct' is not available here"),
    ("a reward that needs a column the data lacks", ["reward=arithmetic_correct"],
     "the reward arithmetic_correct needs the dataset column 'answer', which the prompts' rows do not have"),
    ("a task metric on data without its column", ["task_metrics=exact_match"],
     "task metric exact_match needs the dataset column 'answer', which the prompts' rows do not have"),
    ("a misspelled answer_column", ["experiment=arithmetic_rloo", "task_metrics.exact_match.answer_column=answr"],
     "task metric exact_match needs the dataset column 'answr', which the prompts' rows do not have"),
    ("a misspelled optimized_metric", ["optimized_metric=eval/rlhf_rewrd"],
     "optimized_metric='eval/rlhf_rewrd' is not a metric this run logs (did you mean 'eval/rlhf_reward'?)"),
    ("rows without the answer a reward reads", ["data=files", "data.dataset=some_without_answer.jsonl",
                                                  "reward=arithmetic_correct"],
     "data.dataset='some_without_answer.jsonl', row 4: no 'answer', which the reward arithmetic_correct needs"),
    ("a dataset column named like a reward argument", ["data=files", "data.dataset=prompts_column.jsonl"],
     "data.dataset='prompts_column.jsonl' has a column named 'prompts'"),
    ("a generation kwarg the settings own", ["+algo.generation_kwargs.temperature=0.5"],
     "algo.generation_kwargs.temperature=0.5 is set by lit_rlhf, not by generation_kwargs; remove it: set "
     "algo.temperature instead"),
    ("sampling that is not sampling", ["+algo.generation_kwargs.do_sample=false"],
     "algo.generation_kwargs.do_sample=False is set by lit_rlhf"),
    ("a token sampler that does not exist", ["rollout.token_sampler=fast"],
     "rollout.token_sampler='fast' is not a token sampler; use one of inverse_cdf, generate"),
    ("an adapter merge setting that does not exist", ["rollout.merge_adapters=yes"],
     "rollout.merge_adapters='yes' is not a choice; use auto (float32 weights only), true or false"),
    ("a static KV cache longer than the model's context", ["rollout.compile_mode=default",
                                                           "rollout.static_cache_length=4096"],
     "rollout.static_cache_length=4096 is longer than the model's context (256 positions); set at most 256"),
    ("a reward weight that is not a number", ["reward.weights.vader=abc"],
     "reward.weights.vader='abc' must be a finite number"),
    ("a reward weight that is NaN", ["reward.weights.vader=nan"], "reward.weights.vader=nan must be a finite number"),
    ("no reward", ["reward=[]"], "reward=[] selects no reward; pick one or more"),
    ("the reward model combined with others", ["reward=[vader,reward_model]"],
     "reward=reward_model cannot be combined with other rewards on the command line"),
    ("trainer=gpu on a machine without a GPU", ["trainer=gpu"],
     "trainer.accelerator=gpu (trainer=gpu) needs a CUDA GPU"),
    ("another algorithm's name for samples per prompt", ["algo=reinforce_pp", "algo.num_generations=4"],
     "algo.num_generations is not a setting (did you mean 'samples_per_prompt'? this algorithm's name for it)"),
    ("a CSV file with an unclosed quote", ["data=files", "data.dataset=unclosed.csv"],
     "data.dataset='unclosed.csv', line 4: not valid CSV"),
    ("a CSV row with more fields than the header", ["data=files", "data.dataset=extra_field.csv"],
     "data.dataset='extra_field.csv', line 3: 3 fields, but the header has 2"),
    ("prompts encoded with another tokenizer than the model's",
     [f"data.tokenizer={ROOT / 'lit_rlhf' / 'assets' / 'tiny-arithmetic'}"],
     f"data.tokenizer='{ROOT / 'lit_rlhf' / 'assets' / 'tiny-arithmetic'}' encodes the data with other token ids than "
     f"the model's tokenizer"),
    ("a token budget below the longest sequence", ["algo.max_tokens_per_micro_batch=4"],
     "algo.max_tokens_per_micro_batch=4 is below the longest sequence"),
    ("a reward-hacking monitor window of 0", ["callbacks.reward_hacking_monitor.window=0"],
     "callbacks.reward_hacking_monitor.window=0 must be a whole number >= 1"),
    ("a misspelled optimizer", ["algo.optimizer._target_=torch.optim.AdamWW"],
     "algo.optimizer._target_='torch.optim.AdamWW' cannot be imported: module 'torch.optim' has no 'AdamWW' (did you "
     "mean 'AdamW'?)."),
    ("LoRA target_modules that match nothing", ["model.lora.target_modules=[nope]"],
     "model.lora.target_modules=['nope'] matches no module of"),
    ("a pickled model file", ["model=causal_lm", "model.name_or_path=pickled_model"],
     "model.name_or_path='pickled_model' holds a pickled weights file (.bin) that is not plain tensors"),
    ("a pickled adapter file", ["model.adapter_path=pickled_adapter"],
     "model.adapter_path='pickled_adapter' holds a pickled weights file (.bin) that is not plain tensors"),
    ("val_check_interval 0", ["trainer.val_check_interval=0"], "trainer.val_check_interval=0 must be > 0"),
    ("check_val_every_n_epoch 0, which Lightning divided by mid-run", ["trainer.check_val_every_n_epoch=0"],
     "trainer.check_val_every_n_epoch=0 must be a whole number >= 1 (epochs between held-out evaluations) or null"),
    ("a Trainer count that is not a number, an assert in Lightning", ["trainer.max_epochs=abc"],
     "trainer.max_epochs='abc' must be a whole number >= -1 (-1 or null: no limit)."),
    ("a device count that is not a number", ["trainer.devices=abc"],
     "trainer.devices='abc' must be a number of devices (e.g. 1; -1: all of them), a list of device indices"),
    ("a Trainer min_steps, which held the run past steps= for ever", ["+trainer.min_steps=2"],
     "Trainer min_steps=2 (trainer.min_steps on the command line) would hold this RL fit past every stop"),
    ("a Trainer min_epochs, which held the run past steps= for ever", ["+trainer.min_epochs=1"],
     "Trainer min_epochs=1 (trainer.min_epochs on the command line) would hold this RL fit past every stop"),
    ("an unknown policy loss", ["algo.policy_loss=gspo"], "algo.policy_loss='gspo' is not one of clip, cispo, sapo"),
    ("an unknown importance sampling level", ["algo.importance_sampling_level=seq"],
     "algo.importance_sampling_level='seq' is not one of token, sequence"),
    ("an unknown correction mode", ["algo.rollout_is_mode=token"],
     "algo.rollout_is_mode='token' is not one of token_truncate, token_mask, sequence_truncate, sequence_mask, "
     "sequence_geo_truncate, sequence_geo_mask"),
    ("a correction cap of 1", ["algo.rollout_is_cap=1"], "algo.rollout_is_cap=1.0 must be > 1"),
    ("a GSPO clip range of 1 or more", ["algo.sequence_cliprange_high=1.5"],
     "algo.sequence_cliprange_high=1.5 must be below 1"),
    ("negative refill rounds", ["algo=grpo", "algo.filter_zero_std_groups=true", "algo.max_refill_rounds=-1"],
     "algo.max_refill_rounds=-1 must be >= 0"),
    ("too many refill rounds", ["algo=grpo", "algo.filter_zero_std_groups=true", "algo.max_refill_rounds=100000"],
     "algo.max_refill_rounds=100000 is more than 100"),
    ("normalize_then_sum with a score transform", ["algo=grpo", "algo.multi_objective_aggregation=normalize_then_sum",
                                                   "score_transforms=reward_normalizer"],
     "score transforms (RewardNormalizer) change the rewards' weighted sum, which algo.multi_objective_aggregation="
     "normalize_then_sum does not train on"),
    ("normalize_then_sum with scale_rewards=none", ["algo=grpo", "algo.multi_objective_aggregation=normalize_then_sum",
                                                    "algo.scale_rewards=none"],
     "algo.scale_rewards=none has no effect with algo.multi_objective_aggregation=normalize_then_sum"),
    ("TRL's loss_type=vespo", ["algo=grpo", "algo.loss_type=vespo"],
     "algo.loss_type=vespo: TRL's loss_type=vespo is algo.policy_loss=vespo algo.loss_type=dapo here"),
    ("adaptive entropy bounds out of order", ["algo=grpo", "algo.use_adaptive_entropy=true",
                                              "algo.entropy_coef_min=0.5", "algo.entropy_coef_max=0.1"],
     "algo.entropy_coef_min=0.5 is above algo.entropy_coef_max=0.1"),
    ("NaN or inf for a range-checked setting", ["algo=grpo", "algo.cispo_cap=nan"],
     "algo.cispo_cap=nan must be a finite number"),
    ("a lower correction bound at or above the cap", ["algo.rollout_is_min=3"],
     "algo.rollout_is_min=3.0 must be below algo.rollout_is_cap=2.0"),
    ("an infinite tool timeout", ["env=calculator", "env.tool_timeout_s=inf"],
     "env.tool_timeout_s=inf must be a number of seconds > 0 and at most 86400"),
    ("reward=environment without an environment", ["reward=environment"],
     "the reward environment reads 'env_reward', a column the episodes of an environment add"),
    ("refill rounds without the zero-std filter", ["algo=grpo", "algo.max_refill_rounds=2"],
     "algo.max_refill_rounds=2 refills groups that filter_zero_std_groups leaves out"),
    ("env.max_turns below 1", ["env=calculator", "env.max_turns=0"], "env.max_turns=0 must be a whole number >= 1"),
    ("hydra.job.chdir=true", ["hydra.job.chdir=true"],
     "hydra.job.chdir=true would run the task in its run directory, and the relative paths of the command line "
     "(data.dataset, model.name_or_path, ckpt_path, ...) would be looked for there; remove it:"),
    ("an environment that does not import", ["env=calculator", "env.factory._target_=no_such.Env"],
     "env.factory._target_='no_such.Env' cannot be imported; check its spelling and that its module is importable"),
    ("an environment that is not callable",
     ["env=calculator", "env.factory._target_=lit_rlhf.tasks.calculator.MAX_DIGITS"],
     "env.factory._target_ names '30', which is not callable; name a class or function"),
    ("an unknown tool format", ["env=calculator", "env.tool_format=xml"],
     "env.tool_format='xml' is not a tool format (valid formats: compact, hermes)"),
    ("reward=http without a URL", ["reward=http"], "reward.url is required (marked ??? in conf/)"),
    ("a reward URL without http://", ["reward=http", "reward.url=localhost:8000"],
     "reward.url='localhost:8000' is not an http(s) URL"),
    ("a rollout server listed twice", ["rollout=vllm_server", "rollout.urls=[http://127.0.0.1:9,http://127.0.0.1:9/]"],
     "rollout.urls names http://127.0.0.1:9 twice; list each server once."),
    ("a rollout server address without http://", ["rollout=vllm_server", "rollout.urls=[gen-0:8000]"],
     "rollout.urls='gen-0:8000' is not an http(s) URL; give the server's address, e.g. "
     "rollout.urls=[http://127.0.0.1:8000]"),
    ("a reward server that is not up", ["reward=http", "reward.url=http://127.0.0.1:9", "reward.retries=0"],
     "the reward server http://127.0.0.1:9: cannot connect (ConnectError) after 1 attempt; check that the server"),
    ("a reward token variable that is not set", ["reward=http", "reward.url=http://127.0.0.1:9",
                                                 "reward.auth_env=NO_SUCH_TOKEN"],
     "reward.auth_env='NO_SUCH_TOKEN' names an environment variable that is not set"),
    ("a token typed in its variable's place", ["reward=http", "reward.url=http://127.0.0.1:9",
                                               "reward.auth_env=sk-live-4f9a"],
     "reward.auth_env must name the environment variable that holds the token (e.g. reward.auth_env=MY_TOKEN), not "
     "the token itself"),
    ("reward=http beside other rewards", ["reward=[http,vader]", "reward.url=http://127.0.0.1:9"],
     "reward=http cannot be combined with other rewards on the command line"),
    ("reward=llm_judge without a model", ["reward=llm_judge"], "reward.model is required (marked ??? in conf/)"),
    ("reward=llm_judge beside other rewards", ["reward=[llm_judge,vader]", "reward.model=m"],
     "reward=llm_judge cannot be combined with other rewards on the command line"),
    ("a judge endpoint that is not up", ["reward=llm_judge", "reward.model=m", "reward.base_url=http://127.0.0.1:9/v1",
                                         "reward.retries=0"],
     "the judge endpoint http://127.0.0.1:9/v1: APIConnectionError after 1 attempt;"),
    ("a distillation teacher on the hub, offline", ["algo=distill", "teacher.name_or_path=someone/teacher-7b"],
     "model 'someone/teacher-7b' is not available here"),
    ("a distillation teacher of another tokenizer",
     ["algo=distill", f"teacher.name_or_path={ROOT / 'lit_rlhf' / 'assets' / 'tiny-calculator'}"],
     "teacher.name_or_path="),
    ("a task reward coefficient that is NaN", ["algo=distill", f"teacher.name_or_path={TINY}",
                                               "algo.task_reward_coef=nan"],
     "algo.task_reward_coef=nan must be a finite number"),
    ("a negative task reward coefficient", ["algo=distill", f"teacher.name_or_path={TINY}",
                                            "algo.task_reward_coef=-0.5"], "algo.task_reward_coef=-0.5 must be >= 0"),
    ("teacher=served without a URL", ["algo=distill", "teacher=served"],
     "teacher.url is required (marked ??? in conf/)"),
    ("a served teacher and a temperature other than 1", ["algo=distill", "teacher=served",
                                                         "teacher.url=http://127.0.0.1:9"],
     "teacher=served gives logprobs at temperature 1 (a server's prompt logprobs are its model's own) and "
     "algo.temperature=0.7; sample at algo.temperature=1"),
    ("a teacher server that is not up", ["algo=distill", "teacher=served", "teacher.url=http://127.0.0.1:9",
                                         "teacher.retries=0", "algo.temperature=1"],
     "the teacher server http://127.0.0.1:9: cannot connect (ConnectError) after 1 attempt; check that the server"),
    ("routed teachers without teachers", ["algo=distill", "teacher=routed"], "teacher.teachers is empty"),
    ("a routing column the data lacks", ["algo=distill", "teacher=routed", ROUTED_TO_FILMS],
     "routed teachers read the dataset column 'data_source', which data.dataset='sentiment' row 1 does not have"),
    ("a row routed to a teacher that is not configured",
     ["algo=distill", "teacher=routed", "data=files", "data.dataset=two_sources.jsonl", ROUTED_TO_FILMS],
     "data.dataset='two_sources.jsonl' row 7 routes to teacher 'poetry', which is not configured"),
    ("an empty teacher folder", ["algo=distill", "teacher.name_or_path=folder_empty"],
     # transformers' own error, whose class depends on its release (OSError in 5.0, ValueError in 5.24)
     "teacher.name_or_path='folder_empty' is a local folder that cannot be loaded as a model ("),
    ("a teacher folder whose config is not JSON", ["algo=distill", "teacher.name_or_path=folder_config_not_json"],
     "teacher.name_or_path='folder_config_not_json' is a local folder that cannot be loaded as a model (OSError: "),
    ("a teacher folder without weights", ["algo=distill", "teacher.name_or_path=folder_without_weights"],
     "teacher.name_or_path='folder_without_weights' is a local folder that cannot be loaded as a model (OSError: "),
    ("a model folder whose config.json holds text for a number", ["model.name_or_path=folder_hidden_size_text"],
     "model.name_or_path='folder_hidden_size_text' is a local folder that cannot be loaded as a tokenizer "
     "(StrictDataclassFieldValidationError: Validation error for field 'hidden_size': TypeError: Field 'hidden_size' "
     "expected int, got str (value: 'big')); give a folder save_pretrained wrote (config.json and the weights)."),
    ("a model folder whose config.json names an unknown activation", ["model.name_or_path=folder_unknown_activation"],
     "model.name_or_path='folder_unknown_activation' is a local folder that cannot be loaded as a model (KeyError: "
     "'\\x1b]0;pwned\\x07gelu'); give a folder save_pretrained wrote (config.json and the weights)."),
    ("a model folder whose config.json has no attention heads", ["model.name_or_path=folder_no_heads"],
     "model.name_or_path='folder_no_heads' is a local folder that cannot be loaded as a tokenizer (ZeroDivisionError: "
     "integer modulo by zero); give a folder"),
    ("a model folder whose config.json has a negative size", ["model.name_or_path=folder_negative_vocab"],
     "model.name_or_path='folder_negative_vocab' is a local folder that cannot be loaded as a model (RuntimeError: "
     "Trying to create tensor with negative dimension -1: [-1, 128]); give a folder"),
    ("a tokenizer whose tokenizer_config.json holds text for a number", ["model.name_or_path=folder_max_length_text"],
     "the tokenizer of 'folder_max_length_text' cannot encode text (TypeError: '>' not supported between instances of "
     "'int' and 'str'); check its tokenizer_config.json, or set model.name_or_path to the directory or hub name of the "
     "model's tokenizer."),
    ("a tokenizer whose added tokens are not a mapping", ["model.name_or_path=folder_added_tokens_number"],
     "model.name_or_path='folder_added_tokens_number' is a local folder that cannot be loaded as a tokenizer "
     "(AttributeError: 'int' object has no attribute 'items'); give a folder"),
    ("a routed teacher that is a number", ["algo=distill", "teacher=routed", "teacher.teachers={films: 3}"],
     "teacher.teachers.films=3 is not a teacher; give a teacher config"),
    ("a key under null routed teachers", ["algo=distill", "teacher=routed", "teacher.teachers.films.name_or_path=x"],
     "teacher.teachers.films is not a setting (teacher.teachers is null, with no keys to set; give it whole: "
     "teacher.teachers={films: ...})"),
    ("a temperature that overflows the logits", ["algo.temperature=1e-45"],
     "algo.temperature=1e-45 is below 0.0001: the logits divided by it overflow to inf"),
    ("rollout=vllm without vLLM installed", ["rollout=vllm"], "rollout=vllm needs vLLM, which is not installed here"),
    ("rollout.cpu_cores that is not a list of cores", ["rollout=vllm", "rollout.cpu_cores=all"],
     "rollout.cpu_cores='all' is not a list of cores; write it as \"0-7\" or \"0,2,4\""),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("inputs")
    write_inputs(directory)
    return directory


@pytest.mark.integration
@pytest.mark.parametrize("label, args, expected", CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_is_one_line_and_exit_code_2(label, args, expected, inputs):
    if label.startswith("rollout=vllm") and importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed in this environment")
    result = run_app("train.py", *FAST, *args, cwd=inputs)
    line = one_line_error(result)
    assert matches(line, f"error: {expected}"), line
    assert "LOAD REPORT" not in result.stderr  # transformers' table of a folder's missing weights: the line says it
    assert "\x1b" not in result.stdout + result.stderr  # what a library prints of a folder's config.json too
    assert not (inputs / "PWNED").exists()
    assert not (inputs / "logs" / "train" / "runs").exists() or all(
        not (run / "checkpoints").exists() for run in (inputs / "logs" / "train" / "runs").iterdir())


MISSING_DATA_FILE = ("error: data.dataset='promts.jsonl': no such file (a relative path is read from the directory the "
                     "script is started in); give an existing .jsonl, .json, .csv or .parquet file.")


@pytest.mark.integration
@pytest.mark.parametrize("script, args, expected", [
    ("train.py", [*FAST, "ckpt_path=checkpoints/lats.ckpt"], "error: ckpt_path='checkpoints/lats.ckpt' is not a "
     "file; give a .ckpt written by lit_rlhf (e.g. <run dir>/checkpoints/last.ckpt)."),
    ("train.py", [*FAST, "data.dataset=promts.jsonl"], MISSING_DATA_FILE),
    ("train_sft.py", ["data.dataset=promts.jsonl"], MISSING_DATA_FILE),
    ("train_dpo.py", ["data.dataset=promts.jsonl"], MISSING_DATA_FILE),
], ids=["a mistyped ckpt_path", "a mistyped data file", "train_sft.py, a mistyped data file",
        "train_dpo.py, a mistyped data file"])
def test_a_mistyped_path_is_refused_before_the_model_loads_and_leaves_no_run_directory(script, args, expected,
                                                                                       tmp_path, monkeypatch):
    """A missing data file was found in the fit's set-up, after the imports (about ten seconds), and its run directory
    stayed (the logger's hparams.yaml, a result.json); now with the settings, before the imports."""
    from transformers import AutoModelForCausalLM

    def refuse_loading(*args, **kwargs):
        raise AssertionError("the model was loaded for a run whose input does not exist")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse_loading)
    result = run_app(script, *args, cwd=tmp_path)
    assert one_line_error(result) == expected
    assert not (tmp_path / "logs").exists()


@pytest.mark.integration
def test_an_upper_case_extension_is_read_and_reward_concurrent_is_a_setting(tmp_path):
    (tmp_path / "PROMPTS.JSONL").write_text("".join(json.dumps({"prompt": f"The film {i} was"}) + "\n"
                                                    for i in range(24)))
    result = run_app("train.py", *FAST, "data=files", "data.dataset=PROMPTS.JSONL", "reward.concurrent=true",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("settings, expected", [
    ({"beta": 0.1, "kl_coef": 0.3}, "algo.beta=0.1 and algo.kl_coef=0.3 are both set; beta"),
    ({"num_iterations": 2, "num_ppo_epochs": 3}, "algo.num_iterations=2 and algo.num_ppo_epochs=3 are both set"),
    ({"max_tokens_per_micro_batch": 64, "gradient_accumulation_steps": 2},
     "algo.max_tokens_per_micro_batch=64 replaces algo.gradient_accumulation_steps=2, which is ignored"),
])
def test_two_names_for_one_setting_warn_once(settings, expected):
    import warnings

    from lit_rlhf.config import GRPOConfig

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        GRPOConfig(**settings)
        GRPOConfig(**settings)
    assert [str(w.message) for w in caught if expected in str(w.message)] == [
        next(str(w.message) for w in caught if expected in str(w.message))]


@pytest.mark.integration
def test_blank_lines_in_a_prompt_file_are_skipped(inputs):
    result = run_app("train.py", *FAST, "data=files", "data.dataset=with_blank_lines.jsonl", cwd=inputs)
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_docs_list_every_case():
    table = (ROOT / "docs" / "reliability.md").read_text()
    missing = [label for label, _, _ in CASES if f"| {label} |" not in table]
    assert not missing, missing


@pytest.mark.integration
def test_a_hub_model_that_cannot_be_reached_fails_at_once_in_one_line(tmp_path):
    env = {"HF_HUB_OFFLINE": "", "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")}
    result = run_process("train.py", *FAST, "model=pythia-14m", cwd=tmp_path, env=env)  # the Hub's settings: at import
    line = one_line_error(result)
    assert "'EleutherAI/pythia-14m' is not available here (not in the cache, and http://127.0.0.1:9" in line
    assert "Retrying" not in result.stderr and "retry" not in result.stderr.lower()


@pytest.mark.integration
def test_a_hub_teacher_that_cannot_be_reached_fails_at_once_and_one_in_the_hub_cache_loads(tmp_path):
    """A model's cache-first load ran transformers' look-up of a peft adapter on the Hub, which ignores
    local_files_only: half a minute of retries before the line, and again for a model that the cache holds."""
    snapshot = tmp_path / "hf" / "hub" / "models--someone--tiny" / "snapshots" / ("0" * 40)
    shutil.copytree(TINY, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    env = {"HF_HUB_OFFLINE": "", "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")}
    missing = run_process("train.py", *FAST, "algo=distill", "teacher.name_or_path=someone/teacher", cwd=tmp_path,
                          env=env)
    assert "model 'someone/teacher' is not available here (not in the cache, and http://127.0.0.1:9" in \
           one_line_error(missing)
    cached = run_process("train.py", *FAST, "algo=distill", "teacher.name_or_path=someone/tiny", cwd=tmp_path, env=env)
    assert cached.returncode == 0, cached.stderr[-2000:]
    for result in (missing, cached):
        assert "retry" not in (result.stderr + result.stdout).lower()


@pytest.mark.integration
def test_a_hub_dataset_that_cannot_be_reached_fails_at_once_in_one_line(tmp_path):
    """The Hub client's retries took half a minute before the line; the connection probe answers at once."""
    env = {"HF_HUB_OFFLINE": "", "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")}
    result = run_process("train.py", *FAST, "data.dataset=someone/prompts", cwd=tmp_path, env=env)
    line = one_line_error(result)
    assert "dataset 'someone/prompts' (split 'train') is not available here (not in the cache, and " \
           "http://127.0.0.1:9 cannot be reached)" in line, line
    assert "retry" not in result.stderr.lower() and "retrying" not in result.stdout.lower()


@pytest.mark.integration
def test_a_model_directory_without_tokenizer_trains_with_model_tokenizer_name_or_path(inputs):
    tokenizer = ROOT / "lit_rlhf" / "assets" / "tiny-pythia"
    result = run_app("train.py", *FAST, "model=causal_lm", "model.name_or_path=model_without_tokenizer",
                     f"model.tokenizer_name_or_path={tokenizer}", cwd=inputs)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.integration
def test_plot_on_a_non_numeric_csv_is_one_line(tmp_path):

    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "metrics.csv").write_text("step,objective/scores\n0,abc\n")
    result = run_app("lit_rlhf.plot", str(tmp_path), cwd=ROOT, module=True)
    assert one_line_error(result).startswith(f"error: {tmp_path / 'csv' / 'metrics.csv'}, line 2: not a number")


@pytest.mark.integration
@pytest.mark.parametrize("module, usage", [
    ("lit_rlhf.plot", "usage: python -m lit_rlhf.plot [-h] [--out OUT] run_dir"),
    ("lit_rlhf.export", "usage: python -m lit_rlhf.export [-h] [--adapter-only] [--trust-remote-code] ckpt_path "
                        "out_dir")])
def test_a_module_run_without_its_arguments_shows_the_command_as_typed(module, usage):
    result = run_app(module, cwd=ROOT, module=True)
    assert result.returncode == 2 and result.stderr.splitlines()[0] == usage, result.stderr
