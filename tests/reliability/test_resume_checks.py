"""A resume refuses setting changes that break exactness and applies (and reports) the others."""

import csv
import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from lit_rlhf.checkpoints.resume_checks import check_resume, check_resumed_lr
from lit_rlhf.checkpoints.run_identity import check_same_run
from lit_rlhf.errors import ConfigError
from tests.apps import run_app
from tests.helpers import FAST, ROOT, one_line_error


def test_changes_that_break_exactness_are_refused_and_steering_ones_applied():
    saved = {"rloo_k": 4, "max_grad_norm": 1.0, "model": {"name_or_path": "a", "lora": {"r": 8}}}
    assert check_resume(saved, dict(saved), {"batch_size": 8}, {"batch_size": 8}) == []
    assert check_resume(saved, {**saved, "max_grad_norm": 0.5}, None, None) == ["algo.max_grad_norm 1.0 -> 0.5"]
    with pytest.raises(ConfigError, match=r"resume changes algo.rloo_k \(4 -> 8\)"):
        check_resume(saved, {**saved, "rloo_k": 8}, None, None)
    with pytest.raises(ConfigError, match=r"resume changes model.lora.r \(8 -> 16\);"):
        check_resume(saved, {**saved, "model": {"name_or_path": "a", "lora": {"r": 16}}}, None, None)
    with pytest.raises(ConfigError, match=r"resume changes model.lora.r \(8 -> None\)"):
        check_resume(saved, {**saved, "model": {"name_or_path": "a", "lora": None}}, None, None)
    with pytest.raises(ConfigError, match=r"resume changes data.batch_size \(8 -> 16\)"):
        check_resume(saved, saved, {"batch_size": 8}, {"batch_size": 16})
    # a LoRA setting added since the checkpoint was written: its old behaviour resumes, another value does not
    now = {**saved, "model": {"name_or_path": "a", "lora": {"r": 8, "use_rslora": False, "use_dora": False},
                              "cast_lm_head_to_fp32": False}}
    assert check_resume(saved, now, None, None) == []
    with pytest.raises(ConfigError, match=r"resume changes model.cast_lm_head_to_fp32 \(None -> True\)"):
        check_resume(saved, {**saved, "model": {**now["model"], "cast_lm_head_to_fp32": True}}, None, None)
    with pytest.raises(ConfigError, match=r"resume changes model.lora.use_dora \(None -> True\)"):
        check_resume(saved, {**saved, "model": {"name_or_path": "a", "lora": {"r": 8, "use_dora": True}}}, None, None)
    state = [{"param_groups": [{"lr": 1e-3, "initial_lr": 1e-3}]}]
    assert check_resumed_lr(state, 1e-3, has_scheduler=False) is None
    assert check_resumed_lr(state, 5e-4, has_scheduler=False) == "algo.optimizer.lr 0.001 -> 0.0005"
    with pytest.raises(ConfigError, match="under an lr scheduler"):
        check_resumed_lr(state, 5e-4, has_scheduler=True)


@pytest.mark.integration
def test_resume_through_train_py_refuses_rloo_k_and_batch_size_and_applies_a_new_lr(tmp_path):
    run_dir = tmp_path / "run"
    first = run_app("train.py", f"hydra.run.dir={run_dir}", *FAST, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    resume = [f"hydra.run.dir={run_dir}", "ckpt_path=last", *FAST[1:], "steps=2"]
    assert "resume changes algo.rloo_k (4 -> 2)" in one_line_error(run_app("train.py", *resume, "algo.rloo_k=2",
                                                                           cwd=tmp_path))
    assert "resume changes data.batch_size (4 -> 8)" in one_line_error(
        run_app("train.py", *resume, "data.batch_size=8", cwd=tmp_path))
    applied = run_app("train.py", *resume, "algo.optimizer.lr=0.0005", cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr[-3000:]
    assert "Resume applies: algo.optimizer.lr 0.001 -> 0.0005." in applied.stdout + applied.stderr
    with open(run_dir / "csv" / "metrics.csv") as f:
        assert [float(r["lr"]) for r in csv.DictReader(f) if r["lr"]] == pytest.approx([0.001, 0.0005])


def test_a_run_identity_change_names_the_changed_key():
    saved = {"algo": "lit_rlhf.algos.rloo.RLOOModule", "reward": ["vader"], "reward.vader": "V",
             "reward.weights.vader": 1.0, "model.name_or_path": {"digest": "aa"}}
    check_same_run(saved, dict(saved))
    with pytest.raises(ConfigError, match=r"resume changes the algorithm \(RLOOModule -> GRPOModule\)"):
        check_same_run(saved, {**saved, "algo": "lit_rlhf.algos.grpo.GRPOModule"})
    with pytest.raises(ConfigError, match=r"resume changes reward.weights.vader \(1.0 -> 0.5\);"):
        check_same_run(saved, {**saved, "reward.weights.vader": 0.5})
    with pytest.raises(ConfigError, match=r"resume changes model.name_or_path \(its files differ"):
        check_same_run(saved, {**saved, "model.name_or_path": {"digest": "bb"}})
    # the other changed groups are named ("and more" named none)
    with pytest.raises(ConfigError, match=r"resume changes model.name_or_path \(its files differ from the checkpoint's "
                                          r"run\), and reward too; an exact resume needs the checkpoint's: restore "
                                          r"them,"):
        check_same_run(saved, {**saved, "model.name_or_path": {"digest": "bb"}, "reward.weights.vader": 0.5})


def test_a_changed_path_names_both_paths_and_a_changed_file_its_path():
    from lit_rlhf.checkpoints.run_identity import typed_paths

    saved = {"algo": "lit_rlhf.algos.rloo.RLOOModule", "data.dataset": {"digest": "aa"}}
    changed = {**saved, "data.dataset": {"digest": None}}
    given = typed_paths({"model": {"name_or_path": "m"}}, {"dataset": "prompts.jsonl"})
    assert given == {"model.name_or_path": "m", "data.dataset": "prompts.jsonl"}
    with pytest.raises(ConfigError, match=r"^resume changes data.dataset \('prompts.jsonl' -> 'sentiment'\); an exact"):
        check_same_run(saved, changed, typed=(given, typed_paths({}, {"dataset": "sentiment"})))
    with pytest.raises(ConfigError, match=r"^resume changes data.dataset \(the files at 'prompts.jsonl' differ from "
                                          r"those the checkpoint's run read\);"):
        check_same_run(saved, {**saved, "data.dataset": {"digest": "bb"}}, typed=(given, given))


def test_a_rewards_setting_that_changes_its_scores_is_refused_and_one_that_reaches_it_is_free():
    from lit_rlhf.checkpoints.resume_checks import check_resumed_reward

    vader = {"_target_": "lit_rlhf.rewards.WeightedSum", "weights": {"vader": 1.0}, "concurrent": False,
             "rewards": {"vader": {"_target_": "lit_rlhf.rewards.VaderSentiment", "include_prompt": False}}}
    check_resumed_reward(vader, {**vader, "concurrent": True})
    with pytest.raises(ConfigError, match=r"resume changes reward.rewards.vader.include_prompt \(False -> True\);"):
        check_resumed_reward(vader, {**vader, "rewards": {"vader": {**vader["rewards"]["vader"],
                                                                    "include_prompt": True}}})
    model = {"_target_": "lit_rlhf.rewards.SequenceClassifierReward", "name_or_path": "org/rm", "normalize": False,
             "batch_size": 16, "device": None}
    check_resumed_reward(model, {**model, "batch_size": 4, "device": "cuda"})
    with pytest.raises(ConfigError, match=r"resume changes reward.normalize \(False -> True\);"):
        check_resumed_reward(model, {**model, "normalize": True})
    own = {**vader, "weights": {"Length": 1.0}, "rewards": {"Length": {"_target_": "myrewards.Length", "scale": 1.0}}}
    with pytest.raises(ConfigError, match=r"resume changes reward.scale \(1.0 -> 0.5\);"):  # as it was typed
        check_resumed_reward(own, {**own, "rewards": {"Length": {"_target_": "myrewards.Length", "scale": 0.5}}})
    with pytest.raises(ConfigError, match=r"resume changes reward.scale \(None -> 0.5\);"):  # an argument added
        check_resumed_reward({**own, "rewards": {"Length": {"_target_": "myrewards.Length"}}},
                             {**own, "rewards": {"Length": {"_target_": "myrewards.Length", "scale": 0.5}}})
    check_resumed_reward(None, model)  # a checkpoint of a module built in plain Lightning records no reward config


def test_an_environments_identity_is_its_class_tools_and_episode_limits_not_its_timeouts():
    from lit_rlhf.checkpoints.run_identity import environment_identity
    from lit_rlhf.envs import EnvSpec
    from lit_rlhf.tasks.calculator import CalculatorEnvironment, NoToolEnvironment

    run = {"algo": "lit_rlhf.algos.grpo.GRPOModule"}
    calculator = {**run, **environment_identity(EnvSpec(CalculatorEnvironment, max_turns=3))}
    assert calculator["env"] == "lit_rlhf.tasks.calculator.CalculatorEnvironment"
    assert calculator["env.tools"] == ["calculator"] and calculator["env.max_turns"] == 3
    check_same_run(calculator, {**run, **environment_identity(EnvSpec(CalculatorEnvironment, max_turns=3,
                                                                      tool_timeout_s=1.0, max_concurrency=1))})
    with pytest.raises(ConfigError, match=r"resume changes env \('lit_rlhf.tasks.calculator.CalculatorEnvironment' -> "
                                          r"'lit_rlhf.tasks.calculator.NoToolEnvironment'\) and more of env;"):
        check_same_run(calculator, {**run, **environment_identity(EnvSpec(NoToolEnvironment, max_turns=3))})
    with pytest.raises(ConfigError, match=r"resume changes env \(None -> 'lit_rlhf.tasks.calculator"):
        check_same_run({**run, **environment_identity(None)}, calculator)
    with pytest.raises(ConfigError, match=r"resume changes env.tool_format \('compact' -> 'hermes'\);"):
        check_same_run(calculator, {**run, **environment_identity(EnvSpec(CalculatorEnvironment, max_turns=3,
                                                                          tool_format="hermes"))})
    check_same_run(run, calculator)  # a checkpoint written before environments were compared resumes


@pytest.fixture(scope="module")
def run_on_own_files(tmp_path_factory):
    """A one-step run on a copy of the tiny model and a prompts file of its own."""
    directory = tmp_path_factory.mktemp("identity")
    shutil.copytree(ROOT / "lit_rlhf" / "assets" / "tiny-pythia", directory / "a" / "tiny-pythia")
    rows = "".join(json.dumps({"prompt": f"The film number {i} was"}) + "\n" for i in range(24))
    (directory / "prompts.jsonl").write_text(rows)
    first = run_app("train.py", "hydra.run.dir=run", *OWN_FILES, *FAST, cwd=directory)
    assert first.returncode == 0, first.stderr[-3000:]
    return directory


OWN_FILES = ["model=causal_lm", "model.name_or_path=a/tiny-pythia", "data=files", "data.dataset=prompts.jsonl"]
SCHEDULER = ("algo.lr_scheduler={_target_:torch.optim.lr_scheduler.LinearLR,_partial_:true,start_factor:1.0,"
             "end_factor:0.5,total_iters:2}")
IDENTITY_CHANGES = [
    (["algo=grpo"], "resume changes the algorithm (RLOOModule -> GRPOModule)"),
    (["algo=reinforce_pp"], "resume changes the algorithm (RLOOModule -> ReinforcePPModule)"),
    (["reward.weights.vader=0.5"], "resume changes reward.weights.vader (1.0 -> 0.5)"),
    (["reward=[vader,arithmetic_format]"], "resume changes reward ("),
    (["reward.rewards.vader.include_prompt=true"],
     "resume changes reward.rewards.vader.include_prompt (False -> True)"),
    (["score_transforms=reward_normalizer"], "resume changes score_transforms ([] -> "),
    (["algo.kl_controller.kind=adaptive"], "resume changes algo.kl_controller.kind ('fixed' -> 'adaptive')"),
    ([SCHEDULER], "resume changes algo.lr_scheduler (None -> 'torch.optim.lr_scheduler.LinearLR')"),
    (["model.lora.r=8"], "resume changes model.lora.r (16 -> 8)"),
]


@pytest.mark.integration
@pytest.mark.parametrize("change, expected", IDENTITY_CHANGES, ids=[c[0][0].split("{")[0] for c in IDENTITY_CHANGES])
def test_a_resume_that_would_train_something_else_is_one_line(change, expected, run_on_own_files):
    result = run_app("train.py", "hydra.run.dir=run", "ckpt_path=last", *OWN_FILES, *FAST[1:], "steps=2", *change,
                     cwd=run_on_own_files)
    assert expected in one_line_error(result)


@pytest.mark.integration
def test_a_resume_from_other_files_at_the_same_paths_is_one_line(run_on_own_files, tmp_path):
    resume = [f"ckpt_path={run_on_own_files / 'run' / 'checkpoints' / 'last.ckpt'}", *FAST[1:], "steps=2"]
    other_model = tmp_path / "b" / "tiny-pythia"  # the same final name, other weights
    shutil.copytree(run_on_own_files / "a" / "tiny-pythia", other_model)
    weights = load_file(other_model / "model.safetensors")
    save_file({k: v + 0.01 for k, v in weights.items()}, other_model / "model.safetensors")
    (tmp_path / "prompts.jsonl").write_text((run_on_own_files / "prompts.jsonl").read_text())
    args = ["model=causal_lm", f"model.name_or_path={other_model}", "data=files", "data.dataset=prompts.jsonl"]
    assert "resume changes model.name_or_path ('a/tiny-pythia' -> '/" in one_line_error(  # the paths as given
        run_app("train.py", *resume, *args, cwd=tmp_path))
    (tmp_path / "prompts.jsonl").write_text((run_on_own_files / "prompts.jsonl").read_text().replace("film", "show"))
    args[1] = f"model.name_or_path={run_on_own_files / 'a' / 'tiny-pythia'}"
    assert ("resume changes data.dataset (the files at 'prompts.jsonl' differ from those the checkpoint's run read)"
            in one_line_error(run_app("train.py", *resume, *args, cwd=tmp_path)))


@pytest.mark.integration
def test_a_resumed_distillation_run_refuses_another_teacher_in_one_line(tmp_path):
    teacher = tmp_path / "teacher"
    shutil.copytree(ROOT / "lit_rlhf" / "assets" / "tiny-pythia", teacher)
    first = run_app("train.py", "hydra.run.dir=run", "algo=distill", f"teacher.name_or_path={teacher}", *FAST,
                    cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    weights = load_file(teacher / "model.safetensors")  # the same folder, other weights
    save_file({k: v + 0.01 for k, v in weights.items()}, teacher / "model.safetensors")
    resume = ["hydra.run.dir=run", "ckpt_path=last", "algo=distill", *FAST[1:], "steps=2"]
    assert "resume changes teacher.name_or_path (its files differ" in one_line_error(
        run_app("train.py", *resume, f"teacher.name_or_path={teacher}", cwd=tmp_path))
    line = one_line_error(run_app("train.py", *resume, "teacher=routed", "teacher.column=genre",
                                  f"+teacher.teachers.films={{_target_:lit_rlhf.teachers.CausalLMTeacher,"
                                  f"name_or_path:{teacher}}}", cwd=tmp_path))
    assert line.startswith("error: resume changes teacher ('lit_rlhf.teachers.causal_lm.CausalLMTeacher' -> "
                           "'lit_rlhf.teachers.routed.RoutedTeachers')"), line


def test_a_teachers_identity_is_its_weights_adapter_address_model_and_routes(tmp_path):
    from lit_rlhf.checkpoints.run_identity import teacher_identity
    from lit_rlhf.teachers.causal_lm import CausalLMTeacher
    from lit_rlhf.teachers.routed import RoutedTeachers
    from lit_rlhf.teachers.served import ServedTeacher

    served = teacher_identity(ServedTeacher("http://user:s3cret@127.0.0.1:8000/v1", model="big"))
    assert served == {"teacher": "lit_rlhf.teachers.served.ServedTeacher",
                      "teacher.url": "http://user:***@127.0.0.1:8000", "teacher.model": "big"}
    loaded = teacher_identity(CausalLMTeacher("org/teacher", adapter_path=str(ROOT / "lit_rlhf" / "assets")))
    assert loaded["teacher.name_or_path"] == "org/teacher" and set(loaded["teacher.adapter_path"]) == {"digest"}
    routed = teacher_identity(RoutedTeachers({"a": CausalLMTeacher("org/a"), "b": CausalLMTeacher("org/b")}, "src"))
    assert routed["teacher.column"] == "src" and routed["teacher.teachers"] == ["a", "b"]
    assert routed["teacher.teachers.b.name_or_path"] == "org/b"
    other = teacher_identity(RoutedTeachers({"a": CausalLMTeacher("org/a"), "b": CausalLMTeacher("org/c")}, "src"))
    run = {"algo": "lit_rlhf.algos.distill.DistillationModule"}
    with pytest.raises(ConfigError, match=r"resume changes teacher.teachers.b.name_or_path \('org/b' -> 'org/c'\)"):
        check_same_run({**run, **routed}, {**run, **other})


def test_a_checkpoint_of_the_previous_release_names_moved_classes_at_their_old_paths_and_resumes():
    from lit_rlhf.checkpoints.run_identity import reward_identity, teacher_identity
    from lit_rlhf.rewards import SequenceClassifierReward, VaderSentiment, WeightedSum
    from lit_rlhf.teachers import CausalLMTeacher, RoutedTeachers

    reward = WeightedSum({"vader": VaderSentiment(), "rm": SequenceClassifierReward("org/rm")})
    teacher = RoutedTeachers({"a": CausalLMTeacher("org/a")}, "src")
    current = {"algo": "lit_rlhf.algos.distill.DistillationModule", **reward_identity(reward),
               **teacher_identity(teacher), "score_transforms": ["lit_rlhf.step.score_transforms.RewardNormalizer"]}
    saved = {**current, "reward.vader": "lit_rlhf.models.rewards.VaderSentiment",
             "score_transforms": ["lit_rlhf.algos.score_transforms.RewardNormalizer"],
             "reward.rm": "lit_rlhf.models.rewards.SequenceClassifierReward (org/rm)",
             "teacher": "lit_rlhf.models.teacher.RoutedTeachers",
             "teacher.teachers.a": "lit_rlhf.models.teacher.CausalLMTeacher"}
    assert saved != current
    check_same_run(saved, current)
    with pytest.raises(ConfigError, match="resume changes reward.rm"):
        check_same_run({**saved, "reward.rm": "lit_rlhf.models.rewards.SequenceClassifierReward (org/other)"}, current)
