"""A mapping typed on the command line for a setting a config file left null (`model.lora={r: 8}` where
conf/reward_model_tuning/tiny.yaml sets `model.lora: null`) fills it over the schema's defaults; OmegaConf 2.3 alone
failed inside ("'NoneType' object has no attribute 'get'") or, given {}, left it null."""

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError

from lit_rlhf.cli.null_settings import mappings_fill_null_settings
from lit_rlhf.config.model import LoraSettings, ModelConfig
from tests.apps import run_app
from tests.helpers import one_line_error


def full_fine_tune():
    cfg = OmegaConf.create({"model": OmegaConf.structured(ModelConfig)})
    cfg.model.lora = None
    return cfg


@pytest.mark.parametrize("mapping, expected", [({"r": 8}, LoraSettings(r=8)), ({}, LoraSettings())],
                         ids=["one key", "empty"])
def test_a_mapping_for_a_null_setting_fills_it_over_the_schemas_defaults(mapping, expected):
    cfg = full_fine_tune()
    with mappings_fill_null_settings():
        OmegaConf.update(cfg, "model.lora", mapping, merge=True)  # as Hydra applies `model.lora={...}`
    assert OmegaConf.get_type(cfg.model.lora) is LoraSettings
    assert OmegaConf.to_object(cfg.model.lora) == expected


def test_a_key_the_schema_lacks_is_refused_and_other_updates_are_omegaconfs():
    update = OmegaConf.update
    cfg = full_fine_tune()
    with mappings_fill_null_settings():
        with pytest.raises(ConfigKeyError, match="Key 'rr' not in 'LoraSettings'"):
            OmegaConf.update(cfg, "model.lora", {"rr": 8}, merge=True)
        OmegaConf.update(cfg, "model.dtype", "bfloat16", merge=True)
        OmegaConf.update(cfg, "model.lora", {"r": 4}, merge=True)
        OmegaConf.update(cfg, "model.lora", {"lora_alpha": 4}, merge=True)  # a set mapping: merged as before
    assert cfg.model.dtype == "bfloat16" and (cfg.model.lora.r, cfg.model.lora.lora_alpha) == (4, 4)
    assert OmegaConf.update is update  # put back after the block


@pytest.mark.integration  # runs an app
def test_train_reward_model_takes_lora_typed_whole_over_the_embedded_models_full_fine_tune(tmp_path):
    composed = run_app("train_reward_model.py", "model.lora={r: 8, lora_alpha: 16}", "--cfg", "job", cwd=tmp_path)
    assert composed.returncode == 0, composed.stderr[-3000:]
    lora = OmegaConf.create(composed.stdout).model.lora
    assert OmegaConf.to_container(lora) == {**vars(LoraSettings(r=8, lora_alpha=16))}
    line = one_line_error(run_app("train_reward_model.py", "model.lora={rr: 8}", cwd=tmp_path))
    assert line.startswith("error: model.lora.rr is not a setting"), line


@pytest.mark.parametrize("group, value, typed", [("callbacks", False, "false"), ("callbacks", "off", "'off'"),
                                                 ("logger", "none", "'none'")])
def test_a_callback_or_logger_given_a_word_instead_of_null_is_one_line(group, value, typed):
    """`callbacks.curves=false` stopped the run with a TypeError, `=off` or `=none` switched the callback off unsaid
    (a typo too); train.py's and the file-fitting apps' checks say that null switches one off."""
    from lit_rlhf.cli.checks import check_switched_off
    from lit_rlhf.errors import ConfigError

    cfg = OmegaConf.create({group: {"curves": {"_target_": "x.Y"}, "other": None}})
    check_switched_off(cfg)  # a config, and null: as they are
    cfg[group]["curves"] = value
    kind = group.rstrip("s") if group == "callbacks" else group
    with pytest.raises(ConfigError, match=f"^{group}.curves={typed} is not a {kind}'s config; null switches it off: "
                                          f"{group}.curves=null$"):
        check_switched_off(cfg)
