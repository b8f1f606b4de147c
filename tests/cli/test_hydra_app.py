import csv

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from lit_rlhf.cli.resolvers import register_resolvers
from tests.apps import ROOT, run_app
from tests.helpers import FAST

TRL_RLOO_METRICS = {
    "objective/kl", "objective/entropy", "objective/non_score_reward", "objective/rlhf_reward", "objective/scores",
    "policy/approxkl_avg", "policy/clipfrac_avg", "loss/policy_avg", "policy/entropy_avg", "val/ratio",
    "val/ratio_var", "val/num_eos_tokens", "lr", "episode", "eps",
}


def compose_train(*overrides, tmp_path):
    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        return compose("train", overrides=[f"paths.root_dir={tmp_path}", f"paths.output_dir={tmp_path}", *overrides])


@pytest.mark.parametrize("algo", ["rloo", "ppo"])
@pytest.mark.parametrize("model", sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml")))
def test_every_model_composes_with_every_algo_and_instantiates_without_weights(algo, model, tmp_path):
    name = ["model.name_or_path=gpt2"] if model == "causal_lm" else []
    cfg = compose_train(f"algo={algo}", f"model={model}", *name, tmp_path=tmp_path)
    module = instantiate(cfg.algo, _convert_="all")
    assert module.policy is None  # weights load in configure_model, not here
    assert module.hparams.model["name_or_path"] == cfg.model.name_or_path
    datamodule = instantiate(cfg.data)
    assert datamodule.hparams.tokenizer == cfg.model.name_or_path
    trainer = instantiate(cfg.trainer, logger=False)
    assert trainer.max_steps == -1 and module.hparams.rl_steps == cfg.steps  # RL steps are the unit


@pytest.mark.parametrize("algo", ["rloo", "ppo"])
def test_pythia_1b_composes_a_real_config(algo, tmp_path):
    cfg = compose_train(f"algo={algo}", "model=pythia-1b", "reward=reward_model", "data=tldr", tmp_path=tmp_path)
    assert cfg.model.name_or_path == "EleutherAI/pythia-1b" and cfg.model.dtype == "bfloat16"
    assert cfg.model.lora.target_modules == "all-linear"
    reward = instantiate(cfg.reward)
    assert reward.model is None and reward.name_or_path.startswith("cleanrl/")
    assert cfg.data.dataset == "trl-internal-testing/tldr-preference-sft-trl-style"


def run_train(*overrides, tmp_path):
    return run_app("train.py", f"hydra.run.dir={tmp_path}", *overrides, cwd=ROOT)


@pytest.mark.integration
def test_train_py_runs_logs_trl_metrics_and_prints_a_summary(tmp_path):
    result = run_train("steps=3", "trainer.val_check_interval=3", "data.num_eval_prompts=4",
                       "algo.response_length=12", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert TRL_RLOO_METRICS <= set(rows[0])
    assert [float(r["episode"]) for r in rows if r["episode"]] == [32.0, 64.0, 96.0]
    assert "Held-out prompts (same sampling seed)" in result.stdout
    assert f"Run directory: {tmp_path}" in result.stdout
    assert (tmp_path / "checkpoints" / "last.ckpt").exists()
    assert f"  checkpoints: {tmp_path / 'checkpoints'}" in result.stdout


@pytest.mark.integration
def test_a_run_that_saves_no_checkpoint_names_no_checkpoints_folder(tmp_path):
    """callbacks.model_checkpoint.save_last=false (save_top_k=0: no step checkpoints either): the run's list of where
    everything went named a checkpoints folder that was never created."""
    result = run_app("train.py", *FAST, "hydra.run.dir=run", "callbacks.model_checkpoint.save_last=false",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Run directory: " in result.stdout and "checkpoints:" not in result.stdout
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.integration
@pytest.mark.parametrize("override, expected", [
    ("algo.rloo_k=1", "error: algo.rloo_k=1"),
    ("data.batch_size=0", "error: data.batch_size=0"),
    ("model=pythia-14m", "error: tokenizer 'EleutherAI/pythia-14m' is not available here"),
    ("model=causal_lm", "error: data.tokenizer is required"),
])
def test_user_mistakes_end_with_one_line_and_no_traceback(override, expected, tmp_path):
    result = run_train(override, "steps=1", tmp_path=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(expected), result.stderr[-2000:]
    if "not available here" in expected:  # the key typed (model=pythia-14m sets it), not data.tokenizer's copy of it
        assert line.endswith("or point model.name_or_path at a local directory."), line


@pytest.mark.parametrize("app", ["train", "evaluate", "train_dpo", "train_kto", "train_sft", "train_reward_model"])
def test_every_app_s_log_file_is_created_when_written_and_hydra_s_choices_replace_it(app):
    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        handlers = compose(app, return_hydra_config=True).hydra.job_logging.handlers
        stdout = compose(app, overrides=["hydra/job_logging=stdout"], return_hydra_config=True).hydra.job_logging
    assert handlers.file["class"] == "logging.FileHandler" and handlers.file.delay is True  # never an empty one
    assert list(stdout.handlers) == ["console"]  # whole, not with the file handler's setting laid over it


@pytest.mark.integration
@pytest.mark.parametrize("choice", ["disabled", "stdout"])
def test_hydra_s_own_job_logging_choices_run(choice, tmp_path):
    """`hydra/job_logging=disabled`, which Hydra's --hydra-help suggests, and `stdout` were refused ("Unable to
    configure handler 'file'"): the apps' setting for their log file was laid over whichever choice was made."""
    result = run_app("train.py", *FAST, f"hydra/job_logging={choice}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [run.name for run in (tmp_path / "logs" / "train" / "runs").iterdir()]
    assert not list((tmp_path / "logs").rglob("*.log"))  # neither choice writes one


@pytest.mark.parametrize("overrides", [
    ["+algo.lr_scheduler._target_=torch.optim.lr_scheduler.CosineAnnealingLR", "+algo.lr_scheduler.T_max=10"],
    ["algo.lr_scheduler={_target_: torch.optim.lr_scheduler.CosineAnnealingLR, T_max: 10}"],
], ids=["plus keys", "a whole scheduler"])
def test_a_scheduler_typed_without_partial_is_the_function_the_module_calls(overrides, tmp_path):
    import torch

    from lit_rlhf.cli.checks import built_by_the_module

    cfg = compose_train(*overrides, tmp_path=tmp_path)
    built_by_the_module(cfg)
    module = instantiate(cfg.algo, _convert_="all")  # without the check: CosineAnnealingLR() misses its optimizer
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = module.lr_scheduler_factory(optimizer)
    assert isinstance(scheduler, torch.optim.lr_scheduler.CosineAnnealingLR) and scheduler.T_max == 10


def test_a_factory_typed_as_not_partial_is_one_line(tmp_path):
    from lit_rlhf.cli.checks import built_by_the_module
    from lit_rlhf.errors import ConfigError

    cfg = compose_train("algo.optimizer._partial_=false", tmp_path=tmp_path)
    with pytest.raises(ConfigError, match=r"^algo.optimizer._partial_=False: the module builds the optimizer itself, "
                                          r"with the model's parameters; remove algo.optimizer._partial_ \(it is "
                                          r"true\).$"):
        built_by_the_module(cfg)


@pytest.mark.parametrize("overrides, typed", [
    (["algo.lr_scheduler=cosine"], "algo.lr_scheduler='cosine'"),  # TRL's lr_scheduler_type
    (["+algo.lr_scheduler.T_max=10"], "algo.lr_scheduler without a _target_"),
])
def test_a_scheduler_named_or_typed_without_its_class_is_one_line(overrides, typed, tmp_path):
    """algo.lr_scheduler=cosine ended the run in a traceback after the model loaded: "'str' object is not callable"."""
    from lit_rlhf.cli.checks import built_by_the_module
    from lit_rlhf.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        built_by_the_module(compose_train(*overrides, tmp_path=tmp_path))
    assert str(refused.value) == (
        f"{typed}: algo.lr_scheduler names the class of the lr scheduler, with its arguments, which the module builds "
        f"with the optimizer; e.g. +algo.lr_scheduler._target_=torch.optim.lr_scheduler.CosineAnnealingLR "
        f"+algo.lr_scheduler.T_max=150 (null: none).")
    with pytest.raises(ConfigError, match=r"^algo.optimizer='adam': algo.optimizer names the class of the optimizer"):
        built_by_the_module(compose_train("algo.optimizer=adam", tmp_path=tmp_path))
    built_by_the_module(compose_train("algo.optimizer=null", tmp_path=tmp_path))  # the module's default
