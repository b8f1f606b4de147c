"""An override that gives a mapping to a typed setting that is null in the composed config: `model.lora={r: 8}` where
a config file set `model.lora: null` (full fine-tuning). Hydra applies it with OmegaConf.update, which merges the
mapping into the null node itself, and OmegaConf 2.3 fails there inside ("'NoneType' object has no attribute 'get'";
omegaconf issue 1360), or, given `{}`, leaves the setting null. Merged through its parent instead, the setting takes
the mapping over its schema's defaults (`model.lora={r: 8}`: LoRA of rank 8, the other keys LoraSettings' defaults;
`model.lora={}`: the defaults), and a key the schema lacks is Hydra's one-line unknown-key error as anywhere else."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict


def is_null_setting(parent: Any, key: str) -> bool:
    """Whether parent[key] is a mapping setting (a config node) holding null."""
    if not isinstance(parent, DictConfig) or key not in parent:
        return False
    node = parent._get_node(key)
    return isinstance(node, DictConfig) and node._is_none()


@contextmanager
def mappings_fill_null_settings() -> Iterator[None]:
    """For the block, OmegaConf.update (as Hydra's overrides call it) merges a mapping for a null setting through the
    setting's parent."""
    update = OmegaConf.update

    def update_through_parent(cfg: Any, key: str, value: Any = None, *, merge: bool = True,
                              force_add: bool = False) -> None:
        parent_key, _, last = key.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key, throw_on_missing=False) if parent_key else cfg
        if merge and isinstance(value, (dict, DictConfig)) and is_null_setting(parent, last):
            if force_add:
                with open_dict(parent):
                    parent.merge_with({last: value})
            else:
                parent.merge_with({last: value})
            return
        update(cfg, key, value, merge=merge, force_add=force_add)

    OmegaConf.update = staticmethod(update_through_parent)
    try:
        yield
    finally:
        OmegaConf.update = staticmethod(update)
