"""Sampling with the LoRA adapters merged (rollout.merge_adapters): in float32 the same samples as the unmerged
policy under the same seed, with no adapter forward while sampling; the policy's own tensors and modules untouched;
half precision merged only when asked; the reference never merged; a bad setting: one line."""

import pytest
import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.rollout import HFEngine
from tests.conftest import make_datamodule, make_rloo


@pytest.fixture(scope="module")
def module():
    module = make_rloo(response_length=12, temperature=0.7)
    module.configure_model()
    with torch.no_grad():  # a trained adapter: B = 0 would make the merge a no-op
        for name, param in module.policy.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.2)
    return module


@pytest.fixture(scope="module")
def batch():
    datamodule = make_datamodule(batch_size=2)
    datamodule.setup()
    return next(iter(datamodule.train_dataloader()))


def sample_counting_adapter_calls(module, engine: HFEngine, batch, seed: int, **kwargs):
    """(responses, how many times an adapter's down-projection ran while sampling)"""
    calls = []
    hooks = [m.register_forward_hook(lambda *_: calls.append(1))
             for name, m in module.policy.named_modules() if name.endswith("lora_A.default")]
    module.rollout_engine = engine
    engine.setup(module.sampler.context)
    torch.manual_seed(seed)
    try:
        return engine.sample(module.sampler.context, batch, samples_per_prompt=2, **kwargs).responses, len(calls)
    finally:
        for hook in hooks:
            hook.remove()


def test_merged_float32_adapters_sample_what_the_unmerged_policy_samples_and_leave_it_untouched(module, batch):
    tensors = {k: v.clone() for k, v in module.policy.state_dict().items()}
    layers = dict(module.policy.named_modules())
    unmerged, adapter_calls = sample_counting_adapter_calls(module, HFEngine(merge_adapters=False), batch, seed=3)
    assert adapter_calls > 0
    merged, adapter_calls = sample_counting_adapter_calls(module, HFEngine(), batch, seed=3)  # auto: float32
    assert adapter_calls == 0
    assert torch.equal(merged, unmerged)
    assert dict(module.policy.named_modules()) == layers  # the LoRA layers are back in place
    for key, value in module.policy.state_dict().items():  # nothing written into the policy
        assert torch.equal(value, tensors[key]), key
    with torch.no_grad():  # an update between RL steps reaches the next merge
        for name, param in module.policy.named_parameters():
            if "lora_B" in name:
                param.add_(0.3)
    updated, _ = sample_counting_adapter_calls(module, HFEngine(merge_adapters=False), batch, seed=3)
    assert not torch.equal(updated, unmerged)
    assert torch.equal(sample_counting_adapter_calls(module, HFEngine(), batch, seed=3)[0], updated)


def test_the_reference_is_sampled_without_the_adapters(module, batch):
    reference, adapter_calls = sample_counting_adapter_calls(module, HFEngine(), batch, seed=4, from_reference=True)
    assert adapter_calls == 0
    assert torch.equal(reference, sample_counting_adapter_calls(module, HFEngine(merge_adapters=False), batch,
                                                                seed=4, from_reference=True)[0])
    assert not torch.equal(reference, sample_counting_adapter_calls(module, HFEngine(), batch, seed=4)[0])


def test_half_precision_weights_are_merged_only_when_asked():
    module = make_rloo(response_length=4)
    module.configure_model()
    module.policy.to(torch.bfloat16)
    datamodule = make_datamodule(batch_size=2)
    datamodule.setup()
    batch = next(iter(datamodule.train_dataloader()))
    assert sample_counting_adapter_calls(module, HFEngine(), batch, seed=0)[1] > 0  # auto: float32 only
    assert sample_counting_adapter_calls(module, HFEngine(merge_adapters=True), batch, seed=0)[1] == 0


def test_weights_gathered_across_ranks_are_not_merged(module, batch):
    """FSDP2 and ZeRO-3 put the engine in lockstep: peft's forward on the gathered weights."""
    engine = HFEngine()
    engine.lockstep = True
    assert sample_counting_adapter_calls(module, engine, batch, seed=0)[1] > 0


def test_a_bad_setting_is_one_line():
    with pytest.raises(ConfigError, match=r"rollout.merge_adapters='yes' is not a choice; use auto .*, true or "
                                          r"false\.$"):
        HFEngine(merge_adapters="yes")
