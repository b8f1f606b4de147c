"""Where a model is: a folder here, or a name on the Hugging Face Hub (`name` or `owner/name`). A setting that is
neither (a mistyped /models/x, ./x) is refused in one line naming it, instead of being looked up on the Hub. Torch-free:
the apps check their command line with it before they import torch."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from lit_rlhf.config.command_line import override
from lit_rlhf.config.validation import check_not_empty
from lit_rlhf.errors import ConfigError

# the settings that hold a model's (or its tokenizer's, adapter's) folder or Hub name
MODEL_LOCATION_KEYS = ("name_or_path", "tokenizer_name_or_path", "reference_name_or_path", "adapter_path",
                       "policy_path", "tokenizer")
# those of them that must hold a whole model (weights and config.json), not a peft adapter on one
WHOLE_MODEL_KEYS = ("name_or_path", "reference_name_or_path")
# the settings whose model takes an adapter of its own: <prefix>.adapter_path
TAKES_AN_ADAPTER = ("model.", "teacher.")


def hub_name(name: str) -> bool:
    """Whether `name` can name a Hub repository: a path such as /models/x, ./x or a/b/c cannot."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def local_folder_note(name: str) -> str:
    """For a Hub-shaped name whose owner is a folder here (runs/policy with runs/ present): it was meant as a path, and
    that folder lacks it; else nothing."""
    owner, _, rest = name.partition("/")
    if not rest or not Path(owner).is_dir() or Path(name).exists():
        return ""
    return f" (If you meant a path: the folder {owner!r} is here, but holds no {rest!r}.)"


def check_model_location(key: str, name_or_path: str, whole_model: bool = False) -> None:
    """One line, naming `key`, for a name that is no folder here and that the Hub could not serve either, and, where
    a whole model is needed (whole_model), for a folder that holds a peft adapter only."""
    check_not_empty(key, name_or_path, "give the folder that save_pretrained wrote, or a Hub name")
    if Path(name_or_path).is_file():  # a run's checkpoint, a weights file: from_pretrained reads folders
        checkpoint = (" A run's Lightning checkpoint (.ckpt) is not one: export it (python -m lit_rlhf.export CKPT "
                      "OUT_DIR) and give OUT_DIR (ckpt_path= is what resumes or evaluates a checkpoint).")
        raise ConfigError(f"{key}={name_or_path!r} is a file, not a model folder; give the folder that "
                          f"save_pretrained wrote (config.json and the weights), or a Hub name."
                          f"{checkpoint if name_or_path.endswith('.ckpt') else ''}")
    if line := run_directory_line(key, Path(name_or_path)):
        raise ConfigError(line)
    if not Path(name_or_path).exists() and not hub_name(name_or_path):
        raise ConfigError(f"{key}={name_or_path!r} is no folder here, and not a Hugging Face Hub name (owner/name) "
                          f"either; give the path of a folder that save_pretrained wrote, or a Hub name.")
    if whole_model:
        check_not_an_adapter(key, name_or_path)


def run_directory_line(key: str, folder: Path) -> str | None:
    """For a run directory (or its checkpoints/) given where a model folder goes: the folder the run saved its model
    in (train_sft.py's policy/, train_reward_model.py's reward_model/), or the export of its checkpoint."""
    if not folder.is_dir() or (folder / "config.json").is_file() or (folder / "adapter_config.json").is_file():
        return None
    checkpoints = folder if folder.name == "checkpoints" else folder / "checkpoints"
    run = folder.parent if checkpoints == folder else folder
    if not (run / ".hydra").is_dir() and not any(checkpoints.glob("*.ckpt")):
        return None
    saved = [run / name for name in ("policy", "reward_model") if (run / name / "config.json").is_file() or
             (run / name / "adapter_config.json").is_file()]
    if saved:
        return f"{key}={str(folder)!r} is a run's folder, not a model folder; give the model it saved: {saved[0]}."
    ckpt = checkpoints / "last.ckpt" if (checkpoints / "last.ckpt").exists() else next(checkpoints.glob("*.ckpt"), None)
    if ckpt is None:
        return f"{key}={str(folder)!r} is a run's folder without a saved model or checkpoint; give a model folder."
    adapter = " --adapter-only" if key.endswith("adapter_path") else ""
    return (f"{key}={str(folder)!r} is a run's folder, not a model folder; export its checkpoint (python -m "
            f"lit_rlhf.export {shlex.quote(str(ckpt))} OUT_DIR{adapter}) and give OUT_DIR "
            f"(ckpt_path={shlex.quote(str(ckpt))} resumes or evaluates it).")


def check_not_an_adapter(key: str, name_or_path: str) -> None:
    """A folder of a peft adapter alone (adapter_config.json, no config.json) given as a model: transformers would load
    the adapter onto its base by itself, and LoRA training would add its own adapter beside it unnoticed (and a
    reference "with adapters off" would have neither)."""
    folder = Path(name_or_path)
    if not (folder / "adapter_config.json").is_file() or (folder / "config.json").is_file():
        return
    try:
        base = json.loads((folder / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        base = None
    base = base if isinstance(base, str) and base else "<its base model>"
    prefix = key.rpartition(".")[0]
    if key.endswith(".name_or_path") and key.startswith(TAKES_AN_ADAPTER):
        fix = f"load it onto its base with {override(f'{prefix}.adapter_path', name_or_path)} {override(key, base)}"
    else:
        fix = (f"merge it into its base ({base}) and save that (peft's merge_and_unload, then save_pretrained), or "
               f"export a run's checkpoint whole (python -m lit_rlhf.export CKPT OUT_DIR), and give that folder")
    raise ConfigError(f"{key}={name_or_path!r} holds a peft adapter (adapter_config.json, no config.json), not a "
                      f"whole model; {fix}.")
