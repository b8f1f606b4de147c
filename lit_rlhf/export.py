"""Export a trained policy as a standard Hugging Face model directory (or its LoRA adapter alone).

    python -m lit_rlhf.export CKPT OUT_DIR [--adapter-only]

The checkpoint holds the hyper-parameters and the trained tensors; frozen base weights reload from
the model's name_or_path. LoRA is merged into the base weights (safetensors + tokenizer), so
`AutoModelForCausalLM.from_pretrained(OUT_DIR)` loads the trained policy with no peft involved.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

from lit_rlhf.checkpoints.loading import load_checkpoint_file
from lit_rlhf.checkpoints.targets import rlhf_module_class
from lit_rlhf.errors import ConfigError, UnavailableError, exit_with_user_error, os_error_message
from lit_rlhf.interrupts import StoppedBySignal, set_up_stops_on_signals
from lit_rlhf.models.export import export_model
from lit_rlhf.models.model_card import model_card


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
    if written_by in ("DPOModule", "RewardModelModule", "SFTModule"):
        folder = "reward_model" if written_by == "RewardModelModule" else "policy"
        kind = "an SFT run" if written_by == "SFTModule" else "a preference run"
        raise ConfigError(f"{ckpt_path} is a checkpoint of {written_by} ({kind}), not of train.py; use the folder "
                          f"that run saved (<run dir>/{folder}), e.g. evaluate.py policy_path=<run dir>/policy for a "
                          f"DPO or SFT policy.")
    raise ConfigError(f"{ckpt_path} is not a lit_rlhf checkpoint (no rlhf_state); give one written by train.py.")


def checkpoint_settings(checkpoint: dict, ckpt_path) -> dict:
    """The module settings a checkpoint holds, refused in one line when malformed."""
    settings = checkpoint.get("hyper_parameters")
    if not isinstance(settings, dict) or not isinstance(settings.get("model"), dict):
        raise ConfigError(f"{ckpt_path} holds no model settings (hyper_parameters.model); give a checkpoint written "
                          f"by train.py.")
    for key in ("reward", "optimizer", "rollout_engine", "lr_scheduler", "kl_controller", "score_transforms",
                "teacher"):
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


def export_policy(module, out_dir: str | Path, adapter_only: bool = False,
                  metrics: dict[str, float] | None = None) -> Path:
    """Writes the module's policy (merged) or its trained adapter, with the tokenizer and a model card (README.md:
    base model, algorithm and settings, reward, RL steps, the end-of-run `metrics` when given, how to load it), to
    out_dir (a new folder); returns it. From Python: `export_policy(module, "my-policy")` after `trainer.fit`."""
    card = model_card(module, Path(out_dir), adapter_only, metrics)
    return export_model(module.policy, module.tokenizer, out_dir, adapter_only, extra_files={"README.md": card})


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m lit_rlhf.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ckpt_path")
    parser.add_argument("out_dir")
    parser.add_argument("--adapter-only", action="store_true", help="write the peft adapter, not a merged model")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let the model run its own Python code (a checkpoint's settings never enable it)")
    args = parser.parse_args()
    try:  # Ctrl-C or SIGTERM: one line, and no half-written folder (SIGTERM's default action left one)
        with set_up_stops_on_signals(StoppedBySignal):
            module = load_from_checkpoint(args.ckpt_path, trust_remote_code=args.trust_remote_code,
                                          remote_code_flag="--trust-remote-code")
            out = export_policy(module, args.out_dir, args.adapter_only)
    except StoppedBySignal as err:
        print(err.line, file=sys.stderr, flush=True)
        sys.exit(err.exit_code)
    except (ConfigError, UnavailableError) as err:
        exit_with_user_error(err)
    except OSError as err:
        if (message := os_error_message(err)) is None:
            raise
        exit_with_user_error(message)
    print(f"Exported to {out}")


if __name__ == "__main__":
    main()
