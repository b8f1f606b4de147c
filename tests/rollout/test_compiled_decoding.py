"""The decoding step compiled over a static KV cache (rollout.compile_mode): the same samples as plain generate()
under the same seed (shared prefill, separate prefills, the reference), weights updated between calls reach the
compiled step, and where compilation cannot run: one line (a bad setting) or one warning and plain generate()."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, StaticCache

from lit_rlhf.errors import ConfigError
from lit_rlhf.rollout import HFEngine
from lit_rlhf.rollout.compiled_decoding import cache_length, resolve_mode, static_cache
from lit_rlhf.rollout.hf import cache_keyword, keys_and_values_only, shared_prefill, starting_cache
from tests.conftest import make_datamodule, make_rloo


def prompt_batch(width: int | None = None):
    """The first batch of two prompts, or the first whose prompts are `width` tokens wide."""
    datamodule = make_datamodule(batch_size=2)
    datamodule.setup()
    return next(b for b in datamodule.train_dataloader() if width is None or b["input_ids"].shape[1] == width)


def sample(module, engine: HFEngine, batch, seed: int, **kwargs):
    module.rollout_engine = engine
    module.sampler.context.device = batch["input_ids"].device  # as Sampler.draw sets it: where the prompts are
    engine.setup(module.sampler.context)
    torch.manual_seed(seed)
    return engine.sample(module.sampler.context, batch, samples_per_prompt=2, **kwargs).responses


def compiled_frames() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


@pytest.mark.integration
@pytest.mark.floors  # torch 2.9.0 guarded each static cache's identity: every call compiled anew
def test_the_compiled_step_samples_what_plain_generate_samples_and_sees_updated_weights():
    torch._dynamo.reset()
    module = make_rloo(response_length=10, temperature=0.7)
    module.configure_model()
    batch = prompt_batch()
    engine = HFEngine(compile_mode="default")
    for shared in (True, False):
        engine.shared_prefill = shared
        plain = sample(module, HFEngine(shared_prefill=shared, compile_mode=None), batch, seed=shared)
        assert torch.equal(sample(module, engine, batch, seed=shared), plain)
    assert engine.compile_ready and compiled_frames() > 0
    # after the first compilation, prompts of another width decode with the same graph: the static cache's length
    # is bucketed, so its shapes do not change
    graphs, width = compiled_frames(), batch["input_ids"].shape[1]
    other = prompt_batch(width=width + 2)
    assert torch.equal(sample(module, engine, other, seed=3), sample(module, HFEngine(compile_mode=None), other, 3))
    assert compiled_frames() == graphs and not torch._dynamo.utils.counters["recompiles"]
    assert torch.equal(sample(module, engine, batch, seed=5, from_reference=True),
                       sample(module, HFEngine(compile_mode=None), batch, seed=5, from_reference=True))
    with torch.no_grad():  # an update of the adapters between RL steps: the compiled step must not keep the old ones
        for name, param in module.policy.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn_like(param) * 0.5)
    updated = sample(module, HFEngine(compile_mode=None), batch, seed=7)
    assert not torch.equal(updated, sample(module, HFEngine(compile_mode=None), batch, seed=5))
    assert torch.equal(sample(module, engine, batch, seed=7), updated)


@pytest.mark.parametrize("prefilled", [True, False], ids=["shared prefill", "prefill in the cache"])
def test_the_static_cache_takes_keys_and_values_of_two_dtypes_under_autocast(prefilled):
    """precision=bf16-mixed over float32 weights: GPT-NeoX's keys leave the rotary embedding in float32 and its
    values the projection in bfloat16. generate() over the static cache (the shared prefill in it, or its own
    prefill) decodes with them, to the logits of plain generate()'s dynamic cache."""
    module = make_rloo()
    module.configure_model()
    policy, batch = module.policy, prompt_batch()
    queries, mask = batch["input_ids"], batch["attention_mask"]  # B,P

    def logits(**cache):  # B,3,V: greedy decoding, three tokens
        out = policy.generate(input_ids=queries, attention_mask=mask, max_new_tokens=3, do_sample=False,
                              return_dict_in_generate=True, output_logits=True, **cache)
        return torch.stack(out.logits, dim=1).float()

    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        plain = logits()
        prefill = shared_prefill(policy, queries, mask, 1) if prefilled else None
        static = logits(**{cache_keyword(policy): static_cache(policy, 16, prefill)})
    assert static.shape == plain.shape
    assert torch.allclose(static, plain, atol=0.1), (static - plain).abs().max()


def sliding_window_model(kind: str) -> torch.nn.Module:
    """A random two-layer model whose attention slides over 2 positions: Qwen2's second layer, Gemma2's and gpt-oss's
    first (gpt-oss: 4 experts, 2 per token)."""
    torch.manual_seed(0)
    extra = {"qwen2": dict(use_sliding_window=True, max_window_layers=1), "gemma2": {},
             "gpt_oss": dict(num_local_experts=4, num_experts_per_tok=2,
                             layer_types=["sliding_attention", "full_attention"])}[kind]
    config = AutoConfig.for_model(kind, vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=2,
                                  max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, **extra)
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize("kind", ["qwen2", "gemma2", "gpt_oss"])
def test_prompts_longer_than_a_sliding_window_decode_from_the_static_cache_as_plain_generate(kind):
    """The cache the compiled step starts from (the shared prefill of 2 prompts of 6 tokens, one left-padded, each
    sampled twice, in a static cache) decodes to plain generate()'s logits on a model with sliding-window layers.
    The shared prefill kept only a sliding layer's last window - 1 positions, which the static layer took for the
    whole prompt: the logits were far off (0.8 on a larger Qwen2), or decoding failed (index_copy_ out of bounds on
    Gemma2 and gpt-oss with longer prompts)."""
    model = sliding_window_model(kind)
    queries = torch.randint(3, 64, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(queries)
    queries[1, :2], mask[1, :2] = 0, 0  # left padding
    queries, mask = queries.repeat_interleave(2, 0), mask.repeat_interleave(2, 0)  # N=4: each prompt twice, adjacent

    def logits(**cache):  # N,4,V: greedy decoding, four tokens
        out = model.generate(input_ids=queries, attention_mask=mask, max_new_tokens=4, do_sample=False,
                             return_dict_in_generate=True, output_logits=True, **cache)
        return torch.stack(out.logits, dim=1)

    assert keys_and_values_only(model)  # the shared prefill is in the cache
    with torch.no_grad():
        cache = starting_cache(model, queries, mask, siblings=2, static_length=16)
        assert isinstance(cache, StaticCache)
        torch.testing.assert_close(logits(**{cache_keyword(model): cache}), logits(), atol=1e-5, rtol=0)


def linear_attention_model(kind: str) -> torch.nn.Module:
    """A random model with a layer of linear attention (Qwen3.5's text model) or of convolution (LFM2) before one of
    full attention."""
    torch.manual_seed(0)
    extra = {"qwen3_5_text": dict(head_dim=8, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
                                  linear_value_head_dim=8, layer_types=["linear_attention", "full_attention"]),
             "lfm2": dict(layer_types=["conv", "full_attention"])}[kind]
    config = AutoConfig.for_model(kind, vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                  pad_token_id=0, bos_token_id=1, eos_token_id=2, **extra)
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize("kind", ["qwen3_5_text", "lfm2"])
def test_a_model_whose_cache_holds_other_states_prefills_in_generate_and_is_not_compiled(kind):
    """Linear-attention, convolution and state-space layers cache states the shared prefill cannot repeat
    (`batch_repeat_interleave` failed at the first rollout of every such run) and the static cache does not hold: the
    rows are prefilled by generate() itself, and the compiled step falls back to plain generate(), quietly under
    `auto`, with one warning where a mode was asked for."""
    model = linear_attention_model(kind)
    queries = torch.randint(3, 64, (4, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(queries)
    assert starting_cache(model, queries, mask, siblings=2, static_length=None) is None
    assert HFEngine().compiled_mode(torch.device("cuda"), model) is None  # auto: reduce-overhead elsewhere
    with pytest.warns(UserWarning, match=f"rollout.compile_mode=default: the {kind} model's cache holds layer states "
                                         f"other than keys and values"):
        assert HFEngine(compile_mode="default").compiled_mode(torch.device("cpu"), model) is None


def test_without_a_compiler_one_warning_and_plain_generate(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler")
    monkeypatch.setattr(torch._inductor.config.cpp, "cxx", (None, "no-such-compiler"))
    module = make_rloo(response_length=6)
    module.configure_model()
    batch = prompt_batch()
    engine = HFEngine(compile_mode="default")
    with pytest.warns(UserWarning, match=r"rollout.compile_mode=default: no C\+\+ compiler .*plain generate\(\)"):
        responses = sample(module, engine, batch, seed=2)
    assert engine.compile_ready is False
    assert torch.equal(responses, sample(module, HFEngine(), batch, seed=2))


def test_bad_settings_are_one_line():
    with pytest.raises(ConfigError, match="rollout.compile_mode='fast' is not a torch.compile mode; use auto, null"):
        HFEngine(compile_mode="fast")
    module = make_rloo(response_length=4)
    module.configure_model()
    with pytest.raises(ConfigError, match=r"captures CUDA graphs, but the policy samples on cpu; use "):
        sample(module, HFEngine(compile_mode="reduce-overhead"), prompt_batch(), seed=0)
    context = module.policy.config.max_position_embeddings
    with pytest.raises(ConfigError, match=f"static_cache_length={context + 1} is longer than the model's context "
                                          f"\\({context} positions\\); set at most {context}"):
        HFEngine(compile_mode="default", static_cache_length=context + 1).setup(module.sampler.context)


def test_cache_lengths_round_up_within_the_context():
    assert cache_length(70, None, 2048) == 128
    assert cache_length(64, None, 2048) == 64
    assert cache_length(250, None, 256) == 256  # the bucket would pass the context: the context
    assert cache_length(300, None, 256) == 300  # a call longer than the context: as plain generate() would run it
    assert cache_length(100, 200, 256) == 200
    with pytest.raises(ConfigError, match="static_cache_length=50 is shorter than this call's context \\+ response "
                                          "\\(100 tokens\\)"):
        cache_length(100, 50, 256)


def test_auto_compiles_on_cuda_only():
    """rollout.compile_mode=auto (the default): CUDA graphs where the policy samples on CUDA, plain generate() on a
    CPU, where nothing is compiled and no C++ compiler is needed."""
    assert HFEngine().compile_mode == "auto"
    assert resolve_mode("auto", torch.device("cuda")) == "reduce-overhead"
    assert resolve_mode("auto", torch.device("cpu")) is None
    assert resolve_mode("default", torch.device("cpu")) == "default"
    assert resolve_mode(None, torch.device("cuda")) is None
    module = make_rloo(response_length=6)
    module.configure_model()
    engine, batch, graphs = HFEngine(), prompt_batch(), compiled_frames()
    assert torch.equal(sample(module, engine, batch, seed=4), sample(module, HFEngine(compile_mode=None), batch, 4))
    assert engine.compile_ready is False and compiled_frames() == graphs


def test_auto_with_sharded_weights_samples_eagerly_without_a_warning(recwarn):
    """Weights sharded across ranks decode in lockstep with plain generate(): the default says nothing of it (an
    explicit compile mode warns once)."""
    engine = HFEngine()
    engine.synced_generation = True
    assert engine.compiled_mode(torch.device("cuda")) is None and engine.compile_ready is False
    assert not [w for w in recwarn if "compile_mode" in str(w.message)]
    explicit = HFEngine(compile_mode="reduce-overhead")
    explicit.synced_generation = True
    with pytest.warns(UserWarning, match="compile_mode=reduce-overhead: the weights are sharded across ranks"):
        assert explicit.compiled_mode(torch.device("cuda")) is None
