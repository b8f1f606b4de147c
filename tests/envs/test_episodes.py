"""Episodes through the real loop (RolloutEngine.sample with a scripted engine) and the module's rollout:
token-in/token-out trajectories, model-token masks, tool failures as observations, the limits."""

import pytest
import torch

from lit_rlhf.data.datamodule import batch_to
from lit_rlhf.envs import EnvSpec
from lit_rlhf.envs.reward import EnvironmentReward
from lit_rlhf.rollout.trajectory import episode_stats
from tests.conftest import make_datamodule, make_rloo
from tests.envs.scripted import CountingEnvironment, EchoEnvironment, ScriptedEngine, odd_ids


def episode_module(turns, env=EchoEnvironment, stop=True, **spec):
    engine = ScriptedEngine(turns, stop=stop)
    module = make_rloo(rollout_engine=engine, environment=EnvSpec(env, **{"max_tokens": 96, **spec}),
                       response_length=32)
    module.configure_model()
    dm = make_datamodule()
    dm.setup()
    return module, engine, next(iter(dm.val_dataloader()))


def test_sampled_ids_are_kept_as_sampled_and_observations_are_tokenized_on_their_own():
    module, engine, batch = episode_module([" <call>echo(hi)</call>", " done"])
    rollout = module.rollout(batch)
    tok, stop = module.tokenizer, module.stop_token_id
    first, second = odd_ids(tok, " <call>echo(hi)</call>") + [stop], odd_ids(tok, " done") + [stop]
    observation = tok(" <result>echo:hi</result>", add_special_tokens=False)["input_ids"]
    expected = first + observation + second
    length = len(expected)
    for n in range(len(rollout)):
        assert rollout.responses[n, :length].tolist() == expected
        assert (rollout.responses[n, length:] == tok.pad_token_id).all()
        assert rollout.response_mask[n].tolist() == [True] * len(first) + [False] * len(observation) + \
            [True] * len(second) + [False] * (rollout.responses.shape[1] - length)
        assert rollout.context_mask[n].tolist() == [True] * length + [False] * (rollout.responses.shape[1] - length)
    # the second turn continued from exactly the ids of the first plus the observation's own
    prompt = batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist()
    assert engine.calls[1][0] == prompt + first + observation
    # re-tokenizing the conversation would have changed the ids: the drift the loop cannot have
    assert tok(tok.decode(expected), add_special_tokens=False)["input_ids"] != expected
    assert rollout.conversations[0] == [("model", " <call>echo(hi)</call>"), ("env", " <result>echo:hi</result>"),
                                        ("model", " done")]
    assert rollout.columns["tool_calls"][0] == 1 and rollout.columns["tool_errors"][0] == 0
    assert rollout.columns["turns"][0] == 2 and rollout.columns["final_response"][0] == " done"
    assert bool(rollout.contains_stop.all())


def slow_logprobs(model, prompt: list[int], trajectory: list[int], temperature: float) -> torch.Tensor:
    """Each trajectory token's logprob from one unpadded forward of prompt + trajectory."""
    ids = torch.tensor([prompt + trajectory])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1] / temperature
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(trajectory).unsqueeze(-1)).squeeze(-1)


def test_logprobs_and_kl_are_on_model_tokens_only_and_match_an_unpadded_forward():
    module, _, batch = episode_module([" <call>echo(abc)</call>", " ok"])
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.policy.parameters():  # adapters away from zero: policy and reference differ
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    rollout = module.rollout(batch, for_training=False)
    with torch.no_grad():
        for n in (0, 5, 31):
            prompt = rollout.queries[n][rollout.query_mask[n].bool()].tolist()
            length = int(rollout.context_mask[n].sum())
            trajectory = rollout.responses[n, :length].tolist()
            model_tokens = rollout.response_mask[n, :length]
            expected = slow_logprobs(module.policy, prompt, trajectory, module.hparams.temperature)
            torch.testing.assert_close(rollout.logprobs[n, :length][model_tokens], expected[model_tokens],
                                       atol=1e-4, rtol=1e-4)
            with module.reference.active() as reference:
                expected_ref = slow_logprobs(reference, prompt, trajectory, module.hparams.temperature)
            torch.testing.assert_close(rollout.ref_logprobs[n, :length][model_tokens], expected_ref[model_tokens],
                                       atol=1e-4, rtol=1e-4)
    off_model = ~rollout.response_mask
    assert (rollout.logprobs[off_model] == 0).all() and (rollout.ref_logprobs[off_model] == 0).all()
    kl = module.kl_controller.penalty(rollout).kl
    assert (kl[off_model] == 0).all() and (kl[rollout.response_mask] != 0).any()


@pytest.mark.parametrize("turn, error", [
    (" <call>nope(x)</call>", "error: unknown tool 'nope'"),
    (" <call>fail(x)</call>", "error: RuntimeError: the tool broke"),
    (" <call>hang(x)</call>", "error: TimeoutError: no answer within 0.5 s"),
    (" <call>echo x</call>", "error: malformed call"),
    (" <call>echo(x)", "error: a <call> without its </call>"),
    (" <call>echo(a, b)</call>", "error: TypeError"),
])
def test_a_failing_tool_call_is_an_observation_the_model_sees_and_is_counted(turn, error):
    module, _, batch = episode_module([turn, " done"], tool_timeout_s=0.5)
    rollout = module.rollout(batch_to(batch, module.device, num_prompts=2), samples_per_prompt=1)
    assert rollout.conversations[0][1][0] == "env" and rollout.conversations[0][1][1].startswith(f" <result>{error}")
    assert rollout.columns["tool_errors"] == [1, 1] and rollout.columns["turns"] == [2, 2]
    stats = episode_stats(rollout.columns, rollout.response_mask, rollout.context_mask)
    assert stats["rollout/tool_errors"] == 1.0 and stats["rollout/tool_calls_mean"] == 1.0


def test_an_observation_past_the_token_budget_ends_the_episode_flagged_and_so_does_max_turns():
    module, _, batch = episode_module([" <call>echo(hi)</call>"] * 5, max_tokens=30)
    rollout = module.rollout(batch)
    assert rollout.columns["truncated"] == [True] * len(rollout)
    assert int(rollout.context_mask.sum(1).max()) <= 30 and rollout.columns["turns"][0] == 1
    module, _, batch = episode_module([" <call>echo(hi)</call>"] * 5, max_turns=2)
    rollout = module.rollout(batch)
    assert rollout.columns["turns"][0] == 2 and rollout.columns["truncated"][0]
    stats = episode_stats(rollout.columns, rollout.response_mask, rollout.context_mask)
    assert stats["rollout/truncated_frac"] == 1.0 and stats["rollout/turns_mean"] == 2.0
    assert 0 < stats["rollout/env_token_frac"] < 1


def test_a_turn_without_the_stop_token_ends_the_episode_without_it():
    module, _, batch = episode_module([" <call>echo(hi)</call>"], stop=False)
    rollout = module.rollout(batch)
    assert not rollout.contains_stop.any() and rollout.columns["turns"][0] == 1


def test_step_hook_environments_answer_and_score_the_episode():
    module, _, batch = episode_module([" a", " b", " c", " d"], env=CountingEnvironment, max_turns=5)
    module.reward = EnvironmentReward()
    rollout = module.rollout(batch)
    assert [text for _, text in rollout.conversations[0]] == [" a", " next", " b", " next", " c"]
    assert rollout.raw_scores.tolist() == [3.0] * len(rollout)


def test_without_an_environment_an_episode_is_one_turn_with_no_context_mask():
    engine = ScriptedEngine([" fine"])
    module = make_rloo(rollout_engine=engine, response_length=8)
    module.configure_model()
    dm = make_datamodule()
    dm.setup()
    rollout = module.rollout(next(iter(dm.val_dataloader())))
    assert rollout.context_mask is None and rollout.conversations == [] and len(engine.calls) == 1
    assert int(rollout.response_mask[0].sum()) == len(odd_ids(module.tokenizer, " fine")) + 1


def test_an_environment_that_raises_when_built_or_scoring_is_one_line():
    from lit_rlhf.errors import ConfigError
    from tests.envs.scripted import BadReward, Exploding

    module, _, batch = episode_module([" a"], env=Exploding)
    with pytest.raises(ConfigError, match="the environment Exploding raised RuntimeError: boom when built from a row"):
        module.rollout(batch)
    module, _, batch = episode_module([" a"], env=BadReward)
    with pytest.raises(ConfigError, match="the environment BadReward's reward\\(\\) raised KeyError: 'score'"):
        module.rollout(batch)


def test_a_huge_tool_result_or_step_observation_is_cut_in_characters_before_tokenizing():
    """5 MB of text is cut to what env.max_tokens can still hold (in characters) and the model is told; nothing
    tokenizes the 5 MB (the cut text is bounded, so the episode ends flagged within the budget, quickly)."""
    import time

    from tests.envs.scripted import HostileEnvironment, HugeStepEnvironment

    for env, turn in ((HostileEnvironment, " <call>huge(x)</call>"), (HugeStepEnvironment, " hello")):
        module, _, batch = episode_module([turn, " done"], env=env, max_tokens=64)
        start = time.monotonic()
        rollout = module.rollout(batch)
        assert time.monotonic() - start < 60  # tokenizing 5 MB per episode took minutes
        assert rollout.columns["truncated"] == [True] * len(rollout)
        assert int(rollout.context_mask.sum(1).max()) <= 64


def test_cut_text_says_what_was_cut():
    from lit_rlhf.rollout.trajectory import cut_text

    assert cut_text("abc", 3) == "abc"
    assert cut_text("abcdef", 2) == "ab [cut: 6 characters, 2 shown (env.max_tokens)]"


def test_a_cut_observation_that_fits_is_shown_to_the_model_with_its_note():
    from lit_rlhf.rollout.trajectory import Episode, environment_answer
    from tests.envs.scripted import HostileEnvironment

    spec = EnvSpec(HostileEnvironment)
    episode = Episode([1], HostileEnvironment())
    observation, done = environment_answer(spec, episode, " <call>huge(x)</call>", room_chars=10)
    assert observation == " <result>xxxxxxxxxx [cut: 5000000 characters, 10 shown (env.max_tokens)]</result>"
    assert not done and episode.tool_errors == 0


def test_calls_in_a_turn_are_bounded_in_number_and_in_total_time():
    """60 calls to a hanging tool: at most env.max_tool_calls run, and together within env.turn_timeout_s."""
    import threading
    import time

    from lit_rlhf.envs.tools import abandoned_calls
    from lit_rlhf.rollout.trajectory import Episode, environment_answer
    from tests.envs.scripted import HostileEnvironment

    spec = EnvSpec(HostileEnvironment, tool_timeout_s=0.3, turn_timeout_s=0.5, max_tool_calls=4)
    episode = Episode([1], HostileEnvironment())
    threads_before, start = threading.active_count(), time.monotonic()
    observation, _ = environment_answer(spec, episode, " <call>hang(x)</call>" * 60, room_chars=10_000)
    assert time.monotonic() - start < 1.5  # not 60 x 0.3 s
    results = observation.split("</result>")[:-1]
    assert len(results) == 60 and episode.tool_calls == 60 and episode.tool_errors == 60
    assert "no answer within 0.3 s" in results[0]
    assert "TimeoutError" in results[1] and "within 0.3 s" not in results[1]  # what was left of the turn's 0.5 s
    assert all("the turn's 0.5 s for tool calls are spent" in r for r in results[2:4])
    assert all("at most 4 tool calls a turn" in r for r in results[4:])
    assert threading.active_count() - threads_before <= 2 and abandoned_calls() >= 2


def test_abandoned_calls_still_running_are_bounded(monkeypatch):
    import time

    from lit_rlhf.envs import tools

    monkeypatch.setattr(tools, "MAX_ABANDONED_CALLS", tools.abandoned_calls() + 4)  # others' may still run
    started = []

    def sleepy():
        started.append(1)
        time.sleep(1.0)

    results = [tools.run_tool_call(tools.ToolCall("sleepy"), {"sleepy": sleepy}, 0.01) for _ in range(9)]
    assert len(started) == 4  # the rest were not started
    assert all(failed for _, failed in results) and "not started" in results[-1][0]
    time.sleep(1.2)  # the sleepers end; later tests start with room


@pytest.mark.parametrize("turn, error", [
    (" <call>quits(exit)</call>", "error: SystemExit: 0"),
    (" <call>quits(ctrl-c)</call>", "error: KeyboardInterrupt: "),
    (" <call>unprintable(x)</call>", "error: ValueError: no text for you"),
])
def test_a_tool_that_exits_interrupts_or_cannot_be_shown_fails_its_call_not_the_run(turn, error):
    from tests.envs.scripted import HostileEnvironment

    module, _, batch = episode_module([turn, " done"], env=HostileEnvironment)
    rollout = module.rollout(batch_to(batch, module.device, num_prompts=2), samples_per_prompt=1)
    assert rollout.conversations[0][1][1].startswith(f" <result>{error}")
    assert rollout.columns["tool_errors"] == [1, 1]


def test_a_step_returning_no_text_is_one_line_naming_the_environment():
    from lit_rlhf.errors import ConfigError
    from tests.envs.scripted import NumberStepEnvironment

    module, _, batch = episode_module([" a", " b"], env=NumberStepEnvironment)
    with pytest.raises(ConfigError, match=r"the environment NumberStepEnvironment's step\(\) returned \(42, False\); "
                                          r"step\(\) returns \(observation text, done\)"):
        module.rollout(batch)


@pytest.mark.parametrize("max_concurrency, expected", [(8, 8), (3, 3), (1, 1)])
def test_the_tool_calls_of_live_episodes_run_at_once_up_to_max_concurrency(max_concurrency, expected):
    """8 episodes call a tool in the same turn: with env.max_concurrency=8 all 8 calls are in flight together (a turn
    costs about one call's latency), with 3 at most 3, with 1 one after another."""
    from lit_rlhf.rollout.trajectory import Episode, answer_concurrently
    from tests.envs import scripted

    scripted.IN_FLIGHT = scripted.InFlight(expect=expected)
    spec = EnvSpec(scripted.ConcurrentEnvironment, max_concurrency=max_concurrency)
    episodes = [Episode([1], scripted.ConcurrentEnvironment()) for _ in range(8)]
    answers = answer_concurrently(spec, [(e, " <call>wait_together(x)</call>", 1000) for e in episodes])
    assert answers == [(" <result>ok</result>", False)] * 8
    assert scripted.IN_FLIGHT.most == expected


def test_async_def_tools_and_step_are_awaited():
    from lit_rlhf.rollout.trajectory import Episode, environment_answer
    from tests.envs.scripted import AsyncStepEnvironment, ConcurrentEnvironment

    spec = EnvSpec(ConcurrentEnvironment)
    episode = Episode([1], ConcurrentEnvironment())
    assert environment_answer(spec, episode, " <call>async_echo(hi)</call>", 1000) == (" <result>async:hi</result>",
                                                                                      False)
    spec = EnvSpec(AsyncStepEnvironment)
    assert environment_answer(spec, Episode([1], AsyncStepEnvironment()), " hello", 1000) == (" awaited", False)


def test_concurrent_episodes_give_the_rollout_that_one_at_a_time_gives():
    rollouts = []
    for max_concurrency in (1, 8):
        module, _, batch = episode_module([" <call>echo(hi)</call>", " <call>fail(x)</call>", " done"],
                                          max_turns=3, max_concurrency=max_concurrency)
        rollouts.append(module.rollout(batch))
    one, many = rollouts
    assert torch.equal(one.responses, many.responses) and one.conversations == many.conversations
    assert one.columns["tool_errors"] == many.columns["tool_errors"]
