"""DAPO's dynamic sampling: refill rollouts until B groups are informative, counted, and resumed exactly."""

import csv

import pytest
import torch

from lit_rlhf.step.refill import concat_rollouts, first_groups, refill_prompt_indices, select_sequences
from lit_rlhf.step.rollout import Rollout
from tests.apps import run_app
from tests.helpers import one_line_error

QUIET = ["data.num_eval_prompts=8", "callbacks.generation_samples=null", "callbacks.training_summary=null",
         "callbacks.curves=null", "callbacks.histograms=null", "callbacks.evaluation=null"]
# the format reward on the arithmetic model: most groups answer in format every time (all K rewards equal)
FORMAT_ONLY = ["experiment=arithmetic_grpo", "data.batch_size=4", "reward=arithmetic_format",
               "algo.filter_zero_std_groups=true", *QUIET]


def small_rollout(prompt_len: int, response_len: int, scores: list[float], token: int) -> Rollout:
    n = len(scores)
    full = lambda value, width, dtype=torch.long: torch.full((n, width), value, dtype=dtype)  # noqa: E731
    return Rollout(queries=full(token, prompt_len), query_mask=full(1, prompt_len),
                   responses=full(token, response_len), response_mask=full(True, response_len, torch.bool),
                   prompt_index=torch.arange(n) // 2, logprobs=full(-1.0, response_len, torch.float),
                   ref_logprobs=full(-1.0, response_len, torch.float), scores=torch.tensor(scores),
                   raw_scores=torch.tensor(scores), contains_stop=torch.ones(n, dtype=torch.bool),
                   prompts=[f"p{token}"] * n, completions=[f"c{token}"] * n, columns={"answer": [token] * n})


def test_rollouts_of_other_widths_concatenate_and_groups_are_kept_informative_first():
    first = small_rollout(2, 3, [1.0, 1.0, 0.0, 1.0], token=5)  # group 0 equal, group 1 informative
    extra = small_rollout(4, 1, [0.0, 1.0, 2.0, 2.0], token=7)  # group 2 informative, group 3 equal
    merged = concat_rollouts([first, extra], pad_id=0)
    assert merged.queries.shape == (8, 4) and merged.responses.shape == (8, 3)
    assert merged.queries[0].tolist() == [0, 0, 5, 5] and merged.query_mask[0].tolist() == [0, 0, 1, 1]
    assert merged.responses[4].tolist() == [7, 0, 0] and merged.response_mask[4].tolist() == [True, False, False]
    assert merged.prompt_index.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    informative = torch.tensor([False, False, True, True, True, True, False, False])
    kept = select_sequences(merged, first_groups(informative, merged.prompt_index, 2))
    assert kept.prompt_index.tolist() == [0, 0, 1, 1] and kept.scores.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert kept.columns == {"answer": [5, 5, 7, 7]} and kept.prompts == ["p5", "p5", "p7", "p7"]
    # fewer informative groups than asked for: the others fill the step (the filter leaves them out of the loss)
    assert first_groups(informative, merged.prompt_index, 3).tolist() == [True] * 6 + [False] * 2


def metrics(path):
    with open(path) as f:
        return [r for r in csv.DictReader(f) if r.get("rollout/zero_std_frac")]


def test_the_largest_seed_draws_refill_prompts_and_smaller_seeds_draw_what_they_drew():
    """A run's seed goes up to 2**32 - 1; the refill's generator seed, a product of it, passes the generator's range
    from seeds above about 1.4e8 (torch's ValueError at the first refill round, unless taken modulo 2**64)."""
    indices = refill_prompt_indices(100, 5, 2**32 - 1, rl_step=10**6, round_=100, rank=7)
    assert len(set(indices)) == 5 and all(0 <= i < 100 for i in indices)
    product = ((12345 * 1_000_003 + 3) * 1_009 + 1) * 131 + 2  # within the range: the draw is the product's
    expected = torch.randperm(100, generator=torch.Generator().manual_seed(product))[:5].tolist()
    assert refill_prompt_indices(100, 5, 12345, rl_step=3, round_=1, rank=2) == expected


@pytest.mark.integration
def test_refill_rounds_add_informative_groups_and_count_what_they_generate(tmp_path):
    refilled = run_app("train.py", *FORMAT_ONLY, "steps=3", "algo.max_refill_rounds=2", "hydra.run.dir=refill",
                       cwd=tmp_path)
    assert refilled.returncode == 0, refilled.stderr[-3000:]
    plain = run_app("train.py", *FORMAT_ONLY, "steps=1", "hydra.run.dir=plain", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr[-3000:]
    rows = metrics(tmp_path / "refill" / "csv" / "metrics.csv")
    assert len(rows) == 3
    for row in rows:
        rounds = float(row["rollout/refill_rounds"])
        assert 0 <= rounds <= 2 and float(row["rollout/refill_episodes"]) == rounds * 4 * 4  # B x K per round
    assert sum(float(r["rollout/refill_rounds"]) for r in rows) > 0
    # the same first rollout; refilled, the step holds fewer groups without signal
    first_plain = metrics(tmp_path / "plain" / "csv" / "metrics.csv")[0]
    assert float(rows[0]["rollout/zero_std_frac"]) < float(first_plain["rollout/zero_std_frac"])
    # what triggered the refill: the first rollout's share, before any round
    assert float(rows[0]["rollout/zero_std_frac_before_refill"]) == float(first_plain["rollout/zero_std_frac"])


@pytest.mark.integration
def test_a_constant_reward_warns_at_the_first_fruitless_round_and_rounds_are_bounded(tmp_path):
    result = run_app("train.py", *FORMAT_ONLY, "steps=1", "algo.max_refill_rounds=3",
                     "reward._target_=tests.helpers.constant_reward", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if "Warning: DAPO refill" in line]
    assert len(warnings) == 1 and "DAPO refill: round 1 of RL step 1" in warnings[0]
    line = one_line_error(run_app("train.py", *FORMAT_ONLY, "algo.max_refill_rounds=100000", cwd=tmp_path))
    assert line.startswith("error: algo.max_refill_rounds=100000 is more than 100")


@pytest.mark.integration
def test_a_resume_with_refills_is_exact(tmp_path):
    args = [*FORMAT_ONLY, "algo.max_refill_rounds=2"]
    straight = run_app("train.py", *args, "steps=2", "hydra.run.dir=straight", cwd=tmp_path)
    assert straight.returncode == 0, straight.stderr[-3000:]
    first = run_app("train.py", *args, "steps=1", "hydra.run.dir=resumed", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = run_app("train.py", *args, "steps=2", "hydra.run.dir=resumed", "ckpt_path=last", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected = metrics(tmp_path / "straight" / "csv" / "metrics.csv")[-1]
    got = metrics(tmp_path / "resumed" / "csv" / "metrics.csv")[-1]
    for key in ("rollout/refill_rounds", "rollout/refill_episodes", "objective/scores", "loss/policy_avg",
                "rollout/zero_std_frac"):
        assert got[key] == expected[key], key


def test_a_served_teachers_top_tokens_are_padded_along_the_response():
    """(N,R,K) fields pad their response dimension: ids with 0, logprobs with -inf (padding to every divergence)."""
    first, extra = small_rollout(2, 3, [1.0, 0.0], token=5), small_rollout(2, 1, [0.0, 1.0], token=7)
    for rollout, width in ((first, 3), (extra, 1)):
        rollout.teacher_top_ids = torch.ones(2, width, 4, dtype=torch.long)
        rollout.teacher_top_logprobs = torch.full((2, width, 4), -0.5)
    merged = concat_rollouts([first, extra], pad_id=0)
    assert merged.teacher_top_ids.shape == merged.teacher_top_logprobs.shape == (4, 3, 4)
    assert merged.teacher_top_ids[2:, 1:].eq(0).all() and merged.teacher_top_logprobs[2:, 1:].isneginf().all()
    assert merged.teacher_top_logprobs[2:, :1].eq(-0.5).all() and merged.teacher_top_ids[:2].eq(1).all()
