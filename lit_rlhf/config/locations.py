"""Where a model is: a folder here, or a name on the Hugging Face Hub (`name` or `owner/name`). A setting that is
neither (a mistyped /models/x, ./x) is refused in one line naming it, instead of being looked up on the Hub. Torch-free:
the apps check their command line with it before they import torch."""

from __future__ import annotations

from pathlib import Path

from lit_rlhf.errors import ConfigError

# the settings that hold a model's (or its tokenizer's, adapter's) folder or Hub name
MODEL_LOCATION_KEYS = ("name_or_path", "tokenizer_name_or_path", "reference_name_or_path", "adapter_path",
                       "policy_path", "tokenizer")


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


def check_model_location(key: str, name_or_path: str) -> None:
    """One line, naming `key`, for a name that is no folder here and that the Hub could not serve either."""
    if not Path(name_or_path).exists() and not hub_name(name_or_path):
        raise ConfigError(f"{key}={name_or_path!r} is no folder here, and not a Hugging Face Hub name (owner/name) "
                          f"either; give the path of a folder that save_pretrained wrote, or a Hub name.")
