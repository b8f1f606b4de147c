"""The settings tables of docs/configuration.md, made from the settings dataclasses (scripts/settings_tables.py
writes them; a test checks the page holds the current ones)."""

from __future__ import annotations

from lit_rlhf.config.docs import own_fields, settings_table


def settings_tables() -> dict[str, str]:
    """{marker name: table} for docs/configuration.md: every registered algorithm's own settings (RLOO's table holds
    the settings every algorithm shares), the model's, the data's and the environment's."""
    from lit_rlhf.config import DataConfig, LoraSettings, ModelConfig, RLHFConfig, RLOOConfig
    from lit_rlhf.config.registry import ALGORITHMS
    from lit_rlhf.envs import EnvSpec

    algorithms = {entry.settings.__name__: settings_table(entry.settings, "algo") if entry.settings is RLOOConfig
                  else settings_table(entry.settings, "algo", own_fields(entry.settings, RLHFConfig))
                  for entry in ALGORITHMS.values()}
    return {
        **algorithms,
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
