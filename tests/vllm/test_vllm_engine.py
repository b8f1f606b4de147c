"""VLLMEngine against the trainer on the embedded default: its logprobs agree with the trainer's, its samples
follow the policy's weights after a sync (and only then), and bad input ends in one line naming the fix."""

import os
import time
from types import SimpleNamespace

import pytest
import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.rollout import VLLMEngine
from lit_rlhf.rollout.context import SamplingContext, SamplingSettings
from tests.conftest import LORA, TINY_PYTHIA, make_datamodule, make_rloo

# every test here starts a vLLM engine or server, or runs train.py: the integration tier
pytestmark = pytest.mark.integration

TOLERANCE = 1e-4  # max |vLLM logprob - trainer logprob| of a sampled token, float32 on CPU (seen: ~5e-6)


def first_batch():
    datamodule = make_datamodule()
    datamodule.setup("fit")
    return next(iter(datamodule.train_dataloader()))


@pytest.fixture(scope="module")
def module():
    engine = VLLMEngine(kv_cache_gib=0.25, worker_extension="tests.vllm.receivers.InspectedReceiver")
    module = make_rloo(rollout_engine=engine, response_length=24)
    module.configure_model()
    yield module
    module.rollout_engine.close()


def trainer_logprobs(module, samples) -> torch.Tensor:
    logprobs, _ = module.old_logprobs_and_values(samples.queries, samples.query_mask, samples.responses,
                                                 samples.response_mask)
    return logprobs  # N,R


def max_logprob_diff(module, samples) -> float:
    diff = (trainer_logprobs(module, samples) - samples.sampler_logprobs).abs()
    return float(diff[samples.response_mask].max())


def seeded_sample(module, batch, seed=0):
    torch.manual_seed(seed)
    return module.rollout_engine.sample(module.sampler.context, batch, 4)


def test_samples_are_masked_after_the_stop_token_and_logprobs_agree_with_the_trainer(module):
    batch = first_batch()
    samples = seeded_sample(module, batch)
    n = len(batch["input_ids"]) * 4
    assert samples.responses.shape == samples.sampler_logprobs.shape == (n, 24)
    assert torch.equal(samples.prompt_index, torch.arange(len(batch["input_ids"])).repeat_interleave(4))
    stopped = (samples.responses == module.stop_token_id).any(1)
    assert stopped.any()
    for row, mask in zip(samples.responses[stopped], samples.response_mask[stopped], strict=True):
        stop_at = int((row == module.stop_token_id).nonzero()[0])
        assert mask[: stop_at + 1].all() and not mask[stop_at + 1:].any()
    assert (samples.sampler_logprobs[~samples.response_mask] == 0).all()
    assert max_logprob_diff(module, samples) < TOLERANCE


def test_on_cpu_the_engine_runs_in_one_process_on_the_trainers_cores(module):
    # vLLM's own CPU default: a scheduler process plus a worker process computing on one core fewer than the
    # machine has (1 thread of 2 here), exchanging messages at every decoding step
    [settings] = module.rollout_engine.engine.call("rpc", "compute_settings", ())
    assert settings["pid"] == module.rollout_engine.engine.process.pid  # the model runs in the engine's process
    assert settings["threads"] == torch.get_num_threads()
    assert settings["cores"] == sorted(os.sched_getaffinity(0))[:torch.get_num_threads()]


def test_seeded_samples_follow_the_weights_only_after_a_sync(module):
    batch = first_batch()
    before = seeded_sample(module, batch)
    assert torch.equal(seeded_sample(module, batch).responses, before.responses)  # seeded: the same tokens again
    with torch.no_grad():
        for name, param in module.policy.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn_like(param) * 0.3)
    not_synced = seeded_sample(module, batch)  # no after_update: the engine still holds the old weights
    assert torch.equal(not_synced.responses, before.responses)
    module.rollout_engine.after_update(module.sampler.context)
    after = seeded_sample(module, batch)
    assert not torch.equal(after.responses, before.responses)
    assert max_logprob_diff(module, after) < TOLERANCE  # the engine now samples from the changed policy
    assert module.rollout_engine.stats()["rollout/weight_sync_s"] > 0


def test_reference_samples_come_from_generate_without_sampler_logprobs(module):
    samples = module.rollout_engine.sample(module.sampler.context, first_batch(), 2, from_reference=True)
    assert samples.sampler_logprobs is None and samples.responses.shape[0] == 2 * 4


def test_a_prompt_longer_than_the_engine_context_is_one_line(module):
    batch = first_batch()
    long = torch.randint(5, 900, (1, 300))
    with pytest.raises(ConfigError, match=r"raise rollout.max_model_len"):
        module.rollout_engine.sample(module.sampler.context,
                                     {"input_ids": long, "attention_mask": torch.ones_like(long)}, 2)
    assert seeded_sample(module, batch).responses.shape[1] == 24  # the engine still serves


def test_a_failing_weight_sync_is_one_line_and_a_stuck_one_ends_within_the_timeout():
    engine = VLLMEngine(kv_cache_gib=0.25, sync_timeout_s=3,
                        worker_extension="tests.vllm.receivers.FailingThenStuckReceiver")
    module = make_rloo(rollout_engine=engine)
    module.configure_model()
    try:
        with pytest.raises(ConfigError, match=r"RL step 0: the weight sync to the vLLM engine failed \(.*mismatch"):
            engine.sample(module.sampler.context, first_batch(), 2)
        start = time.perf_counter()
        with pytest.raises(ConfigError, match=r"did not finish in 3 s \(rollout.sync_timeout_s\)"):
            engine.sample(module.sampler.context, first_batch(), 2)
        assert time.perf_counter() - start < 30
    finally:
        engine.close()


def test_an_output_layer_tied_to_the_embeddings_samples_from_the_synced_embeddings(tmp_path):
    """A full fine-tune of a model whose output layer is its input embeddings (a Qwen2 with tie_word_embeddings): the
    sync sends the embeddings once, and vLLM's tied output layer computes with them. On a CPU it kept the copy of the
    weight packed for its matmul at load: after the first update its logprobs were 0.08 from the trainer's."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from lit_rlhf.models import load_tokenizer

    tokenizer = load_tokenizer(TINY_PYTHIA)
    config = AutoConfig.for_model("qwen2", vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                                  eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    module = make_rloo(model={"name_or_path": str(tmp_path), "lora": None}, response_length=12,
                       rollout_engine=VLLMEngine(kv_cache_gib=0.25))
    module.configure_model()
    try:
        batch = first_batch()
        assert max_logprob_diff(module, seeded_sample(module, batch)) < TOLERANCE
        embeddings = module.policy.get_input_embeddings().weight
        assert module.policy.get_output_embeddings().weight is embeddings
        with torch.no_grad():
            embeddings.mul_(1.5).add_(torch.randn_like(embeddings) * 0.02)
        module.rollout_engine.after_update(module.sampler.context)
        assert max_logprob_diff(module, seeded_sample(module, batch)) < TOLERANCE
    finally:
        module.rollout_engine.close()


def save_tiny_moe(path) -> str:
    """A tiny Qwen3-MoE (4 experts, 2 a token) on the tiny pythia's tokenizer, saved with it to path."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from lit_rlhf.models import load_tokenizer

    tokenizer = load_tokenizer(TINY_PYTHIA)
    config = AutoConfig.for_model("qwen3_moe", vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                  num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                                  tie_word_embeddings=False, bos_token_id=tokenizer.bos_token_id,
                                  eos_token_id=tokenizer.eos_token_id)  # a head of 32: vLLM's CPU attention's least
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_a_mixture_of_experts_samples_from_its_synced_experts(tmp_path, lora):
    """A tiny Qwen3-MoE: the sync sends the experts one tensor per expert, as its files hold them, and vLLM's CPU
    kernel computes with them packed again. Before, a LoRA policy's sync stopped at the experts' adapters, and every
    sync left the CPU kernel reading the checkpoint's layout: logprobs 0.09 from the trainer's before any update."""
    module = make_rloo(model={"name_or_path": save_tiny_moe(tmp_path), "lora": LORA if lora else None},
                       response_length=12, rollout_engine=VLLMEngine(kv_cache_gib=0.25))
    module.configure_model()
    try:
        batch = first_batch()
        assert max_logprob_diff(module, seeded_sample(module, batch)) < TOLERANCE
        with torch.no_grad():
            for param in module.policy.parameters():
                if param.requires_grad:
                    param.add_(torch.randn_like(param) * 0.05)
        module.rollout_engine.after_update(module.sampler.context)
        assert max_logprob_diff(module, seeded_sample(module, batch)) < TOLERANCE
    finally:
        module.rollout_engine.close()


def stub_sampling(path, **model):
    """What VLLMEngine.start_engine reads of a SamplingContext, for a model our trainer need not load."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path)
    policy = SimpleNamespace(config=config, get_input_embeddings=lambda: torch.nn.Embedding(2, 2))
    settings = SamplingSettings(16, 1.0, {}, False, {"name_or_path": str(path), "dtype": "float32", **model})
    return SamplingContext(settings, policy=policy, device=torch.device("cpu"), local_rank=0)


def test_an_architecture_vllm_cannot_run_is_one_line(tmp_path):
    from transformers import XLNetConfig, XLNetLMHeadModel

    # heads of 32 dimensions, which vLLM's CPU attention runs: the architecture alone is what it cannot run
    XLNetLMHeadModel(XLNetConfig(vocab_size=64, d_model=64, n_layer=1, n_head=2, d_inner=32)).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"vLLM cannot run the architecture XLNetLMHeadModel .*; use rollout=hf"):
        VLLMEngine().start_engine(stub_sampling(tmp_path))


def test_on_a_cpu_attention_heads_vllm_cannot_run_are_one_line_before_the_engine_starts(tmp_path):
    """vLLM's CPU attention has no kernel for 16-dimensional heads; its engine said so only at the first request."""
    from transformers import AutoConfig, AutoModelForCausalLM

    AutoModelForCausalLM.from_config(AutoConfig.for_model("qwen2", vocab_size=64, hidden_size=64, intermediate_size=64,
                                                          num_hidden_layers=1, num_attention_heads=4,
                                                          num_key_value_heads=2)).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"vLLM's CPU build cannot run the attention heads of model.name_or_path="
                                          r".* \(16 dimensions; it runs 32, 64, .*\): use rollout=hf"):
        VLLMEngine().start_engine(stub_sampling(tmp_path))


def test_an_engine_without_room_for_its_kv_cache_names_the_setting(tiny_path):
    with pytest.raises(ConfigError, match=r"rollout.kv_cache_gib"):
        VLLMEngine(gpu_memory_utilization=0.0001).start_engine(stub_sampling(tiny_path))


def test_multi_turn_episodes_sample_turn_by_turn_and_logprobs_agree_on_model_tokens(module):
    from lit_rlhf.envs import EnvSpec
    from tests.envs.scripted import CountingEnvironment

    module.environment = EnvSpec(CountingEnvironment, max_turns=3, max_tokens=60)
    try:
        samples = seeded_sample(module, first_batch())
    finally:
        module.environment = None
    assert samples.responses.shape[1] == 60 and max(e.turns for e in samples.episodes) > 1
    observation = (samples.context_mask & ~samples.response_mask)  # N,R  the environment's tokens
    assert observation.any() and (samples.sampler_logprobs[~samples.response_mask] == 0).all()
    logprobs, _ = module.old_logprobs_and_values(samples.queries, samples.query_mask, samples.responses,
                                                 samples.context_mask)  # the forward sees the whole trajectory
    assert float((logprobs - samples.sampler_logprobs).abs()[samples.response_mask].max()) < TOLERANCE
