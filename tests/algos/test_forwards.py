"""The weights of the per-token policy loss (algos/forwards.py: policy_loss_weights)."""

from types import SimpleNamespace

import torch

from lit_rlhf.algos.forwards import policy_loss_weights
from lit_rlhf.ops import vespo_weights
from lit_rlhf.step.rollout import Rollout


def test_vespo_folds_the_engine_weights_into_its_sequence_weight_instead_of_multiplying_each_token():
    """TRL's VESPO adds the engine's log weights to the sequence's log ratio; every other policy loss multiplies each
    token's loss by its engine weight."""
    gen = torch.Generator().manual_seed(0)
    n, r = 4, 3
    old = -torch.rand(n, r, generator=gen)
    new = old + 0.1 * torch.randn(n, r, generator=gen)
    mask = torch.arange(r) < torch.tensor([[3], [2], [3], [1]])
    engine = (torch.rand(n, r, generator=gen) + 0.5) * mask  # pi_old / pi_sampler, 0 off the response
    zeros = torch.zeros(n)
    rollout = Rollout(queries=torch.ones(n, 2, dtype=torch.long), query_mask=torch.ones(n, 2, dtype=torch.long),
                      responses=torch.ones(n, r, dtype=torch.long), response_mask=mask, prompt_index=torch.arange(n),
                      logprobs=old, ref_logprobs=old, scores=zeros, raw_scores=zeros, contains_stop=zeros.bool(),
                      is_weights=engine)
    advantages = torch.tensor([[1.0], [-1.0], [0.5], [-0.2]]).expand(n, r)
    vespo = SimpleNamespace(policy_loss="vespo", vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0,
                            vespo_lambda_neg=2.0, off_policy_mask_threshold=None, top_entropy_quantile=1.0)
    idx = torch.arange(n)
    weights, stats = policy_loss_weights(new, None, rollout, advantages, idx, vespo, pool=None)
    phi = vespo_weights(new, old, mask, advantages, engine, 2.0, 3.0, 3.0, 2.0)
    torch.testing.assert_close(weights, phi)
    assert not torch.allclose(weights * mask, vespo_weights(new, old, mask, advantages, None, 2.0, 3.0, 3.0, 2.0)
                              * engine)
    torch.testing.assert_close(stats["vespo/phi_seq_mean"], phi[:, 0].mean())
    clip = SimpleNamespace(**{**vars(vespo), "policy_loss": "clip"})
    assert torch.equal(policy_loss_weights(new, None, rollout, advantages, idx, clip, pool=None)[0], engine)


def test_sequences_longer_than_the_model_s_context_are_said_once_and_a_short_token_budget_refused():
    """The tiny model was trained for 256 positions: prompts and responses that make more are said once at the fit's
    start (a model with learned positions fails on them; one with rotary ones runs on positions it never saw)."""
    import warnings

    import pytest
    from transformers import AutoModelForCausalLM

    from lit_rlhf.algos.forwards import check_sequence_length
    from lit_rlhf.errors import ConfigError
    from tests.conftest import TINY_PYTHIA

    model = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_sequence_length(None, 60, 196, model)  # 256: the whole context, no more
        check_sequence_length(None, 61, 196, model)
        check_sequence_length(None, 61, 196, model)  # the same fit's check again: said once
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and said[0].startswith("the longest prompt (61 tokens) and the response (196: "
                                                 "algo.response_length, or env.max_tokens for episodes) make 257 "
                                                 "positions, past the model's context of 256"), said
    with pytest.raises(ConfigError, match=r"^algo.max_tokens_per_micro_batch=100 is below the longest sequence"):
        check_sequence_length(100, 60, 50, model)
