"""What a module checks of the data module it is fitted with, before any step: that its batches are of the kind
the module trains on (prompts for RL, pairs for DPO and reward models, ...), and that its tokenizer gives the model's
token ids. A data module of the user's own that does not say what it yields is taken as it is."""

from __future__ import annotations

from typing import Any

from lit_rlhf.errors import ConfigError
from lit_rlhf.models.tokenizer import check_data_tokenizer

# the kind of batches each module trains on, and the data module that yields them
DATA_MODULES = {"prompts": "PromptDataModule", "preference pairs": "PreferenceDataModule",
                "completions": "CompletionDataModule", "labelled completions": "LabeledCompletionDataModule"}
MODULES = {"prompts": "an RL module (RLOOModule, GRPOModule, PPOModule, ...)",
           "preference pairs": "DPOModule or RewardModelModule", "completions": "SFTModule",
           "labelled completions": "KTOModule"}


def check_data_module(module: Any, datamodule: Any, tokenizer: Any) -> None:
    if datamodule is None:
        return
    wanted, given = getattr(module, "trains_on", None), getattr(datamodule, "batches", None)
    if wanted is not None and given is not None and wanted != given:
        raise ConfigError(f"{type(module).__name__} trains on {wanted} ({DATA_MODULES.get(wanted, '?')}), and the "
                          f"fit's {type(datamodule).__name__} gives {given}, which {MODULES.get(given, '?')} trains "
                          f"on; pass a {DATA_MODULES.get(wanted, '?')}.")
    spec = module.hparams.get("model")  # a subclass of the user's may have no model spec: nothing to compare with
    if spec:
        check_data_tokenizer(datamodule, tokenizer, spec)
