"""One source of defaults: Python and the CLI build the same module, unknown keys are one line with the
nearest valid key, and the docs' settings tables are the dataclasses' own docs."""

import re
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from lit_rlhf import PPOModule, PromptDataModule, RLOOModule
from lit_rlhf.cli.resolvers import register_resolvers
from lit_rlhf.cli.settings_tables import fill_tables
from lit_rlhf.errors import ConfigError
from lit_rlhf.rewards import VaderSentiment

ROOT = Path(__file__).resolve().parents[2]


def compose_train(*overrides):
    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        return compose("train", overrides=["paths.output_dir=.", *overrides])


@pytest.mark.parametrize("algo, cls", [("rloo", RLOOModule), ("ppo", PPOModule)])
def test_a_module_built_from_python_defaults_equals_the_one_train_py_builds(algo, cls):
    cfg = compose_train(f"algo={algo}")
    from_cli = instantiate(cfg.algo, _convert_="all")
    model = OmegaConf.to_container(cfg.model, resolve=True)
    from_python = cls(model=model, reward=VaderSentiment(), rl_steps=cfg.steps)
    assert dict(from_python.hparams) == dict(from_cli.hparams)
    assert from_python.optimizer_factory.keywords == from_cli.optimizer_factory.keywords
    data_cli = instantiate(cfg.data)
    data_python = PromptDataModule(tokenizer=model["name_or_path"], seed=cfg.seed)
    assert dict(data_python.hparams) == dict(data_cli.hparams)


@pytest.mark.parametrize("make, message", [
    (lambda: RLOOModule(model={"name_or_path": "m"}, reward=None, kl_coeff=0.1),
     "algo.kl_coeff is not a setting of RLOOConfig (did you mean 'kl_coef'?)"),
    (lambda: PPOModule(model={"name_or_path": "m"}, reward=None, vf_coeff=0.1),
     "algo.vf_coeff is not a setting of PPOConfig (did you mean 'vf_coef'?)"),
    (lambda: RLOOModule(model={"name_or_path": "m", "lora": {"rr": 8}}, reward=None),
     "model.lora.rr is not a setting of LoraSettings (did you mean 'r'?)"),
    (lambda: RLOOModule(model={"name_or_pth": "m"}, reward=None),
     "model.name_or_pth is not a setting of ModelConfig (did you mean 'name_or_path'?)"),
    (lambda: PromptDataModule(tokenizer="t", batch_sise=4),
     "data.batch_sise is not a setting of DataConfig (did you mean 'batch_size'?)"),
])
def test_an_unknown_key_in_python_is_one_line_naming_the_nearest_valid_one(make, message):
    with pytest.raises(ConfigError) as raised:
        make()
    assert str(raised.value) == message + "."


def test_the_settings_tables_in_the_docs_are_the_dataclass_docs():
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert "<!-- settings:RLOOConfig -->" in page and "<!-- settings:PPOConfig -->" in page
    assert fill_tables(page) == page, "run `python scripts/settings_tables.py`"


@pytest.mark.parametrize("name, extra", [
    ("cispo_cap", {"policy_loss": "cispo"}), ("sapo_temperature_pos", {"policy_loss": "sapo"}),
    ("sapo_temperature_neg", {"policy_loss": "sapo"}), ("sequence_cliprange_low", {}),
    ("off_policy_mask_threshold", {}), ("rollout_is_cap", {}), ("kl_coef", {}), ("cliprange", {}),
    ("temperature", {}), ("max_grad_norm", {}),
])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nan_and_inf_are_refused_by_every_range_check(name, extra, value):
    """NaN passes `value < minimum` and inf passes `value > 0`: both must be refused, not train on skipped
    updates."""
    from lit_rlhf import GRPOModule

    with pytest.raises(ConfigError, match=rf"algo.{name}={value!r} must be a finite number"):
        GRPOModule(model={"name_or_path": "m"}, reward=None, **{name: value, **extra})


@pytest.mark.parametrize("keywords, expected", [({"lr": float("nan")}, "algo.optimizer.lr=nan must be a number > 0"),
                                                ({"lr": 1e-5, "weight_decay": float("inf")},
                                                 "algo.optimizer.weight_decay=inf must be a finite number >= 0")])
def test_nan_and_inf_optimizer_settings_are_refused(keywords, expected):
    import functools

    import torch

    from lit_rlhf.config.validation import check_optimizer

    with pytest.raises(ConfigError, match=expected):
        check_optimizer(functools.partial(torch.optim.AdamW, **keywords))


@pytest.mark.parametrize("settings, said", [
    ({"rollout_is_mode": "sequence_mask"}, "algo.rollout_is_mode=sequence_mask corrects an engine's own logprobs"),
    ({"off_policy_mask_threshold": 0.5}, "algo.off_policy_mask_threshold=0.5 measures how far"),
    ({"importance_sampling_level": "sequence", "cliprange_high": 0.28},
     "algo.cliprange_high=0.28 is not used with importance_sampling_level=sequence"),
    ({"policy_loss": "cispo", "cliprange": 0.3}, "algo.cliprange=0.3 is not used with policy_loss=cispo"),
    ({"policy_loss": "sapo", "delta": 4.0}, "algo.delta=4.0 is not used with policy_loss=sapo"),
    ({"async_draws": 2}, r"algo.async_draws=2: at most algo.max_staleness \+ 1 .* set algo.max_staleness or drop it"),
    ({"async_draws": 3, "max_staleness": 1}, r"max_staleness=1; only 2 draw"),
    ({"max_staleness": 1, "async_correction": "behaviour", "rollout_is_cap": 3.0},
     r"algo.rollout_is_cap=3.0 weights the behaviour ratio of async_correction=decoupled"),
    ({"max_staleness": 5, "rl_steps": 3}, r"algo.max_staleness=5 is not below the run's 3 RL steps"),
    ({"policy_loss": "vespo", "cliprange": 0.3}, r"algo.cliprange=0.3 is not used with policy_loss=vespo, which "
                                                 r"bounds its update with its sequence weight"),
    ({"policy_loss": "vespo", "importance_sampling_level": "sequence"},
     r"algo.importance_sampling_level=sequence is not used with policy_loss=vespo"),
    ({"entropy_coef": 0.01, "entropy_target": 0.5}, r"algo.entropy_target=0.5 steers the adaptive entropy "
                                                    r"coefficient, and algo.use_adaptive_entropy is off"),
])
def test_a_setting_the_combination_leaves_idle_is_said_once(settings, said):
    from lit_rlhf import GRPOModule
    from lit_rlhf.config.validation import _warned

    _warned.clear()
    with pytest.warns(UserWarning, match=said):
        GRPOModule(model={"name_or_path": "m"}, reward=None, **settings)


def test_luspo_with_a_token_level_ratio_is_said_once_as_trl_warns():
    import warnings

    from lit_rlhf import GRPOModule
    from lit_rlhf.config.validation import _warned

    _warned.clear()
    with pytest.warns(UserWarning, match=r"^algo.loss_type=luspo scales GSPO's sequence loss by the sequence's "
                                         r"length; .* set algo.importance_sampling_level=sequence.$"):
        GRPOModule(model={"name_or_path": "m"}, reward=None, loss_type="luspo")
    _warned.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GRPOModule(model={"name_or_path": "m"}, reward=None, loss_type="luspo", importance_sampling_level="sequence")


@pytest.mark.parametrize("trl_name, ours", [("cispo", "algo.policy_loss=cispo algo.loss_type=dapo"),
                                             ("sapo", "algo.policy_loss=sapo algo.loss_type=grpo"),
                                             ("vespo", "algo.policy_loss=vespo algo.loss_type=dapo")])
def test_trls_policy_loss_types_name_the_two_settings_they_are_here(trl_name, ours):
    from lit_rlhf.config import GRPOConfig, build

    with pytest.raises(ConfigError, match=rf"^algo.loss_type={trl_name}: TRL's loss_type={trl_name} is {ours} here"):
        build(GRPOConfig, {"loss_type": trl_name}, "algo")


def test_vespo_refuses_a_sequence_level_engine_correction_it_cannot_fold():
    from lit_rlhf.config import GRPOConfig, build

    with pytest.raises(ConfigError, match=r"^algo.rollout_is_mode=sequence_truncate with policy_loss=vespo: VESPO "
                                          r"folds the engine's per-token ratios"):
        build(GRPOConfig, {"policy_loss": "vespo", "rollout_is_mode": "sequence_truncate"}, "algo")
    build(GRPOConfig, {"policy_loss": "vespo", "rollout_is_mode": "sequence_truncate", "rollout_is_cap": None},
          "algo")  # no correction, nothing to fold


@pytest.mark.parametrize("settings, said", [
    ({"beta": 1.0}, r"algo.beta=1.0 chooses the full-vocabulary divergence of algo.divergence=generalized_jsd, and "
                    r"divergence=sampled_token: it does nothing"),
    ({"divergence": "generalized_jsd", "iw_opd_gamma": 0.5},
     r"algo.iw_opd_gamma=0.5 weights the sampled-token advantages, and algo.divergence=generalized_jsd has none"),
])
def test_a_distillation_setting_the_divergence_leaves_idle_is_said_once(settings, said):
    from lit_rlhf import DistillationModule
    from lit_rlhf.config.validation import _warned

    _warned.clear()
    with pytest.warns(UserWarning, match=said):
        DistillationModule(model={"name_or_path": "m"}, reward=None, **settings)


@pytest.mark.parametrize("algo, settings, said", [
    ("PPOModule", {"critic_model_path": "rm"}, r"algo.critic_model_path='rm' is the critic of algo.critic="
                                                r"reward_model, and algo.critic=shared: it is not loaded"),
    ("GRPOModule", {"overlong_penalty_factor": 2.0}, r"algo.overlong_penalty_factor=2.0 scales the overlong penalty, "
                                                     r"and algo.overlong_buffer is null \(off\): it does nothing"),
    ("GRPOModule", {"kl_in": "reward", "kl_estimator": "k1", "use_bias_correction_kl": False},
     r"algo.use_bias_correction_kl=False weighs the KL term of the loss, and algo.kl_in=reward charges the KL in the "
     r"reward: it does nothing"),
])
def test_a_setting_of_a_mechanism_that_is_off_is_said_once(algo, settings, said):
    import lit_rlhf
    from lit_rlhf.config.validation import _warned

    _warned.clear()
    with pytest.warns(UserWarning, match=said):
        getattr(lit_rlhf, algo)(model={"name_or_path": "m"}, reward=None, **settings)


def test_an_experiments_teacher_under_another_algo_is_said_once():
    import warnings

    from lit_rlhf.cli.checks import teacher_without_distillation
    from lit_rlhf.config.validation import _warned

    _warned.clear()
    with pytest.warns(UserWarning, match=r"^teacher.name_or_path is set, but GRPOModule trains without a teacher "
                                         r"\(algo=distill distills from one\): it is not loaded; use algo=distill"):
        teacher_without_distillation(compose_train("experiment=calculator_distill", "algo=grpo"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        teacher_without_distillation(compose_train("experiment=calculator_distill"))
        teacher_without_distillation(compose_train("algo=grpo"))


def test_settings_that_act_are_not_said():
    import warnings

    from lit_rlhf import GRPOModule, PPOModule
    from lit_rlhf.config.validation import _warned

    _warned.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GRPOModule(model={"name_or_path": "m"}, reward=None, off_policy_mask_threshold=0.5, num_iterations=2,
                   importance_sampling_level="sequence", policy_loss="cispo", cispo_cap=4.0)
        GRPOModule(model={"name_or_path": "m"}, reward=None, use_adaptive_entropy=True, entropy_target=0.5,
                   entropy_coef_max=0.1)
        # switched off: with rollout=hf there is nothing to correct, and that is what the user asked for
        GRPOModule(model={"name_or_path": "m"}, reward=None, rollout_is_cap=None)
        GRPOModule(model={"name_or_path": "m"}, reward=None, max_staleness=1, async_correction="behaviour",
                   rollout_is_cap=None)
        GRPOModule(model={"name_or_path": "m"}, reward=None, overlong_buffer=4, overlong_penalty_factor=2.0,
                   use_bias_correction_kl=False)
        PPOModule(model={"name_or_path": "m"}, reward=None, critic="reward_model", critic_model_path="rm")


def test_a_static_cache_length_without_a_compiled_step_is_said_once():
    from lit_rlhf.config.validation import _warned
    from lit_rlhf.rollout import HFEngine

    _warned.clear()
    with pytest.warns(UserWarning, match=r"rollout.static_cache_length=128 does nothing without rollout.compile_mode"):
        HFEngine(static_cache_length=128, compile_mode=None)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        HFEngine(static_cache_length=128, compile_mode=None)  # said once
        HFEngine(static_cache_length=128, compile_mode="default")  # used: nothing to say


def vllm_engine(**settings):
    from lit_rlhf.rollout import VLLMEngine  # vLLM need not be installed: nothing starts until setup

    return VLLMEngine(**settings)


def fsdp2_strategy(**settings):
    from lit_rlhf.distributed.strategy import FSDP2Strategy

    return FSDP2Strategy(**settings)


@pytest.mark.parametrize("make, settings, expected", [
    (vllm_engine, {"kv_cache_gib": "abc"}, "rollout.kv_cache_gib='abc' must be a finite number > 0 (or null)"),
    (vllm_engine, {"gpu_memory_utilization": 1.5},
     "rollout.gpu_memory_utilization=1.5 must be a finite number > 0 and <= 1"),
    (vllm_engine, {"max_model_len": 100.5}, "rollout.max_model_len=100.5 must be a whole number >= 1 (or null)"),
    (vllm_engine, {"sleep": "abc"}, "rollout.sleep='abc' must be true or false"),
    (fsdp2_strategy, {"sharded_sampling": "abc"}, "trainer.strategy.sharded_sampling='abc' must be true or false"),
], ids=["kv_cache_gib", "gpu_memory_utilization", "max_model_len", "sleep", "sharded_sampling"])
def test_engine_and_strategy_settings_are_type_checked(make, settings, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        make(**settings)


def test_a_model_dtype_that_is_no_choice_lists_the_choices_and_the_nearest():
    from lit_rlhf.config import ModelConfig

    with pytest.raises(ConfigError) as err:  # the tuple's repr was printed: ('float32', 'bfloat16', ...)
        ModelConfig(name_or_path="x", dtype="bf16")
    assert str(err.value) == ("model.dtype='bf16' is not one of float32, bfloat16, float16, auto (did you mean "
                              "'bfloat16'?).")


def test_help_of_each_module_lists_the_settings_its_keyword_arguments_take():
    """help(RLOOModule) names every field of RLOOConfig with its default: **settings is not a dead end."""
    from dataclasses import fields

    from lit_rlhf import GRPOModule, PPOModule, ReinforcePPModule, RLOOModule
    from lit_rlhf.config.docs import default_of, render_default

    for module in (RLOOModule, PPOModule, GRPOModule, ReinforcePPModule):
        doc = module.__doc__
        assert f"the fields of {module.config_class.__name__}; on the command line algo.<name>" in doc, module
        for f in fields(module.config_class):
            assert f"\n    {f.name} = {render_default(default_of(f)).strip('`')}: " in doc, (module, f.name)
    assert "\n    rloo_k = 4: " in RLOOModule.__doc__ and "rloo_k" not in PPOModule.__doc__


def test_a_static_cache_length_under_auto_on_a_cpu_is_said_once(monkeypatch):
    """compile_mode=auto decodes with plain generate() on a CPU: the cache length set beside it is unused."""
    from lit_rlhf.config import validation
    from lit_rlhf.rollout import HFEngine

    monkeypatch.setattr(validation, "_warned", set())
    engine = HFEngine(static_cache_length=128)  # compile_mode: auto
    with pytest.warns(UserWarning, match=r"rollout.static_cache_length=128 does nothing here: rollout.compile_mode="
                                         r"auto decodes with plain generate\(\) on cpu"):
        assert engine.compiled_mode(torch.device("cpu")) is None


def test_peft_s_rslora_and_dora_are_lora_settings_on_the_command_line_and_in_python():
    cfg = compose_train("model.lora.use_dora=true", "model.lora.use_rslora=true")
    module = instantiate(cfg.algo, _convert_="all")
    assert module.hparams.model["lora"] == {"r": 16, "lora_alpha": 32, "lora_dropout": 0.0,
                                            "target_modules": "all-linear", "use_rslora": True, "use_dora": True}
    with pytest.raises(ConfigError, match=r"^model.lora.use_dora='yes' must be true or false.$"):
        RLOOModule(model={"name_or_path": "m", "lora": {"use_dora": "yes"}}, reward=None)


def test_dora_with_fsdp2_s_sharded_loading_is_refused_with_the_settings():
    from lit_rlhf.cli.hardware_checks import check_fsdp2_settings

    with pytest.raises(ConfigError, match=r"^model.lora.use_dora=true: .* set trainer.strategy.sharded_loading=false"):
        check_fsdp2_settings(compose_train("trainer=fsdp2", "model.lora.use_dora=true"))
    check_fsdp2_settings(compose_train("trainer=fsdp2", "model.lora.use_dora=true",
                                       "trainer.strategy.sharded_loading=false"))
    check_fsdp2_settings(compose_train("trainer=fsdp2"))


def test_a_models_name_alone_is_its_settings_and_a_loaded_model_is_one_line_asking_for_its_name(tiny_path):
    """model="<hub name or folder>" is {"name_or_path": it}; a model object (or one in name_or_path) is refused in one
    line naming where it was loaded from, not with its whole repr or an OSError about a file name."""
    from transformers import AutoModelForCausalLM

    from lit_rlhf.algos.dpo import DPOModule
    from lit_rlhf.config import model_config

    assert model_config(tiny_path) == model_config({"name_or_path": tiny_path})
    assert model_config(Path(tiny_path)) == model_config({"name_or_path": Path(tiny_path)}) == model_config(tiny_path)
    assert RLOOModule(model=tiny_path, reward=VaderSentiment()).hparams.model["name_or_path"] == tiny_path
    loaded = AutoModelForCausalLM.from_pretrained(tiny_path)
    expected = (f"is a GPTNeoXForCausalLM, not a name or a folder; pass the name or folder it was loaded from "
                f"({tiny_path!r}) (a model you changed: save_pretrained, then that folder).")
    for make, key in [(lambda: RLOOModule(model=loaded, reward=VaderSentiment()), "model"),
                      (lambda: DPOModule(model=loaded), "model"),
                      (lambda: RLOOModule(model={"name_or_path": loaded}, reward=VaderSentiment()),
                       "model.name_or_path"),
                      (lambda: model_config({"name_or_path": tiny_path, "reference_name_or_path": loaded}),
                       "model.reference_name_or_path")]:
        with pytest.raises(ConfigError) as err:
            make()
        assert str(err.value) == f"{key} {expected}"


def test_a_reward_or_optimizer_that_cannot_be_called_is_one_line_at_construction():
    """Python arguments where callables belong: a reward's name or a list of rewards, an optimizer already built
    (they failed at the first reward call with the HYDRA_FULL_ERROR hint, or in configure_optimizers with a bare
    TypeError). A module without a reward (as loaded to evaluate) is refused when a fit starts (below)."""
    import functools

    from lit_rlhf.config.validation import check_optimizer

    for reward, expected in [("vader", "reward='vader' is not callable; pass a function (prompts, completions, "),
                             ([VaderSentiment()], "reward=<a list> is not callable; pass several rewards: "
                                                  "lit_rlhf.rewards.WeightedSum("),
                             # a class is callable: the first reward call built one from the prompts (a TypeError)
                             (VaderSentiment, "reward=VaderSentiment is a class; pass an instance: "
                                              "reward=VaderSentiment(...).")]:
        with pytest.raises(ConfigError) as err:
            RLOOModule(model={"name_or_path": "m"}, reward=reward)
        assert str(err.value).startswith(expected), err.value
    built = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    with pytest.raises(ConfigError, match=r"^optimizer=AdamW\(\.\.\.\), an optimizer already built, is not a factory"):
        RLOOModule(model={"name_or_path": "m"}, reward=VaderSentiment(), optimizer=built)
    check_optimizer(functools.partial(torch.optim.AdamW, lr=1e-3))  # a factory passes
    check_optimizer(torch.optim.AdamW)


@pytest.mark.integration
def test_a_fit_of_a_module_without_a_reward_is_one_line_before_any_rollout():
    import lightning as L

    from tests.conftest import make_datamodule, make_rloo

    module = make_rloo(reward=None, rl_steps=1)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    with pytest.raises(ConfigError, match=r"^this module has no reward \(reward=None: built or loaded to evaluate"):
        trainer.fit(module, make_datamodule())
    assert module.rl_step == 0


@pytest.mark.parametrize("alpha", [0, -8, float("nan"), float("inf")])
def test_a_lora_alpha_that_is_no_positive_number_is_refused(alpha):
    """At 0 the update, scaled by lora_alpha / r, is 0: a run trained nothing, with its KL at 0 every step."""
    from lit_rlhf.config.model import LoraSettings

    with pytest.raises(ConfigError, match=rf"^model.lora.lora_alpha={re.escape(repr(alpha))} must be a finite number "
                                          r"> 0: the update is scaled by lora_alpha / r, and at 0 the adapters never "
                                          r"change the model \(default: 32, twice r=16\).$"):
        LoraSettings(lora_alpha=alpha)
    assert LoraSettings(lora_alpha=8.5).lora_alpha == 8.5  # peft takes a float


@pytest.mark.parametrize("config, field", [("RLOOConfig", "padding_free"), ("PPOConfig", "whiten_rewards"),
                                           ("GRPOConfig", "mask_truncated_completions"),
                                           ("DistillationConfig", "padding_free"),
                                           ("ModelConfig", "trust_remote_code")])
def test_every_true_or_false_setting_of_an_algorithm_takes_a_bool_only(config, field):
    """From Python, whiten_rewards="false" (and model trust_remote_code="false") was taken as true."""
    import functools

    import lit_rlhf.config

    make = getattr(lit_rlhf.config, config)
    prefix = "algo."
    if config == "ModelConfig":
        make, prefix = functools.partial(make, name_or_path="m"), "model."
    assert getattr(make(**{field: True}), field) is True
    with pytest.raises(ConfigError, match=rf"^{prefix}{field}='false' must be true or false.$"):
        make(**{field: "false"})
