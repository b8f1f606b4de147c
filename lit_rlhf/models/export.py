"""The one exporter: a trained model as a standard Hugging Face model folder, with its tokenizer.

Every trained model leaves through here: the RL policy (`python -m lit_rlhf.export`, `export_dir=`), the DPO policy
and the reward model. LoRA is merged into the base weights (safetensors), so `from_pretrained(folder)` loads the
trained model with no peft involved; or the trained adapter alone. The folder is refused before anything is written
when it is not new or empty, cannot be written, or the weights hold NaN or inf, and a failed export leaves no
half-written folder behind.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import torch
from peft import PeftModel

from lit_rlhf.config.validation import check_not_empty
from lit_rlhf.errors import ConfigError, writing
from lit_rlhf.models.policy import TRAINABLE_ADAPTER
from lit_rlhf.ops.finite import all_finite


def check_export_dir(out_dir: str | Path, key: str = "out_dir") -> Path:
    """The export target: a new or empty directory (an export never overwrites another model's files)."""
    check_not_empty(key, str(out_dir), "give a new directory to export into")
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


def check_finite_weights(model: torch.nn.Module, directory: Path) -> None:
    """Refuses to save a model folder whose weights hold NaN or inf."""
    if not all_finite([p.detach() for p in model.parameters()]):
        raise ConfigError(f"the trained weights hold NaN or inf, so nothing was saved to {directory}; lower "
                          f"algo.optimizer.lr and train again.")


def export_model(model: torch.nn.Module, tokenizer, out_dir: str | Path, adapter_only: bool = False,
                 on_a_copy: bool = False, extra_files: dict[str, str] | None = None, key: str = "out_dir",
                 into_existing: bool = False) -> Path:
    """Writes `model` (LoRA merged; or, with adapter_only, the trained adapter alone) and `tokenizer` to out_dir, with
    `extra_files` ({name: text}) beside them. on_a_copy merges a copy and leaves `model` as it was (a module that goes
    on being used); otherwise the merge is done in place, with no second copy of the weights in memory. into_existing
    writes into a folder that holds files already (a run's own save_dir, written again when the run is resumed)."""
    if model is None:  # a module's model is built by configure_model, which trainer.fit calls
        raise ConfigError("the module has no model to export yet: it builds it in configure_model, which trainer.fit "
                          "calls; export after trainer.fit (or call module.configure_model() first to export the "
                          "untrained one).")
    out = Path(out_dir) if into_existing else check_export_dir(out_dir, key)
    if adapter_only and not isinstance(model, PeftModel):
        raise ConfigError("--adapter-only needs a LoRA run; this one fine-tuned the full model (model.lora=null).")
    check_finite_weights(model, out)
    created = not out.exists()
    try:
        with writing(out):
            out.mkdir(parents=True, exist_ok=True)
            if isinstance(model, PeftModel) and adapter_only:
                model.save_pretrained(out, selected_adapters=[TRAINABLE_ADAPTER])
            else:
                merged(model, on_a_copy).save_pretrained(out, safe_serialization=True)
            tokenizer.save_pretrained(out)
            for name, text in (extra_files or {}).items():
                (out / name).write_text(text)
    except BaseException:
        if created:  # no half-written model folder stays behind
            shutil.rmtree(out, ignore_errors=True)
        raise
    readable_as_umask_allows(out)
    return out


def merged(model: torch.nn.Module, on_a_copy: bool) -> torch.nn.Module:
    """The model with its trained LoRA adapter merged into the base weights (a frozen reference adapter, if any,
    left out); a model without adapters as it is."""
    if not isinstance(model, PeftModel):
        return model
    if on_a_copy:
        model = copy.deepcopy(model)
    trained = [TRAINABLE_ADAPTER] if TRAINABLE_ADAPTER in model.peft_config else None  # None: every adapter
    return model.merge_and_unload(adapter_names=trained)


def readable_as_umask_allows(directory: Path) -> None:
    """Files as the user's umask makes new files (safetensors writes its file 0600 through a temporary file): an
    exported model is read by other tools and users as any file the user writes."""
    umask = os.umask(0)
    os.umask(umask)
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o666 & ~umask)
