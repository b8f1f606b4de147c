"""On-policy distillation: the advantage and the loss against a slow per-token loop of the formula, a teacher equal
to the student (advantage exactly 0, weights unchanged), observation tokens never scored, routed teachers, and
train.py algo=distill as a user types it."""

import csv
import functools
import re
import threading
from pathlib import Path

import lightning as L
import pytest
import torch

from lit_rlhf import DistillationModule
from lit_rlhf.errors import ConfigError
from lit_rlhf.rewards import VaderSentiment
from lit_rlhf.rollout.engine import Samples
from lit_rlhf.step.rollout import Rollout
from lit_rlhf.teachers.causal_lm import CausalLMTeacher
from lit_rlhf.teachers.routed import RoutedTeachers
from lit_rlhf.teachers.served import ServedTeacher
from tests.apps import ROOT, run_app
from tests.conftest import LORA, TINY_PYTHIA, make_datamodule
from tests.helpers import FAST, advantages_of, one_line_error


def make_distill(teacher=None, **overrides):
    kwargs = dict(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, reward=VaderSentiment(),
                  teacher=teacher or CausalLMTeacher(TINY_PYTHIA),
                  optimizer=functools.partial(torch.optim.AdamW, lr=1e-2, weight_decay=0.0), samples_per_prompt=2,
                  response_length=8)
    kwargs.update(overrides)
    return DistillationModule(**kwargs)


def hand_rollout(student, teacher, mask, scores, k):
    n = len(scores)
    return Rollout(queries=torch.zeros(n, 1, dtype=torch.long), query_mask=torch.ones(n, 1, dtype=torch.long),
                   responses=torch.zeros_like(mask, dtype=torch.long), response_mask=mask,
                   prompt_index=torch.arange(n // k).repeat_interleave(k), logprobs=student, ref_logprobs=None,
                   scores=scores, raw_scores=scores, contains_stop=torch.ones(n, dtype=torch.bool),
                   teacher_logprobs=teacher * mask)


def test_the_advantage_loss_and_gradient_equal_a_per_token_loop_of_the_formula():
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]).bool()
    student, teacher = -torch.rand(4, 4) * 3, -torch.rand(4, 4) * 3
    scores = torch.tensor([1.0, 0.0, 0.5, 0.5])
    module = make_distill(task_reward_coef=0.5)
    rollout = hand_rollout(student * mask, teacher, mask, scores, k=2)
    advantages, stats = advantages_of(module, rollout)

    # the formula, token by token: A_t = log p_teacher - log p_student + coef x (r - group mean) / (group std + 1e-4)
    expected = torch.zeros(4, 4)
    for i in range(4):
        group = [j for j in range(4) if j // 2 == i // 2]
        mean = sum(scores[j] for j in group) / len(group)
        std = (sum((scores[j] - mean) ** 2 for j in group) / (len(group) - 1)) ** 0.5
        task = 0.0 if all(scores[j] == scores[group[0]] for j in group) else (scores[i] - mean) / (std + 1e-4)
        for t in range(4):
            if mask[i, t]:
                expected[i, t] = teacher[i, t] - student[i, t] + 0.5 * task
    torch.testing.assert_close(advantages, expected)
    tokens = [(i, t) for i in range(4) for t in range(4) if mask[i, t]]
    reverse_kl = sum(float(student[i, t] - teacher[i, t]) for i, t in tokens) / len(tokens)
    assert stats["distill/reverse_kl"].item() == pytest.approx(reverse_kl)
    assert stats["distill/teacher_logprob_mean"].item() == pytest.approx(
        sum(float(teacher[i, t]) for i, t in tokens) / len(tokens))

    # the clipped loss of the update (dapo: the token mean of the step) and its gradient, against the loop
    new = (rollout.logprobs + torch.randn(4, 4) * 0.3).requires_grad_(True)
    idx = torch.arange(4)
    loss, _ = module.policy_loss(new, torch.zeros(4, 4), rollout, advantages, idx, module.loss_share(rollout, idx, 1))
    loss.backward()
    slow_loss, slow_grad = 0.0, torch.zeros(4, 4)
    for i, t in tokens:
        ratio = float(torch.exp(new[i, t].detach() - rollout.logprobs[i, t]))
        a = float(advantages[i, t])
        clipped = min(max(ratio, 0.8), 1.2)
        unclipped_wins = -a * ratio >= -a * clipped
        slow_loss += max(-a * ratio, -a * clipped) / len(tokens)
        slow_grad[i, t] = (-a * ratio if unclipped_wins else 0.0) / len(tokens)
    assert loss.item() == pytest.approx(slow_loss, rel=1e-5)
    torch.testing.assert_close(new.grad, slow_grad, rtol=1e-5, atol=1e-7)


def test_iw_opd_gamma_weighs_each_advantage_by_the_share_of_its_sequences_divergence_still_ahead():
    """TRL IW-OPD: A_t = (1 + gamma (1 - sum_{s<t} |a_s| / sum_s |a_s|)) a_t over the model's tokens, a_t the
    sampled-token advantage; an observation token (mask 0) neither weighs nor is weighed."""
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]]).bool()
    student, teacher = -torch.rand(4, 4) * 3 * mask, -torch.rand(4, 4) * 3
    rollout = hand_rollout(student, teacher, mask, torch.zeros(4), k=2)
    advantages, _ = advantages_of(make_distill(iw_opd_gamma=0.5), rollout)
    expected = torch.zeros(4, 4)
    for i in range(4):
        a = [float(teacher[i, t] - student[i, t]) if mask[i, t] else 0.0 for t in range(4)]
        total = max(sum(abs(x) for x in a), 1e-8)
        for t in range(4):
            if mask[i, t]:
                expected[i, t] = (1 + 0.5 * (1 - sum(abs(x) for x in a[:t]) / total)) * a[t]
    torch.testing.assert_close(advantages, expected)
    unweighted, _ = advantages_of(make_distill(), rollout)
    torch.testing.assert_close(unweighted, (teacher - student) * mask)


def test_exopd_lambda_scales_the_teacher_s_log_ratio_to_the_reference():
    """G-OPD (arXiv 2602.12125): A_t = lam (log p_teacher - log p_ref) - (log p_student - log p_ref) on the model's
    tokens; at lam = 1 the reference cancels and A_t is distillation's, whatever the reference."""
    from dataclasses import replace

    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]]).bool()
    student, teacher, ref = (-torch.rand(4, 4) * 3 * mask for _ in range(3))
    rollout = replace(hand_rollout(student, teacher, mask, torch.zeros(4), k=2), ref_logprobs=ref)
    for lam in (1.0, 2.5):
        advantages, _ = advantages_of(make_distill(exopd_lambda=lam), rollout)
        expected = torch.zeros(4, 4)
        for i in range(4):
            for t in range(4):
                if mask[i, t]:
                    expected[i, t] = lam * (teacher[i, t] - ref[i, t]) - (student[i, t] - ref[i, t])
        torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(advantages_of(make_distill(), rollout)[0], (teacher - student) * mask)
    assert make_distill(exopd_lambda=2.5).needs_reference and not make_distill().needs_reference
    with pytest.raises(ConfigError, match="algo.exopd_lambda=2 scales the sampled-token advantage"):
        make_distill(exopd_lambda=2.0, divergence="generalized_jsd")


def test_the_loss_is_the_token_mean_of_the_whole_step_however_it_is_split():
    """TRL's distillation trainers average the loss over all of the step's tokens: micro-batches of 3 and 7 tokens
    give the gradient of one batch (bnpo, a mean of micro-batch means, would weight the 3 tokens 7/3 times more)."""
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]).bool()
    rollout = hand_rollout(-torch.rand(4, 4) * mask, -torch.rand(4, 4) * 3, mask, torch.zeros(4), k=2)
    module = make_distill()
    assert module.hparams.loss_type == "dapo"
    advantages, _ = advantages_of(module, rollout)
    new = (rollout.logprobs + torch.randn(4, 4) * 0.3).requires_grad_(True)
    step = torch.arange(4)
    whole, _ = module.policy_loss(new, torch.zeros(4, 4), rollout, advantages, step,
                                  module.loss_share(rollout, step, 1))
    (whole_grad,) = torch.autograd.grad(whole, new)
    share = module.loss_share(rollout, step, 2)
    split = sum(module.policy_loss(new[idx], torch.zeros(len(idx), 4), rollout, advantages, idx, share)[0]
                for idx in (torch.tensor([0]), torch.tensor([1, 2, 3])))
    (split_grad,) = torch.autograd.grad(split, new)
    torch.testing.assert_close(split_grad, whole_grad)


@pytest.mark.integration
def test_a_teacher_that_is_the_student_gives_zero_advantages_and_leaves_the_weights_unchanged():
    module = make_distill()  # a LoRA student starts as its base model: the teacher's weights
    seen = []
    compute = module.compute_advantages

    def recording(rollout, penalty):
        advantages, stats = compute(rollout, penalty)
        seen.append((advantages.clone(), rollout.response_mask.clone()))
        return advantages, stats

    module.compute_advantages = recording
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    module.configure_model()
    before = {k: v.detach().clone() for k, v in module.state_dict().items() if "lora_" in k}
    trainer.fit(module, make_datamodule())
    assert len(seen) == 2 and all(mask.any() for _, mask in seen)
    assert all(torch.equal(advantages, torch.zeros_like(advantages)) for advantages, _ in seen)
    after = {k: v.detach() for k, v in module.state_dict().items() if "lora_" in k}
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert trainer.callback_metrics["distill/reverse_kl"].item() == 0.0
    assert trainer.callback_metrics["distill/teacher_tokens"].item() == seen[-1][1].sum().item()  # the model's tokens


class ConstantTeacher:
    def __init__(self, value):
        self.value = value

    def logprobs(self, queries, query_mask, responses, response_mask, temperature, columns=None):
        return torch.full(responses.shape, self.value) * response_mask


def test_observation_tokens_of_an_episode_are_read_by_the_teacher_but_never_scored():
    module = make_distill(teacher=ConstantTeacher(-1.0))
    response_mask = torch.tensor([[1, 1, 0, 0, 1, 0]]).bool()  # model, model, observation x2, model, padding
    context_mask = torch.tensor([[1, 1, 1, 1, 1, 0]]).bool()
    samples = Samples(queries=torch.zeros(1, 2, dtype=torch.long), query_mask=torch.ones(1, 2, dtype=torch.long),
                      responses=torch.zeros(1, 6, dtype=torch.long), response_mask=response_mask,
                      prompt_index=torch.zeros(1, dtype=torch.long), context_mask=context_mask)
    assert module.sampler.teacher_logprobs(samples, {})[0].tolist() == [[-1.0, -1.0, 0.0, 0.0, -1.0, 0.0]]


def test_routed_teachers_score_each_row_with_its_own_and_say_which_value_has_none():
    routed = RoutedTeachers({"math": ConstantTeacher(-1.0), "code": ConstantTeacher(-2.0)}, column="data_source")
    mask = torch.ones(3, 2, dtype=torch.bool)
    columns = {"data_source": ["code", "math", "code"]}
    out = routed.logprobs(torch.zeros(3, 1, dtype=torch.long), torch.ones(3, 1), torch.zeros(3, 2, dtype=torch.long),
                          mask, 1.0, columns)
    assert out.tolist() == [[-2.0, -2.0], [-1.0, -1.0], [-2.0, -2.0]]
    with pytest.raises(ConfigError, match="names 'poetry', which no teacher serves"):
        routed.logprobs(torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 1), torch.zeros(1, 2, dtype=torch.long),
                        mask[:1], 1.0, {"data_source": ["poetry"]})

    module = make_distill(teacher=routed)
    student = torch.full((3, 2), -1.5)
    rollout = hand_rollout(student, out, mask, torch.zeros(3), k=1)
    rollout.columns = columns
    stats = module.distillation_stats(rollout)
    assert stats["distill/math/reverse_kl"].item() == pytest.approx(-0.5)  # -1.5 - (-1)
    assert stats["distill/code/reverse_kl"].item() == pytest.approx(0.5)  # -1.5 - (-2)


@pytest.mark.integration
def test_a_module_without_a_teacher_and_a_teacher_of_another_tokenizer_are_refused_in_one_line(tmp_path):
    module = DistillationModule(model={"name_or_path": TINY_PYTHIA}, reward=VaderSentiment())  # evaluates, exports
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu")
    with pytest.raises(ConfigError, match="algo=distill needs a teacher: teacher.name_or_path="):
        trainer.fit(module, make_datamodule())  # before anything loads
    assert module.policy is None
    from transformers import AutoTokenizer

    other = AutoTokenizer.from_pretrained(TINY_PYTHIA)
    other.add_tokens(["<extra_teacher_token>"])
    other.save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="has another tokenizer than the student"):
        CausalLMTeacher(str(tmp_path)).load(AutoTokenizer.from_pretrained(TINY_PYTHIA))


@pytest.mark.parametrize("extra_rows, expected", [
    (64, r"has 1043 token embeddings \(logits\) and the student 979: the teacher's distribution is over another "
         r"vocabulary"),
    (-40, r"has 939 token embeddings and the student's tokenizer 979 tokens: it has no logit for the 40 ids from 939 "
          r"on, which the student may sample")])
def test_a_teacher_with_more_or_fewer_token_embeddings_than_the_student_is_refused_before_training(
        extra_rows, expected, tmp_path):
    """Same tokenizer, other embedding sizes: one resized for added tokens (new rows that take probability mass), one
    cut short (ids the student samples that it has no logit for, which loading would resize and score)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TINY_PYTHIA)
    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    assert model.get_input_embeddings().num_embeddings == len(tokenizer) == 979
    model.resize_token_embeddings(979 + extra_rows)
    model.save_pretrained(tmp_path / "teacher")
    tokenizer.save_pretrained(tmp_path / "teacher")
    module = make_distill(CausalLMTeacher(str(tmp_path / "teacher")))
    with pytest.raises(ConfigError, match=expected):
        module.configure_model()


@pytest.mark.integration
def test_train_py_distills_as_typed_and_logs_the_reverse_kl(tmp_path):
    result = run_app("train.py", "algo=distill", f"teacher.name_or_path={TINY_PYTHIA}", *FAST,
                     f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "run" / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    logged = {key for row in rows for key, value in row.items() if value}
    assert {"distill/reverse_kl", "distill/teacher_logprob_mean", "distill/student_logprob_mean",
            "distill/teacher_tokens", "objective/scores"} <= logged
    progress = [line for line in result.stdout.splitlines() if line.startswith("RL step 1/1")]
    assert progress and re.search(r"\| reverse_kl -?\d+\.\d{3} \|", progress[0]), progress  # what the run steers on
    missing = run_app("train.py", "algo=distill", *FAST, f"hydra.run.dir={tmp_path / 'missing'}", cwd=tmp_path)
    line = one_line_error(missing)
    assert "teacher.name_or_path is required" in line and "python train.py experiment=calculator_distill" in line


@pytest.mark.integration
def test_train_py_routes_each_row_to_the_teacher_its_column_names_and_logs_each_ones_reverse_kl(tmp_path):
    import json

    (tmp_path / "rows.jsonl").write_text("".join(
        json.dumps({"prompt": f"The film number {i} was", "data_source": ("films", "shows")[i % 2]}) + "\n"
        for i in range(24)))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    other = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)  # the student's weights, perturbed
    with torch.no_grad():
        other.get_output_embeddings().weight.add_(torch.randn_like(other.get_output_embeddings().weight))
    other.save_pretrained(tmp_path / "other")
    AutoTokenizer.from_pretrained(TINY_PYTHIA).save_pretrained(tmp_path / "other")
    teachers = ", ".join(f"{name}: {{_target_: lit_rlhf.teachers.CausalLMTeacher, name_or_path: '{path}'}}"
                         for name, path in (("films", TINY_PYTHIA), ("shows", tmp_path / "other")))
    result = run_app("train.py", "algo=distill", "teacher=routed", f"teacher.teachers={{{teachers}}}", "data=files",
                     "data.dataset=rows.jsonl", *FAST, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "run" / "csv" / "metrics.csv") as f:
        row = next(r for r in csv.DictReader(f) if r.get("distill/reverse_kl"))
    # the films teacher is the LoRA student's starting weights (reverse KL exactly 0 on its rows' tokens at the first
    # step), the shows teacher is not
    assert float(row["distill/films/reverse_kl"]) == 0.0 and abs(float(row["distill/shows/reverse_kl"])) > 0.01


@pytest.mark.integration
def test_the_python_example_of_the_distillation_page_runs_as_written(tmp_path):
    section = (ROOT / "docs" / "distillation.md").read_text().split("## From Python", 1)[1]
    (tmp_path / "example.py").write_text(re.findall(r"```python\n(.*?)```", section, re.S)[0])
    result = run_app(str(tmp_path / "example.py"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "0.0"


@pytest.mark.integration
def test_in_async_mode_the_producer_thread_scores_the_teacher_where_it_scores_the_reward():
    teacher, threads = CausalLMTeacher(TINY_PYTHIA), []
    scores = teacher.logprobs

    def recording(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return scores(*args, **kwargs)

    teacher.logprobs = recording
    module = make_distill(teacher=teacher, max_staleness=1)
    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    trainer.fit(module, make_datamodule())
    assert len(threads) >= 3 and all(name != threading.main_thread().name for name in threads)
    assert "distill/reverse_kl" in trainer.callback_metrics and "async/staleness" in trainer.callback_metrics


@pytest.mark.integration
def test_the_calculator_distillation_experiment_runs_as_typed_with_its_embedded_teacher(tmp_path):
    """`python train.py experiment=calculator_distill` needs no teacher on the command line (fewer steps here)."""
    result = run_app("train.py", "experiment=calculator_distill", "steps=1", "data.batch_size=4",
                     "data.num_eval_prompts=4", "callbacks.evaluation=null", "hydra.run.dir=run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "run" / ".hydra" / "config.yaml") as file:
        assert "name_or_path: ${asset:tiny-calculator-teacher}" in file.read()  # the unresolved config
    assert re.search(r"RL step 1/1 .*\| reverse_kl \d+\.\d{3} \|", result.stdout), result.stdout[-2000:]


def test_the_large_teacher_experiment_distills_a_fully_fine_tuned_student_from_the_embedded_large_teacher(tmp_path):
    """experiment=calculator_distill_large: no teacher on the command line, the student's own tokenizer in a teacher
    of several times its parameters, the student without LoRA at its learning rate."""
    from hydra import compose, initialize_config_dir
    from transformers import AutoConfig, AutoTokenizer

    from lit_rlhf.assets import TINY_CALCULATOR, asset_path
    from lit_rlhf.cli.resolvers import register_resolvers

    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=["experiment=calculator_distill_large", f"paths.output_dir={tmp_path}"])
    teacher = asset_path("tiny-calculator-teacher-large")
    assert cfg.teacher.name_or_path == teacher and cfg.model.lora is None and cfg.algo.optimizer.lr == 3e-4
    vocabularies = [AutoTokenizer.from_pretrained(path).get_vocab() for path in (teacher, TINY_CALCULATOR)]
    assert vocabularies[0] == vocabularies[1]
    sizes = [AutoConfig.from_pretrained(path) for path in (teacher, TINY_CALCULATOR)]
    assert sizes[0].vocab_size == sizes[1].vocab_size and sizes[0].hidden_size > sizes[1].hidden_size


def test_the_two_task_experiment_routes_each_bundled_task_to_its_embedded_teacher(tmp_path):
    """experiment=two_task_distill: one teacher per data_source value of the bundled two_task prompts, each a LoRA
    adapter on the student's own base (one tokenizer for both tasks)."""
    import json

    from hydra import compose, initialize_config_dir

    from lit_rlhf.assets import asset_path
    from lit_rlhf.cli.resolvers import register_resolvers
    from lit_rlhf.data.sources import BUNDLED

    register_resolvers()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=["experiment=two_task_distill", f"paths.output_dir={tmp_path}"])
    sources = {json.loads(line)["data_source"] for line in BUNDLED["two_task"].read_text().splitlines()}
    assert cfg.data.dataset == "two_task" and set(cfg.teacher.teachers) == sources == {"calculator", "arithmetic"}
    for task, teacher in cfg.teacher.teachers.items():
        assert teacher.name_or_path == cfg.model.name_or_path == asset_path("tiny-two-task")
        assert json.loads((Path(teacher.adapter_path) / "adapter_config.json").read_text())["r"] > 0
        assert teacher.adapter_path == asset_path(f"tiny-two-task-{task}-teacher")


@pytest.fixture(scope="module")
def other_teacher(tmp_path_factory):
    """TINY_PYTHIA with its weights perturbed: a teacher whose distributions differ from the student's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("teacher")
    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(TINY_PYTHIA).save_pretrained(folder)
    return str(folder)


@pytest.mark.integration
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_the_full_vocabulary_loss_is_the_divergence_at_each_sampled_position(beta, other_teacher):
    """algo.divergence=generalized_jsd: at each model token of the rollout, the divergence of the student's softmax
    (logits / temperature) from the teacher's, from both models' full logits; the sampled tokens' logprobs are the
    update forward's; the statistic reaches callback_metrics."""
    from lit_rlhf.models.forwards import response_logits
    from lit_rlhf.ops.divergence import generalized_jsd

    module = make_distill(teacher=CausalLMTeacher(other_teacher), divergence="generalized_jsd", beta=beta,
                          temperature=0.8)
    seen = []
    compute = module.compute_advantages

    def recording(rollout, penalty):
        seen.append(rollout)
        return compute(rollout, penalty)

    module.compute_advantages = recording
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    trainer.fit(module, make_datamodule())
    assert trainer.callback_metrics["distill/divergence"].item() > 0
    rollout, idx = seen[-1], torch.arange(len(seen[-1]))
    with torch.no_grad():
        divergence, logprobs, _ = module.full_vocabulary_divergence(rollout, idx)
        student = (response_logits(module.policy, *rollout.sequences()) / 0.8).log_softmax(-1)  # N,R,V
        teacher = (response_logits(module.sampler.teacher.model, *rollout.sequences()) / 0.8).log_softmax(-1)
        expected_logprobs, _ = module.policy_logprobs_and_entropy(*rollout.sequences())
    mask = rollout.response_mask
    assert mask.any()
    torch.testing.assert_close(divergence, generalized_jsd(student, teacher, beta) * mask, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(logprobs, expected_logprobs * mask, rtol=1e-4, atol=1e-6)
    assert not module.single_update  # its own forwards in the update, not the rollout's


@pytest.mark.integration
def test_the_full_vocabulary_loss_needs_a_teacher_that_gives_its_distribution():
    module = make_distill(teacher=ConstantTeacher(-1.0), divergence="generalized_jsd")
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu")
    with pytest.raises(ConfigError, match="algo.divergence=generalized_jsd reads the teacher's next-token "
                                          "distribution, which a ConstantTeacher does not give; use a loaded"):
        trainer.fit(module, make_datamodule())
    served = make_distill(teacher=ServedTeacher("http://127.0.0.1:9"), divergence="generalized_jsd",
                          temperature=1.0)
    with pytest.raises(ConfigError, match=r"which a ServedTeacher does not give as set; .* or set "
                                          r"teacher.top_logprobs"):
        trainer.fit(served, make_datamodule())
    with pytest.raises(ConfigError, match=r"algo.beta=1.5 must be a finite number >= 0 and <= 1"):
        make_distill(divergence="generalized_jsd", beta=1.5)
