"""Export a trained policy as a standard Hugging Face model directory (or its LoRA adapter alone).

    python -m lit_rlhf.export CKPT OUT_DIR [--adapter-only]

The checkpoint holds the hyper-parameters and the trained tensors; frozen base weights reload from
the model's name_or_path. LoRA is merged into the base weights (safetensors + tokenizer), so
`AutoModelForCausalLM.from_pretrained(OUT_DIR)` loads the trained policy with no peft involved.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

from peft import PeftModel

from lit_rlhf.checkpoints.files import writing
from lit_rlhf.checkpoints.loading import load_checkpoint_file
from lit_rlhf.checkpoints.targets import rlhf_module_class
from lit_rlhf.errors import ConfigError, UnavailableError, exit_with_user_error, os_error_message
from lit_rlhf.models.policy import TRAINABLE_ADAPTER


def load_from_checkpoint(ckpt_path: str | Path, reward=None, rollout_engine=None, trust_remote_code: bool = False,
                         remote_code_flag: str = "trust_remote_code=true", checkpoint: dict | None = None,
                         settings: dict | None = None):
    """The RLHF module of a lit_rlhf checkpoint (`checkpoint`: its contents, already loaded), weights loaded, on
    the CPU; `settings` override the checkpoint's algorithm settings (e.g. response_length to evaluate with).

    The checkpoint's settings never enable remote code: model.trust_remote_code is the caller's
    `trust_remote_code` (the user's command line, `remote_code_flag`), whatever the checkpoint says."""
    if checkpoint is None:
        checkpoint = load_checkpoint_file(ckpt_path)  # weights-only, local path or URL
    require_rl_checkpoint(checkpoint, ckpt_path)
    from lit_rlhf.algos import RLHFModule

    cls = rlhf_module_class(checkpoint["rlhf_state"]["algo"], RLHFModule)
    overrides, settings = settings or {}, checkpoint_settings(checkpoint, ckpt_path)
    settings.update(overrides, model={**settings["model"], "trust_remote_code": trust_remote_code})
    if checkpoint["hyper_parameters"]["model"].get("trust_remote_code") and not trust_remote_code:
        print(f"note: {ckpt_path} was trained with model.trust_remote_code=true; a checkpoint cannot enable remote "
              f"code, only your command line can ({remote_code_flag}, if you trust the model's code).",
              file=sys.stderr, flush=True)
    with remote_code_refused(settings["model"]["name_or_path"], remote_code_flag):
        module = cls(reward=reward, rollout_engine=rollout_engine, **settings)
        module.configure_model()
    module.on_load_checkpoint(checkpoint)
    module.load_state_dict(checkpoint["state_dict"], strict=False)
    return module.eval()


def require_rl_checkpoint(checkpoint: dict, ckpt_path) -> None:
    """One line unless `checkpoint` was written by train.py; a preference run's is named as such."""
    if isinstance(checkpoint.get("rlhf_state"), dict) and "algo" in checkpoint["rlhf_state"]:
        return
    written_by = (checkpoint.get("pairs_identity") or {}).get("module")
    if written_by in ("DPOModule", "RewardModelModule"):
        folder = "policy" if written_by == "DPOModule" else "reward_model"
        raise ConfigError(f"{ckpt_path} is a checkpoint of {written_by} (a preference run), not of train.py; use the "
                          f"folder that run saved (<run dir>/{folder}), e.g. evaluate.py policy_path=<run dir>/policy "
                          f"for a DPO policy.")
    raise ConfigError(f"{ckpt_path} is not a lit_rlhf checkpoint (no rlhf_state); give one written by train.py.")


def checkpoint_settings(checkpoint: dict, ckpt_path) -> dict:
    """The module settings a checkpoint holds, refused in one line when malformed."""
    settings = checkpoint.get("hyper_parameters")
    if not isinstance(settings, dict) or not isinstance(settings.get("model"), dict):
        raise ConfigError(f"{ckpt_path} holds no model settings (hyper_parameters.model); give a checkpoint written "
                          f"by train.py.")
    for key in ("reward", "optimizer", "rollout_engine", "lr_scheduler", "kl_controller", "score_transforms"):
        if key in settings:  # objects the caller passes, never settings a file may supply
            raise ConfigError(f"{ckpt_path} holds a {key!r} setting, which lit_rlhf never writes; give a checkpoint "
                              f"written by train.py.")
    return dict(settings)


@contextmanager
def remote_code_refused(name_or_path: str, flag: str):
    """transformers' refusal to run a model's own code without trust_remote_code, as one line."""
    try:
        yield
    except ValueError as err:
        if "trust_remote_code" not in str(err):
            raise
        raise ConfigError(f"the checkpoint's model {name_or_path!r} needs to run its own Python code, which stays off "
                          f"unless you pass {flag} (only if you trust that code).") from err


def check_export_dir(out_dir: str | Path, key: str = "out_dir") -> Path:
    """The export target: a new or empty directory (an export never overwrites another model's files)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{key}={str(out_dir)!r} is a file; give a new directory to export into.")
    if out.is_dir() and any(out.iterdir()):
        raise ConfigError(f"{key}={str(out_dir)!r} is not empty (it would overwrite its files); give a new or empty "
                          f"directory.")
    existing = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not os.access(existing, os.W_OK):
        raise ConfigError(f"{key}={str(out_dir)!r} cannot be written ({existing} is read-only); give a directory you "
                          f"can write to.")
    return out


def export_policy(module, out_dir: str | Path, adapter_only: bool = False) -> Path:
    """Writes the policy (merged) or its trained adapter, with the tokenizer, to out_dir."""
    out = check_export_dir(out_dir)
    policy = module.policy
    if adapter_only and not isinstance(policy, PeftModel):
        raise ConfigError("--adapter-only needs a LoRA run; this one fine-tuned the full model (model.lora=null).")
    created = not out.exists()
    try:
        write_policy(module, policy, out, adapter_only)
    except BaseException:
        if created:  # no half-written model directory stays behind
            shutil.rmtree(out, ignore_errors=True)
        raise
    return out


def write_policy(module, policy, out: Path, adapter_only: bool) -> None:
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
        if isinstance(policy, PeftModel) and adapter_only:
            policy.save_pretrained(out, selected_adapters=[TRAINABLE_ADAPTER])
        elif isinstance(policy, PeftModel):
            merged = policy.merge_and_unload(adapter_names=[TRAINABLE_ADAPTER])
            merged.save_pretrained(out, safe_serialization=True)
        else:
            policy.save_pretrained(out, safe_serialization=True)
        module.tokenizer.save_pretrained(out)
    readable_as_umask_allows(out)


def readable_as_umask_allows(directory: Path) -> None:
    """Files as the user's umask makes new files (safetensors writes its file 0600 through a temporary file): an
    exported model is read by other tools and users as any file the user writes."""
    umask = os.umask(0)
    os.umask(umask)
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o666 & ~umask)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ckpt_path")
    parser.add_argument("out_dir")
    parser.add_argument("--adapter-only", action="store_true", help="write the peft adapter, not a merged model")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let the model run its own Python code (a checkpoint's settings never enable it)")
    args = parser.parse_args()
    try:
        module = load_from_checkpoint(args.ckpt_path, trust_remote_code=args.trust_remote_code,
                                      remote_code_flag="--trust-remote-code")
        out = export_policy(module, args.out_dir, args.adapter_only)
    except (ConfigError, UnavailableError) as err:
        exit_with_user_error(err)
    except OSError as err:
        if (message := os_error_message(err)) is None:
            raise
        exit_with_user_error(message)
    print(f"Exported to {out}")


if __name__ == "__main__":
    main()
