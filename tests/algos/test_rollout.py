import pytest
import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.models.forwards import batched_logprobs
from lit_rlhf.ops import response_mask_from_stop
from tests.conftest import make_datamodule, make_rloo


@pytest.fixture(scope="module")
def module_and_batch():
    torch.manual_seed(0)
    module = make_rloo()
    module.configure_model()
    dm = make_datamodule()
    dm.setup()
    return module, next(iter(dm.val_dataloader()))  # prompts of different lengths, left-padded


def test_logprobs_are_those_generate_sampled_from(module_and_batch):
    """Pure sampling + temperature: generate's processed scores are exactly softmax(logits / T)."""
    module, batch = module_and_batch
    torch.manual_seed(1)
    out = module.policy.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                 generation_config=module.rollout_engine.generation_config, output_scores=True,
                                 return_dict_in_generate=True)
    prompt_len = batch["input_ids"].shape[1]
    responses = out.sequences[:, prompt_len:]  # N,R
    mask = response_mask_from_stop(responses, module.stop_token_id)
    sampled = torch.log_softmax(torch.stack(out.scores, dim=1).float(), dim=-1)  # N,R,V
    sampled_lp = sampled.gather(-1, responses.unsqueeze(-1)).squeeze(-1)  # N,R
    ours = batched_logprobs(module.policy, batch["input_ids"], batch["attention_mask"], responses, mask,
                            module.hparams.temperature)
    torch.testing.assert_close(ours[mask], sampled_lp[mask], atol=1e-4, rtol=1e-4)


def test_kl_is_exactly_zero_while_policy_equals_reference(module_and_batch):
    module, batch = module_and_batch
    rollout = module.rollout(batch)
    assert len(rollout) == 8 * 4
    assert torch.equal(rollout.logprobs, rollout.ref_logprobs)
    penalty = module.kl_controller.penalty(rollout)
    kl, non_score = penalty.kl, penalty.non_score_reward
    assert torch.equal(kl, torch.zeros_like(kl)) and torch.equal(non_score, torch.zeros_like(kl))


def test_rollout_truncates_after_stop_and_penalizes_missing_eos(module_and_batch):
    module, batch = module_and_batch
    torch.manual_seed(2)
    r = module.rollout(batch)
    pad, stop = module.tokenizer.pad_token_id, module.stop_token_id
    assert r.responses.shape == (32, module.hparams.response_length)
    assert (r.responses[~r.response_mask] == pad).all()
    torch.testing.assert_close(r.scores, r.raw_scores - 1.0 * (~r.contains_stop).float())
    assert r.contains_stop.tolist() == [(row == stop).any().item() for row in r.responses]
    # the rewards that read it get the same, as the `stopped` column (a reward model then scores the EOS too)
    assert r.columns["stopped"] == r.contains_stop.tolist() and 0 < sum(r.columns["stopped"]) < 32
    assert r.prompt_index.tolist() == [i // 4 for i in range(32)]


@pytest.mark.parametrize("kwargs", [{"top_k": 50}, {"top_p": 0.9}, {"min_new_tokens": 4}])
def test_sampling_that_biases_the_distribution_is_refused_unless_allowed(kwargs):
    with pytest.raises(ConfigError, match="KL-divergence negative") as err:
        make_rloo(generation_kwargs=kwargs)
    assert "allow_biased_sampling" in str(err.value)
    allowed = make_rloo(generation_kwargs=kwargs, allow_biased_sampling=True)
    allowed.configure_model()
    assert getattr(allowed.rollout_engine.generation_config, next(iter(kwargs))) == next(iter(kwargs.values()))


@pytest.mark.parametrize("key, value, fix", [
    ("temperature", 0.5, "set algo.temperature instead"), ("do_sample", False, "rollouts always sample"),
    ("max_new_tokens", 4, "set algo.response_length instead"), ("eos_token_id", 3, "set algo.stop_token instead"),
    ("num_return_sequences", 2, "set algo.rloo_k (RLOO), algo.num_generations (GRPO)")])
def test_generation_kwargs_that_the_settings_own_are_refused_even_when_bias_is_allowed(key, value, fix):
    with pytest.raises(ConfigError, match=rf"algo.generation_kwargs.{key}={value!r} is set by lit_rlhf") as err:
        make_rloo(generation_kwargs={key: value}, allow_biased_sampling=True)
    assert fix in str(err.value)


def test_beam_search_is_refused_as_biased_sampling():
    with pytest.raises(ConfigError, match="bias sampling"):
        make_rloo(generation_kwargs={"num_beams": 4})


def test_bad_algorithm_settings_name_the_value():
    with pytest.raises(ConfigError, match="rloo_k=1"):
        make_rloo(rloo_k=1)
    with pytest.raises(ConfigError, match="kl_estimator='kx'"):
        make_rloo(kl_estimator="kx")
    with pytest.raises(ConfigError, match="stop_token='<nope>'"):
        make_rloo(stop_token="<nope>").configure_model()


@pytest.mark.parametrize("kwargs", [{"greedy": True}, {"from_reference": True}])
def test_a_training_rollout_samples_from_the_policy(module_and_batch, kwargs):
    module, batch = module_and_batch
    with pytest.raises(ValueError, match="a training rollout samples from the policy"):
        module.rollout(batch, **kwargs)
