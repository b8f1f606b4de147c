"""Export a trained policy as a standard Hugging Face model directory (or its LoRA adapter alone).

    python -m lit_rlhf.export CKPT OUT_DIR [--adapter-only]

The checkpoint holds the hyper-parameters and the trained tensors; frozen base weights reload from
the model's name_or_path. LoRA is merged into the base weights (safetensors + tokenizer), so
`AutoModelForCausalLM.from_pretrained(OUT_DIR)` loads the trained policy with no peft involved.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lit_rlhf.algos.loading import load_rl_module
from lit_rlhf.errors import ConfigError, UnavailableError, exit_with_user_error, os_error_message
from lit_rlhf.interrupts import StoppedBySignal, set_up_stops_on_signals
from lit_rlhf.models.export import export_model
from lit_rlhf.models.model_card import model_card
from lit_rlhf.terminal import escape_what_libraries_print


def load_from_checkpoint(ckpt_path: str | Path, reward=None, rollout_engine=None, trust_remote_code: bool = False,
                         remote_code_flag: str = "trust_remote_code=true", checkpoint: dict | None = None,
                         settings: dict | None = None):
    """The RLHF module of a lit_rlhf checkpoint (`checkpoint`: its contents, already loaded), weights loaded, on
    the CPU; `settings` override the checkpoint's algorithm settings (e.g. response_length to evaluate with).

    The checkpoint's settings never enable remote code: model.trust_remote_code is the caller's
    `trust_remote_code` (the user's command line, `remote_code_flag`), whatever the checkpoint says."""
    from lit_rlhf.algos import RLHFModule

    return load_rl_module(ckpt_path, RLHFModule, reward, rollout_engine, trust_remote_code, remote_code_flag,
                          checkpoint, settings)


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
    escape_what_libraries_print()
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
