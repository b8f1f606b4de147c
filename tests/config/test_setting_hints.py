"""An unknown key on the command line: the one line suggests the setting the user most likely meant, whether it is
a near spelling beside it or the same name at another level (`lr` -> algo.optimizer.lr), and stays short."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from lit_rlhf.cli.composition import setting_hint

CONF = Path(__file__).resolve().parents[2] / "lit_rlhf" / "conf"
CONFIG = OmegaConf.create({
    "seed": 0,
    "algo": {"kl_coef": 0.05, "kl_estimator": "k1", "lr_scheduler": None, "rloo_k": 4,
             "optimizer": {"_target_": "torch.optim.AdamW", "lr": 1e-3, "weight_decay": 0.0},
             **{f"setting_{i}": i for i in range(20)}},
    "dpo": {"beta": 0.1, "model": None},
    "data": {"batch_size": 4},
})


def test_a_near_spelling_beside_it_comes_first():
    assert setting_hint("algo.kl_coeff", CONFIG) == " (did you mean 'kl_coef'?)"
    assert setting_hint("algo.num_generations", CONFIG) == " (did you mean 'rloo_k'? this algorithm's name for it)"


def test_the_same_name_at_another_level_is_named_in_full():
    assert setting_hint("lr", CONFIG) == " (did you mean 'algo.optimizer.lr'?)"
    assert setting_hint("algo.lr", CONFIG) == " (did you mean 'algo.optimizer.lr'?)"  # before lr_scheduler
    assert setting_hint("batchsize", CONFIG) == " (did you mean 'data.batch_size'?)"


def test_a_prefix_lists_the_keys_it_begins_and_nothing_close_stays_short():
    assert setting_hint("algo.kl", CONFIG) == " (did you mean 'kl_coef' or 'kl_estimator'?)"
    assert setting_hint("dpo.margin_scale", CONFIG) == " (valid keys: beta, model)"
    assert setting_hint("algo.xyz", CONFIG) == " (no setting of that name under algo)"
    assert setting_hint("algo.xyz", None) == ""


def test_a_trl_name_points_to_the_key_that_sets_it_here():
    assert setting_hint("algo.learning_rate", CONFIG) == " (TRL's learning_rate is algo.optimizer.lr here)"
    assert setting_hint("algo.per_device_train_batch_size", CONFIG) == (
        " (TRL's per_device_train_batch_size is data.batch_size here: the prompts (or rows) of a step over all ranks)")
    assert setting_hint("use_vllm", CONFIG) == " (TRL's use_vllm is rollout=vllm here)"
    assert setting_hint("reward_weights", CONFIG) == " (TRL's reward_weights is +reward.weights.<name>=<weight> here)"
    assert setting_hint("num_train_epochs", OmegaConf.create({"steps": 10})) == (
        " (TRL's num_train_epochs is steps here: RL steps)")
    in_sft = OmegaConf.create({"epochs": 1})
    assert setting_hint("num_train_epochs", in_sft) == " (TRL's num_train_epochs is epochs here)"
    assert setting_hint("algo.epsilon", CONFIG) == " (no setting of that name under algo)"  # no cliprange in this one
    assert setting_hint("gradient_accumulation_steps", OmegaConf.create({"algo": {"gradient_accumulation_steps": 1}})) \
        == " (TRL's gradient_accumulation_steps is algo.gradient_accumulation_steps here)"
    assert setting_hint("gradient_accumulation_steps", in_sft) == (
        " (TRL's gradient_accumulation_steps is +trainer.accumulate_grad_batches=<N> here)")


def test_trls_trainer_names_a_near_spelling_would_misread():
    cfg = OmegaConf.create({"steps": 10, "trainer": {"val_check_interval": 10}, "algo": {"num_ppo_epochs": 1}})
    assert setting_hint("eval_steps", cfg) == (  # not 'steps'
        " (TRL's eval_steps is trainer.val_check_interval here: RL steps between held-out evaluations)")
    assert setting_hint("num_iterations", cfg) == " (TRL's num_iterations is algo.num_ppo_epochs here)"
    grpo = OmegaConf.create({"algo": {"num_iterations": None, "num_ppo_epochs": 1}})
    assert setting_hint("num_iterations", grpo) == " (TRL's num_iterations is algo.num_iterations here)"
    assert setting_hint("optim", cfg) == " (TRL's optim is algo.optimizer._target_=torch.optim.<class> here)"


def test_trls_sft_names_say_how_train_sft_trains():
    sft = OmegaConf.create({"data": {"max_length": 256, "max_prompt_length": 128}, "algo": {"optimizer": None}})
    assert setting_hint("data.max_seq_length", sft) == " (TRL's max_seq_length is data.max_length here)"
    assert setting_hint("algo.assistant_only_loss", sft) == " (TRL's assistant_only_loss is always on here)"
    assert setting_hint("data.dataset_text_field", sft) == " (TRL's dataset_text_field is fixed to text here)"


def test_train_pys_steps_typed_to_a_fitting_script_names_what_counts_its_length():
    fit = OmegaConf.create({"epochs": 1, "trainer": {"max_steps": -1}})
    assert setting_hint("steps", fit) == (
        " (this script counts epochs: epochs=N, or optimizer steps: trainer.max_steps=N)")
    # under algo: not the top-level count a train.py user types
    assert setting_hint("algo.steps", OmegaConf.create({"epochs": 1, "trainer": {"max_steps": -1}, "algo": {}})) == (
        " (no setting of that name under algo)")
    assert setting_hint("steps", OmegaConf.create({"epochs": 1})) == " (valid keys: epochs)"


def test_a_trl_name_comes_before_a_near_spelling_it_does_not_mean():
    near = OmegaConf.create({"steps": 10, "algo": {"max_staleness": None}, "data": {"batch_size": 8,
                                                                                     "eval_batch_size": 16}})
    assert setting_hint("algo.max_steps", near) == " (TRL's max_steps is steps here: RL steps)"  # not max_staleness
    assert setting_hint("data.per_device_train_batch_size", near).startswith(
        " (TRL's per_device_train_batch_size is data.batch_size here")  # not eval_batch_size


def test_a_trl_name_given_in_python_names_the_argument_that_takes_it():
    from lit_rlhf.config import DataConfig, RLOOConfig
    from lit_rlhf.config.settings import build
    from lit_rlhf.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        build(RLOOConfig, {"learning_rate": 1e-5}, "algo")
    assert str(err.value) == ("algo.learning_rate is not a setting of RLOOConfig (TRL's learning_rate is "
                              "optimizer=functools.partial(torch.optim.AdamW, lr=...) here).")
    with pytest.raises(ConfigError) as err:
        build(DataConfig, {"per_device_train_batch_size": 8}, "data")
    assert str(err.value) == ("data.per_device_train_batch_size is not a setting of DataConfig (TRL's "
                              "per_device_train_batch_size is PromptDataModule(batch_size=...) here: the prompts of a "
                              "step over all ranks).")


@pytest.mark.parametrize(("override", "line"), [
    ("+algo.learning_rate=1e-5", "algo.learning_rate is not a setting of RLOOConfig (TRL's learning_rate is "
                                 "algo.optimizer.lr here)."),
    ("+data.max_completion_length=8", "data.max_completion_length is not a setting of DataConfig (TRL's "
                                      "max_completion_length is algo.response_length here)."),
    ("+algo.kl_coeff=0.1", "algo.kl_coeff is not a setting of RLOOConfig (did you mean 'kl_coef'?)."),
])
def test_a_key_added_with_a_plus_gets_the_command_line_hint_before_anything_is_built(override, line):
    from lit_rlhf.cli.checks import check_component_settings
    from lit_rlhf.cli.composition import composed
    from lit_rlhf.cli.configs import register_configs
    from lit_rlhf.cli.resolvers import register_resolvers
    from lit_rlhf.errors import ConfigError

    register_configs()
    register_resolvers()  # ${asset:...}, as in the app
    cfg = composed(CONF, "train", [override])
    with pytest.raises(ConfigError) as err:
        check_component_settings(cfg)
    assert str(err.value) == line


def composition_line(*overrides: str) -> str:
    """The one line train.py prints for these command-line overrides (Hydra's composition error, explained)."""

    from lit_rlhf.cli.composition import composed, composition_error
    from lit_rlhf.cli.configs import register_configs

    register_configs()
    err = composed(CONF, "train", list(overrides))
    if not isinstance(err, BaseException):
        pytest.fail(f"{overrides} composed")
    return composition_error(err, CONF, "train", list(overrides))


def test_several_unknown_keys_are_named_in_one_line_each_with_its_hint():
    """Each unknown key's hint comes from the config composed without all of them (with one left in, there was none
    for the first), and the line names every one, so one run shows what to fix."""
    assert composition_line("algo.lr=1e-5", "algo=ppo", "algo.kl=0.1", "seeed=1") == (
        "algo.lr is not a setting (did you mean 'algo.optimizer.lr'?); nor is algo.kl (did you mean 'kl_coef' or "
        "'kl_estimator' or 'kl_controller'?); nor is seeed (did you mean 'seed'?); see `python train.py --cfg job` for "
        "every key.")
    assert composition_line("trainer.gradient_clip_val=1", "trainer.accumulate_grad_batches=2") == (
        "trainer.gradient_clip_val is not a setting (the RL modules do this in their own update: set "
        "algo.max_grad_norm instead); nor is trainer.accumulate_grad_batches (the RL modules do this in their own "
        "update: set algo.gradient_accumulation_steps instead); see `python train.py --cfg job` for every key.")


def test_a_value_of_the_wrong_type_beside_an_unknown_key_leaves_its_hint():
    assert composition_line("algo.kl_coeff=0.1", "data.batch_size=x") == (
        "algo.kl_coeff is not a setting (did you mean 'kl_coef'?); see `python train.py --cfg job` for every key.")
    assert composition_line("data.batch_size=x", "algo.kl_coeff=0.1") == "data.batch_size='x' must be of type integer."
    assert composition_line("algo.padding_free=x") == "algo.padding_free='x' must be true or false."


def test_a_trl_name_added_to_the_trainer_with_a_plus_names_its_key_before_anything_is_built():
    from lit_rlhf.cli.trainer_arguments import check_trainer_arguments
    from lit_rlhf.errors import ConfigError

    cfg = OmegaConf.create({"trainer": {"_target_": "lightning.Trainer", "val_check_interval": 10, "eval_steps": 5},
                            "algo": {"optimizer": {"lr": 1e-3}}})
    with pytest.raises(ConfigError, match=r"^trainer.eval_steps is not an argument of Trainer \(TRL's eval_steps is "
                                          r"trainer.val_check_interval here: RL steps between held-out evaluations\); "
                                          r"remove it.$"):
        check_trainer_arguments(cfg)
    cfg.trainer.pop("eval_steps")
    cfg.trainer.deterministic = True  # a Lightning argument the group does not list
    cfg.trainer.foo = 1  # not TRL's: Lightning's TypeError names it, with the nearest argument
    check_trainer_arguments(cfg)


@pytest.mark.parametrize(("overrides", "hint"), [
    (["algo=grpo", "algo.top_p=0.9"],
     "(TRL's top_p is +algo.generation_kwargs.top_p=<value> algo.allow_biased_sampling=true here)"),
    (["algo=grpo", "algo.vllm_importance_sampling_mode=token_mask"],
     "(TRL's vllm_importance_sampling_mode is algo.rollout_is_mode here)"),
    (["algo=grpo", "algo.vllm_gpu_memory_utilization=0.5"],
     "(TRL's vllm_gpu_memory_utilization is rollout=vllm rollout.gpu_memory_utilization=<fraction> here)"),
    (["algo=grpo", "algo.disable_dropout=true"], "(TRL's disable_dropout has no equivalent here: sampling and the "
                                                 "old logprobs run without dropout"),
    (["algo=grpo", "sync_ref_model=true"], "(TRL's sync_ref_model is algo.sync_ref_model here)"),
    # algo=grpo and algo=ppo have the key; under RLOO the line says so rather than "no setting of that name"
    (["algo=rloo", "algo.entropy_coef=0.01"], "(TRL's entropy_coef has no equivalent here: algo=grpo and algo=ppo "
                                              "have algo.entropy_coef; the other algorithms add no entropy term)"),
    (["algo=ppo", "algo.use_adaptive_entropy=true"], "(TRL's use_adaptive_entropy has no equivalent here: "
                                                     "algo=grpo has it (adaptive entropy control)"),
    # typed without algo.: the algorithm that has it is pointed to its key, one that does not says so
    (["algo=grpo", "use_adaptive_entropy=true"], "(TRL's use_adaptive_entropy is algo.use_adaptive_entropy here)"),
    (["algo=rloo", "vespo_k_pos=2"], "(TRL's vespo_k_pos is algo.vespo_k_pos here)"),
    (["algo=ppo", "multi_objective_aggregation=normalize_then_sum"],
     "(TRL's multi_objective_aggregation has no equivalent here: algo=grpo has it;"),
    # PPOConfig's and TrainingArguments' model and reward names
    (["algo=ppo", "algo.sft_model_path=/m"], "(TRL's sft_model_path is model.name_or_path here)"),
    (["algo=ppo", "algo.local_rollout_forward_batch_size=8"],
     "(TRL's local_rollout_forward_batch_size is algo.forward_batch_size here)"),
    (["algo=grpo", "algo.trust_remote_code=true"], "(TRL's trust_remote_code is model.trust_remote_code=true (and "
                                                   "data.trust_remote_code=true"),  # not 'did you mean data.'
    # RLOOConfig's and the distillation trainers'
    (["algo=rloo", "algo.multi_objective_aggregation=normalize_then_sum"],
     "(TRL's multi_objective_aggregation has no equivalent here: algo=grpo has it; the other algorithms train on"),
    (["algo=ppo", "algo.mask_truncated_completions=true"],
     "(TRL's mask_truncated_completions has no equivalent here: algo=grpo and algo=rloo have it;"),
    (["algo=rloo", "algo.reward_clip_range=[-5,5]"], "(TRL's reward_clip_range has no equivalent here: scores are "
                                                     "not clipped as they are"),  # not 'did you mean cliprange'
    (["algo=distill", "algo.log_completions_steps=10"],
     "(TRL's log_completions_steps is callbacks.generation_samples.every_n_steps=<steps> here)"),
    (["algo=distill", "algo.teacher_model_revision=main"], "(TRL's teacher_model_revision has no equivalent here: a "
                                                           "Hub name is read at the revision the local cache holds"),
    (["algo=distill", "algo.teacher_model_name_or_path=/t"],
     "(TRL's teacher_model_name_or_path is teacher.name_or_path here)"),  # a required (???) key is found
    (["algo.teacher_model_name_or_path=/t"], "(TRL's teacher_model_name_or_path has no equivalent here: in this run: "
                                             "a teacher is algo=distill's"),
    (["algo=distill", "algo.lmbda=0.5"], "(TRL's lmbda has no equivalent here: algo=distill samples every sequence "
                                         "from the student (GKD's lmbda = 1))"),
    # TrainingArguments' and SFTConfig's: every field of TRL's configs is a setting or answered
    (["algo=grpo", "algo.use_liger_kernel=true"], "(TRL's use_liger_kernel has no equivalent here: the logprobs "
                                                  "come from the last hidden states in chunks"),
    (["algo=grpo", "algo.lr_scheduler_kwargs={}"], "(TRL's lr_scheduler_kwargs has no equivalent here: "
                                                   "algo.lr_scheduler={...} takes the scheduler with its arguments)"),
    (["data.chat_template_path=t.jinja"], "(TRL's chat_template_path has no equivalent here: chat messages are "
                                          "rendered with the tokenizer's own template"),
])
def test_grpoconfigs_other_names_say_where_they_are_set_or_that_they_have_no_equivalent(overrides, hint):
    line = composition_line(*overrides)
    assert line.startswith(f"{overrides[-1].partition('=')[0]} is not a setting {hint}"), line


def test_trls_sampling_and_reference_names_in_python():
    from lit_rlhf.config import GRPOConfig
    from lit_rlhf.config.settings import build
    from lit_rlhf.errors import ConfigError

    with pytest.raises(ConfigError, match=r"TRL's top_p is generation_kwargs=\{'top_p': ...\} with "
                                          r"allow_biased_sampling=True here"):
        build(GRPOConfig, {"top_p": 0.9}, "algo")
    with pytest.raises(ConfigError, match="TRL's disable_dropout has no equivalent here"):
        build(GRPOConfig, {"disable_dropout": True}, "algo")


def test_a_key_under_a_group_left_none_says_to_choose_an_option_first():
    assert composition_line("env.max_turns=3") == (
        "env.max_turns is not a setting (env is none in this run, with no keys to set; choose one first: "
        "env=calculator|calculator_no_tool, then env.max_turns=...); see `python train.py --cfg job` for every key.")
    # not 'did you mean model.name_or_path': the teacher is distillation's
    assert composition_line("teacher.name_or_path=/models/big") == (
        "teacher.name_or_path is not a setting (a teacher is algo=distill's, and this run has none: algo=distill "
        "teacher.name_or_path=...); see `python train.py --cfg job` for every key.")


def test_a_key_new_to_an_open_mapping_is_told_its_plus():
    assert composition_line("algo.generation_kwargs.top_p=0.9").startswith(
        "algo.generation_kwargs.top_p is not a setting (algo.generation_kwargs takes keys it does not have yet with a "
        "+: +algo.generation_kwargs.top_p=<value>)")


def test_dpoconfigs_names_point_to_train_dpo_s_keys():
    dpo = OmegaConf.create({"data": {"max_length": 256}, "algo": {"beta": 0.1, "ld_alpha": None}})
    assert setting_hint("max_length", dpo) == " (TRL's max_length is data.max_length here)"
    assert setting_hint("ld_alpha", dpo) == " (TRL's ld_alpha is algo.ld_alpha here)"
    assert setting_hint("algo.ld_alpha", CONFIG) == (  # train.py's algorithms have none
        " (TRL's ld_alpha has no equivalent here: train_dpo.py has it (algo.ld_alpha))")
    assert setting_hint("truncation_mode", dpo).startswith(" (TRL's truncation_mode has no equivalent here: a prompt "
                                                           "longer than data.max_prompt_length keeps its last tokens")


def test_a_group_option_with_nothing_near_lists_the_options():
    assert composition_line("reward=nope").startswith("reward=nope is not an option of reward (valid options: "
                                                      "arithmetic, arithmetic_correct, ")
