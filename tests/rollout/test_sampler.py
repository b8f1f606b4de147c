"""The Sampler owns what draws: engines see its typed SamplingContext (never the LightningModule), a draw carries the
version it was asked for, and a worker's Sampler draws with its own policy copy and random stream."""

import copy

import pytest
import torch

from lit_rlhf.rollout import RolloutEngine
from lit_rlhf.rollout.context import SamplingContext
from lit_rlhf.rollout.sampler import Sampler
from tests.conftest import make_datamodule, make_rloo


class Recording(RolloutEngine):
    """Answers " good" + the stop token and records what each call was handed."""

    def __init__(self):
        self.seen: list[SamplingContext] = []

    def generate_turn(self, sampling, contexts, max_new_tokens, from_reference, greedy):
        self.seen.append(sampling)
        answer = sampling.tokenizer(" good", add_special_tokens=False)["input_ids"] + [sampling.stop_token_id]
        return [(answer[:max_new_tokens], None) for _ in contexts]


class CountingReward:
    def __init__(self):
        self.calls = 0

    def __call__(self, prompts, completions):
        self.calls += 1
        return torch.tensor([float(len(c)) for c in completions])


def prompt_batch():
    datamodule = make_datamodule(batch_size=2)
    datamodule.setup()
    return next(iter(datamodule.train_dataloader()))


def test_an_engine_sees_the_sampling_context_and_the_version_it_draws_for():
    engine, reward = Recording(), CountingReward()
    module = make_rloo(rollout_engine=engine, reward=reward, response_length=6, temperature=0.7)
    module.configure_model()
    assert module.sampler.engine is engine and module.reward is reward  # the module's are the sampler's
    timings = {}
    drawn = module.sampler.draw(prompt_batch(), 3, version=5, timings=timings)
    sampling = engine.seen[0]
    assert type(sampling) is SamplingContext and not hasattr(sampling, "hparams") and not hasattr(sampling, "trainer")
    assert sampling.version == 5 and sampling.policy is module.policy and sampling.settings.temperature == 0.7
    assert sampling.trajectory_length == 6 and sampling.settings.model["name_or_path"] == module.hparams.model[
        "name_or_path"]
    assert drawn.completions == [" good"] * 6 and drawn.has_stop.all()
    scores, components = drawn.scored()
    assert scores.tolist() == [5.0] * 6 and reward.calls == 1 and list(components) == ["CountingReward"]
    assert set(timings) == {"time/reward_s", "time/reward_wait_s"}


def test_a_worker_draws_with_its_own_policy_and_random_stream_and_shares_the_rest():
    module = make_rloo(response_length=4)
    module.configure_model()
    copy_of_policy = copy.deepcopy(module.policy)
    worker = module.sampler.for_worker(copy_of_policy)
    worker.context.random_stream = torch.Generator().manual_seed(3)
    assert worker.context.policy is copy_of_policy and module.sampler.context.policy is module.policy
    assert module.sampler.context.random_stream is None
    assert worker.engine is module.sampler.engine and worker.reward is module.sampler.reward
    worker.draw(prompt_batch(), 2, version=7)
    assert worker.context.version == 7 and module.sampler.context.version == 0


def test_the_environment_set_on_the_module_is_the_sampler_s():
    from lit_rlhf.envs import EnvSpec
    from tests.envs.scripted import CountingEnvironment

    module = make_rloo()
    spec = EnvSpec(CountingEnvironment, max_turns=2, max_tokens=40)
    module.environment = spec
    assert module.sampler.context.environment is spec and module.sampler.context.trajectory_length == 40


class NeedsAnswer(CountingReward):
    required_columns = ["answer"]


def test_the_sampler_checks_the_rows_for_its_reward_s_columns_before_training():
    from lit_rlhf.errors import ConfigError

    sampler = Sampler(RolloutEngine(), NeedsAnswer(), make_rloo().sampler.context.settings)
    datamodule = make_datamodule()
    datamodule.setup()
    with pytest.raises(ConfigError, match=r"the reward NeedsAnswer needs the dataset column 'answer', which the "
                                          r"prompts' rows do not have"):
        sampler.check_rows(datamodule.rows, "prompts")
    sampler.reward = CountingReward()
    sampler.check_rows(datamodule.rows, "prompts")  # nothing it needs is missing
    sampler.use_gold(NeedsAnswer())  # a gold reward's columns too
    with pytest.raises(ConfigError, match=r"the gold reward NeedsAnswer needs the dataset column 'answer'"):
        sampler.check_rows(datamodule.rows, "prompts")


def test_a_gold_reward_set_that_needs_a_missing_column_is_one_line_naming_it():
    from lit_rlhf.errors import ConfigError
    from lit_rlhf.rewards import WeightedSum
    from lit_rlhf.rollout.scoring import call_checked

    def correct(prompts, completions, answer):
        return [1.0] * len(completions)

    with pytest.raises(ConfigError, match=r"the reward gold needs the dataset column 'answer', which the prompts' "
                                          r"rows do not have \(they have \['source'\]\)"):  # not correct()'s TypeError
        call_checked("gold", WeightedSum({"correct": correct}), ["p"], ["c"], {"source": ["s"]})


def test_a_completion_no_reward_applies_to_scores_0_and_is_said_once(recwarn):
    def odd_only(completions, **kwargs):
        return [None if i % 2 == 0 else 1.0 for i in range(len(completions))]

    module = make_rloo(rollout_engine=Recording(), reward=odd_only)
    module.configure_model()
    total, parts = module.sampler.score_components(["p", "q", "r", "s"], ["a", "b", "c", "d"])
    assert total.tolist() == [0.0, 1.0, 0.0, 1.0] and parts["odd_only"][0].isnan()
    module.sampler.score_components(["p", "q"], ["a", "b"])
    said = [str(w.message) for w in recwarn if "scored by no reward" in str(w.message)]
    assert len(said) == 1 and said[0].startswith("2 of 4 completions were scored by no reward")


def test_a_reward_that_reads_completion_ids_gets_each_completions_tokens_with_its_stop_token():
    seen = []

    def token_count(completion_ids, **kwargs):
        seen.append(completion_ids)
        return [float(len(ids)) for ids in completion_ids]

    module = make_rloo(rollout_engine=Recording(), reward=token_count, response_length=6)
    module.configure_model()
    drawn = module.sampler.draw(prompt_batch(), 2, version=0)
    answer = module.tokenizer(" good", add_special_tokens=False)["input_ids"] + [module.sampler.context.stop_token_id]
    assert seen == [[answer] * 4] and drawn.scored()[0].tolist() == [float(len(answer))] * 4
    assert "completion_ids" not in drawn.columns  # made for the rewards, not kept with the rollout


def test_a_conversational_datasets_prompts_reach_a_reward_called_as_trl_calls_it_as_messages(tiny_path, tmp_path):
    """TRL passes a conversational dataset's reward functions (which take **kwargs, as TRL requires) the prompts as
    messages and each completion as [{"role": "assistant", "content": ...}]; a reward without **kwargs, and the
    library's own, get the texts."""
    from lit_rlhf.rewards import VaderSentiment, WeightedSum
    from tests.data.test_datamodule import conversations_file, tokenizer_with_template

    _, folder = tokenizer_with_template(tiny_path, tmp_path)
    datamodule = make_datamodule(tokenizer=folder, dataset=conversations_file(tmp_path), num_eval_prompts=4,
                                 batch_size=2)
    datamodule.setup()
    batch = next(iter(datamodule.train_dataloader()))
    seen = {}

    def trl_style(prompts, completions, answer, **kwargs):  # as TRL's docs write one for conversational data
        seen["trl"] = prompts, completions, answer
        return [float(completion[0]["content"] == " good") for completion in completions]

    def texts(prompts, completions, answer):
        seen["texts"] = prompts, completions
        return [0.0] * len(completions)

    reward = WeightedSum({"trl": trl_style, "texts": texts, "vader": VaderSentiment()})
    module = make_rloo(rollout_engine=Recording(), reward=reward)
    module.configure_model()
    drawn = module.sampler.draw(batch, 2, version=0)
    rows = {row.columns["answer"]: row.messages for row in datamodule.rows}
    prompts, completions, answers = seen["trl"]
    assert prompts == [rows[answer] for answer in answers] and len(prompts) == 4
    assert completions == [[{"role": "assistant", "content": " good"}]] * 4
    assert drawn.scored()[1]["trl"].tolist() == [1.0] * 4
    prompt_texts, completion_texts = seen["texts"]
    assert completion_texts == [" good"] * 4 and prompt_texts[0].endswith("Review:")
    assert drawn.scored()[1]["vader"].tolist() == VaderSentiment()(prompt_texts, completion_texts).tolist()
