"""rollout=vllm's parts that need no vLLM: the sampling settings, the KV-cache check, the cores a CPU
engine computes on, the missing-install message, and the module's use of an engine's own
logprobs (metrics, importance weights)."""

import os
import sys

import lightning as L
import pytest
import torch

from lit_rlhf.errors import ConfigError
from lit_rlhf.models.forwards import batched_logprobs
from lit_rlhf.ops import clipped_policy_loss
from lit_rlhf.rollout import HFEngine, VLLMEngine
from lit_rlhf.rollout.vllm_checks import (
    check_kv_cache,
    engine_cpu_cores,
    import_vllm,
    parse_cores,
    vllm_sampling_settings,
)
from tests.conftest import make_datamodule, make_rloo


def test_sampling_is_pure_and_biased_settings_are_refused_as_with_generate():
    assert vllm_sampling_settings(0.7, {}, False) == {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
                                                      "repetition_penalty": 1.0}
    with pytest.raises(ConfigError, match=r"bias sampling"):
        vllm_sampling_settings(0.7, {"top_k": 5}, False)
    assert vllm_sampling_settings(0.7, {"top_k": 5, "min_new_tokens": 3}, True)["min_tokens"] == 3
    with pytest.raises(ConfigError, match=r"algo.generation_kwargs.num_beams has no vLLM counterpart"):
        vllm_sampling_settings(0.7, {"num_beams": 2}, True)


def test_a_kv_cache_too_small_for_one_sequence_is_refused_before_the_engine_starts():
    class Config:
        num_hidden_layers, num_attention_heads, hidden_size, max_position_embeddings = 4, 4, 128, 256

    # 2 (k, v) x 4 layers x 128 values x 4 bytes = 4 KiB per token; 256 tokens = 1 MiB
    check_kv_cache(Config(), 1 / 1024, None, 4)
    with pytest.raises(ConfigError, match=r"rollout.kv_cache_gib=0.0009 cannot hold one sequence of 256 tokens"):
        check_kv_cache(Config(), 0.0009, None, 4)
    check_kv_cache(Config(), 0.0009, 128, 4)  # a shorter context fits


def test_a_cpu_engine_computes_on_the_trainers_share_of_the_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert engine_cpu_cores(None, threads=2, local_rank=0) == [0, 1]  # one process: every core (vLLM: 0)
    assert engine_cpu_cores(None, threads=1, local_rank=0) == [0]  # DDP, 2 ranks of 1 thread each
    assert engine_cpu_cores(None, threads=1, local_rank=1) == [1]
    assert engine_cpu_cores(None, threads=8, local_rank=0) == [0, 1]  # no more cores than the process may use
    assert engine_cpu_cores([1], threads=2, local_rank=0) == [1]  # rollout.cpu_cores
    with pytest.raises(ConfigError, match=r"rollout.cpu_cores lists cores \[5\] this process may not run on \(it "
                                          r"may use \[0, 1\]\)"):
        engine_cpu_cores([1, 5], threads=2, local_rank=0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 5, 6, 7})
    assert engine_cpu_cores(None, threads=2, local_rank=1) == [6, 7]


def test_cpu_cores_are_read_as_lists_and_a_bad_value_is_one_line():
    assert parse_cores("0-3,6") == [0, 1, 2, 3, 6]
    assert parse_cores(2) == [2]
    assert parse_cores(None) is None
    for bad in ("all", "3-1", "-1", ""):
        with pytest.raises(ConfigError, match=r"rollout.cpu_cores=.* is not a list of cores; write it as \"0-7\""):
            parse_cores(bad)


def test_vllm_not_installed_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with pytest.raises(ConfigError, match=r"rollout=vllm needs vLLM, which is not installed .*"
                                          r"pip install -e '.\[vllm\]'.*make setup-vllm"):
        import_vllm()


def test_engine_settings_are_checked():
    with pytest.raises(ConfigError, match=r"rollout.sync_timeout_s=0 must be a finite number > 0"):
        VLLMEngine(sync_timeout_s=0)
    with pytest.raises(ConfigError, match=r"algo.rollout_is_cap=0.5 must be > 1"):
        make_rloo(rollout_is_cap=0.5)


class ShiftedSampler(HFEngine):
    """Samples with generate() and reports, as an engine's own logprobs, the trainer's minus `shift`."""

    reports_logprobs = True

    def __init__(self, shift: float):
        super().__init__()
        self.shift = shift

    def sample(self, sampling, batch, samples_per_prompt, from_reference=False, greedy=False):
        samples = super().sample(sampling, batch, samples_per_prompt, from_reference, greedy)
        logprobs = batched_logprobs(sampling.policy, samples.queries, samples.query_mask, samples.responses,
                                    samples.response_mask, sampling.settings.temperature)
        samples.sampler_logprobs = (logprobs - self.shift) * samples.response_mask
        return samples


def one_step(module) -> dict[str, float]:
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    trainer.fit(module, make_datamodule())
    return module.last_stats


@pytest.mark.integration
@pytest.mark.parametrize("cap", [2.0, 1.2, None])
def test_an_engine_with_its_own_logprobs_gets_the_mismatch_logged_and_corrected(cap):
    captured = {}
    module = make_rloo(rollout_engine=ShiftedSampler(0.5), rollout_is_cap=cap, response_length=8)
    policy_loss = module.policy_loss

    def spy(new_logprobs, entropy, rollout, advantages, idx, share):
        captured["is_weights"], captured["mask"] = rollout.is_weights, rollout.response_mask
        loss, stats = policy_loss(new_logprobs, entropy, rollout, advantages, idx, share)
        weights = None if rollout.is_weights is None else rollout.is_weights[idx]
        inputs = (new_logprobs, rollout.logprobs[idx], advantages[idx], rollout.loss_mask(idx), 0.2, 0.2, share)
        captured["weighted"] = clipped_policy_loss(*inputs, is_weights=weights)[0].item()
        captured["unweighted"] = clipped_policy_loss(*inputs)[0].item()
        captured["loss"] = loss.item()
        return loss, stats

    module.policy_loss = spy
    stats = one_step(module)
    assert stats["rollout/logprob_diff_mean"] == pytest.approx(0.5, abs=1e-4)
    assert stats["rollout/logprob_diff_max"] == pytest.approx(0.5, abs=1e-4)
    assert stats["rollout/sampler_kl"] == pytest.approx((torch.exp(torch.tensor(0.5)) - 1 - 0.5).item(), abs=1e-4)
    assert captured["loss"] == pytest.approx(captured["weighted"])  # the loss the module optimizes
    if cap is None:
        assert captured["is_weights"] is None and "rollout/is_weight_mean" not in stats
        return
    assert captured["loss"] != pytest.approx(captured["unweighted"])
    ratio = float(torch.exp(torch.tensor(0.5)))  # pi_old / pi_sampler on every token
    expected = min(ratio, cap)
    weights = captured["is_weights"][captured["mask"]]
    assert weights.min().item() == pytest.approx(expected, abs=1e-4) and weights.max().item() == pytest.approx(
        expected, abs=1e-4)
    assert stats["rollout/is_weight_mean"] == pytest.approx(expected, abs=1e-4)
    assert stats["rollout/is_truncated_frac"] == (1.0 if ratio > cap else 0.0)


@pytest.mark.integration
def test_the_default_engine_reports_no_mismatch():
    stats = one_step(make_rloo(response_length=8))
    assert not any(key.startswith("rollout/logprob") for key in stats)
