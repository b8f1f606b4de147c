"""The settings tables of docs/configuration.md, made from the settings dataclasses (scripts/settings_tables.py
writes them; a test checks the page holds the current ones)."""

from __future__ import annotations

from lit_rlhf.config.docs import own_fields, settings_table


def settings_tables() -> dict[str, str]:
    """{marker name: table} for docs/configuration.md."""
    from lit_rlhf.config import (
        DataConfig,
        DistillationConfig,
        GRPOConfig,
        LoraSettings,
        ModelConfig,
        PPOConfig,
        ReinforcePPConfig,
        RLHFConfig,
        RLOOConfig,
    )
    from lit_rlhf.envs import EnvSpec

    return {
        "RLOOConfig": settings_table(RLOOConfig, "algo"),
        "PPOConfig": settings_table(PPOConfig, "algo", own_fields(PPOConfig, RLHFConfig)),
        "GRPOConfig": settings_table(GRPOConfig, "algo", own_fields(GRPOConfig, RLHFConfig)),
        "ReinforcePPConfig": settings_table(ReinforcePPConfig, "algo", own_fields(ReinforcePPConfig, RLHFConfig)),
        "DistillationConfig": settings_table(DistillationConfig, "algo", own_fields(DistillationConfig, RLHFConfig)),
        "ModelConfig": settings_table(ModelConfig, "model"),
        "LoraSettings": settings_table(LoraSettings, "model.lora"),
        "DataConfig": settings_table(DataConfig, "data"),
        "EnvSpec": settings_table(EnvSpec, "env"),
    }


def fill_tables(text: str) -> str:
    """text with every `<!-- settings:NAME -->...<!-- /settings -->` block replaced by the current table."""
    import re

    tables = settings_tables()

    def replace(match: re.Match) -> str:
        return f"<!-- settings:{match.group(1)} -->\n{tables[match.group(1)]}\n<!-- /settings -->"

    return re.sub(r"<!-- settings:(\w+) -->.*?<!-- /settings -->", replace, text, flags=re.S)
