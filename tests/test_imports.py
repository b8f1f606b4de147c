"""`import lit_rlhf` imports what every run needs and nothing a run may not use: loggers, the Hydra app, datasets,
the VADER analyzer and math-verify load when a run uses them; a module of ours imported alone (as a vLLM engine's
process imports its worker) loads no more of lit_rlhf than it needs."""

import subprocess
import sys

import pytest

from tests.helpers import ROOT

OPTIONAL = ("wandb", "tensorboard", "tensorboardX", "vaderSentiment", "hydra", "datasets", "math_verify", "optuna")


@pytest.mark.integration
def test_import_lit_rlhf_loads_no_optional_library_and_the_engine_process_loads_no_lightning():
    """One process: first what a vLLM engine's process imports of ours (its worker), which needs no Lightning, then
    what a run imports."""
    code = ("import sys, lit_rlhf.rollout.vllm_process, lit_rlhf.rollout.vllm_worker; "
            "print('lightning' in sys.modules or 'transformers' in sys.modules); "
            "import lit_rlhf, lit_rlhf.callbacks, lit_rlhf.tasks.metrics; "
            f"print(','.join(m for m in {OPTIONAL!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["False", ""], result.stdout


def test_the_packages_names_load_on_first_use():
    import lit_rlhf
    import lit_rlhf.models
    import lit_rlhf.remote
    import lit_rlhf.rewards
    import lit_rlhf.rollout
    import lit_rlhf.step
    import lit_rlhf.teachers

    for package in (lit_rlhf, lit_rlhf.models, lit_rlhf.rollout, lit_rlhf.rewards, lit_rlhf.teachers, lit_rlhf.step,
                    lit_rlhf.remote):
        assert sorted(package.__all__) == sorted(package._EXPORTS)
        for name in package.__all__:
            assert getattr(package, name).__name__ == name


@pytest.mark.integration
def test_help_and_a_mistyped_setting_answer_without_importing_torch_lightning_or_transformers(tmp_path):
    """They answer in about a second: only Hydra composes (a run imports the rest once its config is composed)."""
    import os

    heavy = ("torch", "lightning", "transformers")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    for script, args in (("train.py", ["--help"]), ("train.py", ["algo.kl_cof=1"]), ("evaluate.py", ["algo.lrr=1"]),
                         ("train_sft.py", ["algo.lrr=1"]), ("train_dpo.py", ["--help"]),
                         ("-m lit_rlhf.serve", ["--help"]), ("-m lit_rlhf.serve", ["prot=1"])):
        command = script.split() if script.startswith("-m ") else [str(ROOT / script)]
        result = subprocess.run([sys.executable, "-X", "importtime", *command, *args], cwd=tmp_path,
                                env=env, capture_output=True, text=True)
        assert result.returncode in (0, 2), (script, args, result.stderr[-2000:])
        imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import ")}
        assert not imported & set(heavy), (script, args, sorted(imported & set(heavy)))


@pytest.mark.integration
def test_a_bad_setting_value_answers_before_lightning_is_imported(tmp_path):
    """train.py builds the data's, the algorithm's and the model's settings from the composed config before its
    imports: a bad value is the components' own line, exit code 2, and no run directory is left behind. None of
    these settings needs torch (the names of losses and estimators are lit_rlhf.choices')."""
    for args, line in (
            (["data.batch_size=0"], "error: data.batch_size=0 must be a whole number >= 1."),
            (["algo.kl_coef=-1"], "error: algo.kl_coef=-1.0 must be >= 0."),
            (["algo=grpo", "algo.loss_type=bnpo2"], "error: algo.loss_type='bnpo2' is not one of"),
            (["model.dtype=half"], "error: model.dtype='half' is not one of"),
            (["trainer=fsdp2", "algo=grpo", "model.lora=null", "algo.sync_ref_model=true"],
             "error: algo.sync_ref_model=true is not supported with trainer=fsdp2; use trainer=ddp")):
        assert_refused_before_imports("train.py", args, line, ("torch", "lightning", "transformers"), tmp_path)
    assert not (tmp_path / "logs").exists()  # nor logs/train/runs/, created for them


def assert_refused_before_imports(script: str, args: list[str], line: str, heavy: tuple[str, ...], cwd) -> None:
    """`python <script> args...` ends with exit code 2 and the error line `line`, having imported none of `heavy`."""
    import os

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / script), *args], cwd=cwd, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 2, result.stderr[-2000:]
    assert [x for x in result.stderr.splitlines() if x.startswith("error: ")][-1].startswith(line), (script, args)
    imported = {x.split("|")[-1].strip() for x in result.stderr.splitlines() if x.startswith("import ")}
    assert not imported & set(heavy), (script, args, sorted(imported & set(heavy)))


@pytest.mark.integration
def test_evaluate_and_the_scripts_that_fit_on_a_file_check_their_settings_before_lightning_is_imported(tmp_path):
    """evaluate.py, train_sft.py, train_dpo.py and train_reward_model.py check their own keys (and the model's
    settings) before their imports as train.py does: the same line, exit code 2, no run directory left behind."""
    for script, args, line in (
            ("evaluate.py", ["confidence=2"], "error: confidence=2 must be a number between 0 and 1"),
            ("evaluate.py", ["ckpt_path=a.ckpt", "policy_path=b"], "error: give ckpt_path or policy_path, not both."),
            ("train_sft.py", ["epochs=0"], "error: epochs=0 must be a whole number >= 1."),
            ("train_dpo.py", ["model.dtype=half"], "error: model.dtype='half' is not one of"),
            ("train_reward_model.py", ["epochs=1.5"], "error: epochs=1.5 must be a whole number >= 1."),
            ("train_reward_model.py", ["trainer=fsdp2", "trainer.strategy.sharded_sampling=true", "task_name=rm"],
             "error: trainer.strategy.sharded_sampling=true says how train.py samples its rollouts, and "
             "train_reward_model.py samples none; remove it."),
            ("train_kto.py", ["data.batch_size=1", "task_name=kto_run"],
             "error: data.batch_size=1 with algo.loss_type=kto: the KL row"),
            ("train_dpo.py", ["trainer=fsdp2", "trainer.strategy.sharded_sampling=true"],
             "error: trainer.strategy.sharded_sampling=true says how train.py samples its rollouts, and train_dpo.py "
             "samples none; remove it."),
            ("train_dpo.py", ["trainer=fsdp2", "algo.sync_ref_model=true"],
             "error: algo.sync_ref_model=true is not supported with trainer=fsdp2; use trainer=ddp")):
        assert_refused_before_imports(script, args, line, ("torch", "lightning", "transformers"), tmp_path)
    assert not (tmp_path / "logs").exists()
