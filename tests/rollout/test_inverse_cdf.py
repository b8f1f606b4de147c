"""The next token drawn by inverse transform sampling (rollout.token_sampler=inverse_cdf, the default): the frequencies
of softmax(logits / temperature), zero-probability tokens never, generate() takes the drawn token, and
torch.multinomial (generate()'s own sampler) runs only where asked for or where settings bias sampling."""

import pytest
import torch
from transformers import AutoConfig

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.errors import ConfigError
from lit_rlhf.rollout import HFEngine, inverse_cdf
from lit_rlhf.rollout.inverse_cdf import InverseCDFSampler, sample_inverse_cdf
from tests.conftest import make_datamodule, make_rloo


def assert_frequencies(tokens: torch.Tensor, probs: torch.Tensor, sigmas: float = 5.0) -> None:
    """Each token's frequency within `sigmas` standard errors of its probability (binomial)."""
    n = len(tokens)
    counts = torch.bincount(tokens, minlength=len(probs)).double()
    stderr = (probs * (1 - probs) / n).sqrt()
    assert ((counts / n - probs).abs() <= sigmas * stderr + 1e-12).all(), (counts / n, probs)


def test_draws_follow_the_softmax_and_never_a_zero_probability_token():
    logits = torch.tensor([2.0, -1.0, float("-inf"), 0.5, 0.0, float("-inf")])
    probs = torch.softmax(logits.double(), -1)  # [0.6285, 0.0313, 0, 0.1402, 0.0851 ... ]: the hand reference
    torch.manual_seed(0)
    tokens = sample_inverse_cdf(logits.expand(200_000, -1))
    assert not torch.isin(tokens, torch.tensor([2, 5])).any()
    assert_frequencies(tokens, probs)
    # a distribution that is all on the last token, and rows that differ
    rows = torch.tensor([[float("-inf")] * 3 + [0.0], [0.0, float("-inf"), float("-inf"), float("-inf")]])
    assert sample_inverse_cdf(rows).tolist() == [3, 0]


def test_the_processor_leaves_only_the_drawn_token_finite_at_its_temperature():
    scores = torch.tensor([[1.0, 0.0, -1.0]]).expand(100_000, -1)
    torch.manual_seed(1)
    out = InverseCDFSampler(temperature=0.5)(None, scores)
    assert (torch.isfinite(out).sum(-1) == 1).all() and (out.max(-1).values == 0).all()
    assert_frequencies(out.argmax(-1), torch.softmax(scores[0].double() / 0.5, -1))


def one_level_reference(logits: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """The obviously correct draw: float64 softmax, its cumulative sums, the first token reaching (1 - u) x total."""
    cumulative = torch.softmax(logits.double(), -1).cumsum(-1)
    return torch.searchsorted(cumulative, (1 - uniform) * cumulative[:, -1:]).squeeze(-1)


@pytest.mark.parametrize("levels", [1, 2])
@pytest.mark.parametrize("vocabulary", [5, 256, 979, 1024, 50304])
def test_either_search_draws_what_one_float64_search_over_the_whole_vocabulary_draws(vocabulary, levels,
                                                                                       monkeypatch):
    """Smaller than a block, whole blocks, and a short last block; a third of the tokens impossible, peaked and flat
    rows; uniforms at both ends of [0, 1) and random ones."""
    monkeypatch.setattr(inverse_cdf, "ONE_LEVEL_MAX", 10**12 if levels == 1 else 0)
    torch.manual_seed(5)
    rows = 2000 if vocabulary < 50000 else 300
    logits = torch.randn(rows, vocabulary) * torch.tensor([0.5, 3.0, 30.0]).repeat(rows // 3 + 1)[:rows, None]
    logits[:, ::3] = float("-inf")
    uniform = torch.rand(rows, 1, dtype=torch.float64)
    uniform[:3] = torch.tensor([[0.0], [1 - 2**-53], [0.5]], dtype=torch.float64)
    tokens = sample_inverse_cdf(logits, uniform)
    assert torch.equal(tokens, one_level_reference(logits, uniform))
    assert not (tokens % 3 == 0).any()


def test_nothing_of_vocabulary_size_is_made_in_float64():
    """What makes the draw cheap: the float64 cumulative sums are over blocks and one block, never over V."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Float64Sizes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.sizes = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.sizes += [t.shape[-1] for t in (out if isinstance(out, tuple) else (out,))
                           if isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.dim()]
            return out

    with Float64Sizes() as recorded:
        InverseCDFSampler(temperature=0.7)(None, torch.randn(32, 50304))
    assert recorded.sizes and max(recorded.sizes) <= 256, recorded.sizes


def test_non_finite_logits_raise_what_multinomial_raises():
    with pytest.raises(RuntimeError, match="probability tensor contains"):
        sample_inverse_cdf(torch.tensor([[0.0, float("nan")]]))


def rollout_batch():
    datamodule = make_datamodule(batch_size=2)
    datamodule.setup()
    return next(iter(datamodule.train_dataloader()))


def sample(module, engine: HFEngine, seed: int, samples_per_prompt: int = 4):
    module.rollout_engine = engine
    engine.setup(module.sampler.context)
    torch.manual_seed(seed)
    return engine.sample(module.sampler.context, rollout_batch(), samples_per_prompt=samples_per_prompt).responses


def test_generate_takes_the_drawn_token_with_the_model_s_first_token_distribution():
    module = make_rloo(response_length=1, temperature=0.7)
    module.configure_model()
    batch = rollout_batch()
    prompt = batch["input_ids"][:1][:, batch["attention_mask"][0].bool()]  # the first prompt, unpadded
    with torch.no_grad():
        probs = torch.softmax(module.policy(prompt).logits[0, -1].double() / 0.7, -1)
    engine = HFEngine()
    engine.setup(module.sampler.context)
    torch.manual_seed(2)
    tokens = engine.generate_turn(module.sampler.context, [prompt[0].tolist()] * 4000, 1, from_reference=False,
                                  greedy=False)
    drawn = torch.tensor([t[0][0] for t in tokens])
    top = probs.topk(5).indices  # the likely tokens, then the rest together
    frequent = torch.cat([probs[top], (1 - probs[top].sum()).unsqueeze(0)])
    bucket = torch.full_like(drawn, 5)
    for i, token in enumerate(top):
        bucket[drawn == token] = i
    assert_frequencies(bucket, frequent)


def test_multinomial_runs_only_with_sampler_generate_or_biased_settings(monkeypatch):
    module = make_rloo(response_length=6)
    module.configure_model()
    calls = []
    multinomial = torch.multinomial
    monkeypatch.setattr(torch, "multinomial", lambda *a, **kw: calls.append(1) or multinomial(*a, **kw))
    first, again = sample(module, HFEngine(), seed=3), sample(module, HFEngine(), seed=3)
    assert calls == [] and torch.equal(first, again)  # reproducible under a seed
    sample(module, HFEngine(token_sampler="generate"), seed=3)
    assert len(calls) > 0
    calls.clear()
    processed = make_rloo(response_length=6, generation_kwargs={"min_new_tokens": 6}, allow_biased_sampling=True)
    processed.configure_model()
    sample(processed, HFEngine(), seed=3)  # a logits processor: the inverse CDF draws from its output
    assert calls == []
    warped = make_rloo(response_length=6, generation_kwargs={"top_k": 5}, allow_biased_sampling=True)
    warped.configure_model()
    sample(warped, HFEngine(), seed=3)  # a warper: generate() samples
    assert len(calls) > 0


def test_logits_processors_run_before_the_draw():
    """suppress_tokens (a logits processor, which generate() runs before any sampler) leaving two tokens: every
    drawn token is one of them."""
    allowed = {5, 6}
    vocabulary = AutoConfig.from_pretrained(TINY_PYTHIA).vocab_size
    module = make_rloo(response_length=6, allow_biased_sampling=True, generation_kwargs={
        "suppress_tokens": [t for t in range(vocabulary) if t not in allowed]})
    module.configure_model()
    responses = sample(module, HFEngine(), seed=4)
    assert set(responses.unique().tolist()) == allowed


def test_an_unknown_sampler_and_non_finite_logits_are_one_line():
    with pytest.raises(ConfigError, match="rollout.token_sampler='fast' is not a token sampler; use one of "
                                          "inverse_cdf, generate"):
        HFEngine(token_sampler="fast")
    module = make_rloo(response_length=4)
    module.configure_model()
    with torch.no_grad():
        module.policy.get_output_embeddings().weight.fill_(float("nan"))
    with pytest.raises(ConfigError, match="logits are not finite"):
        sample(module, HFEngine(), seed=0)


def test_a_gpu_draw_searches_in_one_level_whatever_the_vocabulary():
    """On a GPU the second level's operations (each a kernel launch) cost more than the N x V float64 buffer."""
    from types import SimpleNamespace

    big = 32 * 50304
    assert inverse_cdf.searches_in_one_level(SimpleNamespace(device=torch.device("cuda"), numel=lambda: big))
    assert not inverse_cdf.searches_in_one_level(SimpleNamespace(device=torch.device("cpu"), numel=lambda: big))
    assert inverse_cdf.searches_in_one_level(torch.zeros(2, 100))


def test_the_old_name_of_the_token_sampler_still_chooses_it_with_a_warning():
    """`rollout.sampler` (the setting's name in the previous release) is still in the engine's config, null."""
    from pathlib import Path

    import yaml

    with pytest.warns(FutureWarning, match=r"rollout.sampler=generate is now rollout.token_sampler=generate"):
        engine = HFEngine(sampler="generate")
    assert engine.token_sampler == "generate" and HFEngine().token_sampler == "inverse_cdf"
    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "conf" / "rollout" / "hf.yaml").read_text())
    assert config["sampler"] is None and config["token_sampler"] == "inverse_cdf"
