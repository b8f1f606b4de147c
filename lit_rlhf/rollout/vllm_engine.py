"""VLLMEngine: sampling with a vLLM engine colocated with the trainer (`rollout=vllm`).

The engine is created once per run, after the policy loads, in its own process (vllm_process.py): on the
trainer's device, beside the trainer. It samples with the same pure-sampling rule as `rollout=hf` and returns
its logprobs of the sampled tokens (after the temperature, as the trainer computes them). After every RL step's
optimizer steps the policy's weights are marked stale; before the next rollout the weights training changes
(LoRA merged into the layers it adapts, see weights.py) are written to a safetensors file in shared memory and
the engine reloads them in place, within `sync_timeout_s` or the run ends with an error. Under DDP every rank
runs its own engine on its own device and samples its own prompts.

Shapes: B prompts, K samples per prompt, N = B*K sequences, P prompt length, R response length.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from lit_rlhf.config.validation import check_flag, check_setting_number
from lit_rlhf.errors import ConfigError
from lit_rlhf.rollout.context import SamplingContext
from lit_rlhf.rollout.engine import RolloutEngine
from lit_rlhf.rollout.hf import HFEngine
from lit_rlhf.rollout.vllm_checks import (
    check_cpu_head_dim,
    check_kv_cache,
    engine_cpu_cores,
    engine_device,
    import_vllm,
    parse_cores,
    vllm_sampling_settings,
)
from lit_rlhf.rollout.vllm_process import EngineError, EngineProcess
from lit_rlhf.rollout.weights import trained_weights
from lit_rlhf.terminal import clipped

START_FAILURE_HINT = ("if it ran out of KV-cache memory, raise rollout.kv_cache_gib (or rollout.gpu_memory_utilization "
                      "without it) or lower rollout.max_model_len; otherwise use rollout=hf")


def shared_memory_dir() -> str | None:
    """/dev/shm where there is one (the weights never touch a disk), else the temp dir."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


class VLLMEngine(RolloutEngine):
    """A colocated vLLM `LLM` that samples for the policy; the reference (evaluation's baseline) samples with
    `generate`, as rollout=hf does, since the engine holds the policy's weights only.

    gpu_memory_utilization: the share of the device's memory vLLM may take (weights and KV cache); on CPU, of
    the machine's memory. kv_cache_gib: the KV cache's size instead (what to set when the trainer shares the
    device). sleep: vLLM's sleep mode on GPU (weights offloaded and KV cache freed between rollouts, level 1).
    seeded: each episode's turn draws from a seed taken from torch's RNG, so a seeded run samples the same
    tokens again (a resumed run continues the RNG from its checkpoint). cpu_cores: on CPU, the cores the engine
    computes on ("0-7"); None: as many as the trainer's torch threads (the trainer waits while the engine samples;
    under DDP each rank's own share). engine_kwargs: anything else `LLM(...)` accepts."""

    reports_logprobs = True
    concurrent_draws = False  # one server with one set of weights

    def __init__(self, gpu_memory_utilization: float = 0.3, kv_cache_gib: float | None = None,
                 dtype: str | None = None, max_model_len: int | None = None, enforce_eager: bool = True,
                 sleep: bool = False, seeded: bool = True, sync_timeout_s: float = 300.0, cpu_cores: str | None = None,
                 worker_extension: str = "lit_rlhf.rollout.vllm_worker.WeightReceiver",
                 engine_kwargs: dict[str, Any] | None = None):
        check_setting_number("rollout.gpu_memory_utilization", gpu_memory_utilization, minimum=0, strictly=True,
                             maximum=1)
        check_setting_number("rollout.kv_cache_gib", kv_cache_gib, minimum=0, strictly=True, optional=True)
        check_setting_number("rollout.max_model_len", max_model_len, minimum=1, optional=True, integer=True)
        check_setting_number("rollout.sync_timeout_s", sync_timeout_s, minimum=0, strictly=True)
        for name, value in (("enforce_eager", enforce_eager), ("sleep", sleep), ("seeded", seeded)):
            check_flag(f"rollout.{name}", value)
        if dtype is not None and not isinstance(dtype, str):
            raise ConfigError(f"rollout.dtype={dtype!r} must be a dtype name (float32, bfloat16, float16) or null.")
        if engine_kwargs is not None and not isinstance(engine_kwargs, Mapping):
            raise ConfigError(f"rollout.engine_kwargs={engine_kwargs!r} must be a mapping of vllm.LLM arguments.")
        self.gpu_memory_utilization = gpu_memory_utilization
        self.kv_cache_gib = kv_cache_gib
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.enforce_eager = enforce_eager
        self.sleep = sleep
        self.seeded = seeded
        self.sync_timeout_s = sync_timeout_s
        self.cpu_cores = parse_cores(cpu_cores)
        self.worker_extension = worker_extension
        self.engine_kwargs = dict(engine_kwargs or {})
        self.engine: EngineProcess | None = None
        self.generate_engine = HFEngine()  # the reference's samples
        self.sampling_settings: dict[str, Any] = {}
        self.stale = True  # the engine's weights are behind the policy's
        self.asleep = False
        self.weights_dir: str | None = None
        self.last_sync_s = 0.0  # seconds the last weight sync took (rollout/weight_sync_s)

    # ---- lifetime ----------------------------------------------------------------------------
    def setup(self, sampling: SamplingContext) -> None:
        if self.engine is not None:
            return
        import_vllm()
        if self.synced_generation:
            raise ConfigError("rollout=vllm cannot sync weights that ZeRO-3 shards (trainer=deepspeed_zero3); use "
                              "trainer=ddp with rollout=vllm, or rollout=hf.")
        self.generate_engine.setup(sampling)
        settings = sampling.settings
        self.sampling_settings = vllm_sampling_settings(settings.temperature, dict(settings.generation_kwargs),
                                                        settings.allow_biased_sampling)
        self.weights_dir = tempfile.mkdtemp(prefix="lit_rlhf_vllm_", dir=shared_memory_dir())
        self.engine = self.start_engine(sampling)
        self.stale = True  # the policy may differ from the checkpoint the engine loaded (an adapter, a resume)

    def engine_settings(self, sampling: SamplingContext) -> dict[str, Any]:
        spec = sampling.settings.model
        settings = dict(
            model=spec["name_or_path"], dtype=self.dtype or spec.get("dtype") or "auto",
            trust_remote_code=spec.get("trust_remote_code", False), skip_tokenizer_init=True,
            generation_config="vllm",  # the model's generation_config.json must not change the sampling
            logprobs_mode="processed_logprobs",  # after the temperature, as the trainer's logprobs
            gpu_memory_utilization=self.gpu_memory_utilization, enforce_eager=self.enforce_eager,
            enable_sleep_mode=self.sleep, worker_extension_cls=self.worker_extension,
            distributed_executor_backend="uni", disable_log_stats=True,
        )
        if self.kv_cache_gib is not None:
            settings["kv_cache_memory_bytes"] = int(self.kv_cache_gib * 2**30)
        if self.max_model_len is not None:
            settings["max_model_len"] = self.max_model_len
        return {**settings, **self.engine_kwargs}

    def start_engine(self, sampling: SamplingContext) -> EngineProcess:
        settings = self.engine_settings(sampling)
        check_kv_cache(sampling.policy.config, self.kv_cache_gib, settings.get("max_model_len"),
                       sampling.policy.get_input_embeddings().weight.element_size())
        architecture = getattr(sampling.policy.config, "architectures", None) or [type(sampling.policy).__name__]
        cores = None
        if sampling.device.type == "cpu":  # the trainer waits while the engine samples: its share of the cores
            check_cpu_head_dim(sampling.policy.config, settings["model"])
            cores = engine_cpu_cores(self.cpu_cores, torch.get_num_threads(), sampling.local_rank)
        try:
            with engine_device(sampling.device):
                return EngineProcess(settings, cores)
        except EngineError as err:  # vLLM reports bad input as ValueError / RuntimeError with a long text
            message = " ".join(str(err).split())
            if "architecture" in message.lower() and "support" in message.lower():
                raise ConfigError(f"vLLM cannot run the architecture {architecture[0]} of model.name_or_path="
                                  f"{settings['model']!r}; use rollout=hf.") from err
            if "KV cache" in message or "cache blocks" in message or "max_model_len" in message:
                raise ConfigError(f"the vLLM engine has too little KV-cache memory for model.name_or_path="
                                  f"{settings['model']!r} ({clipped(message)}); raise rollout.kv_cache_gib (or "
                                  f"rollout.gpu_memory_utilization) or lower rollout.max_model_len.") from err
            raise ConfigError(f"the vLLM engine failed to start ({clipped(message)}; its log is above): "
                              f"{START_FAILURE_HINT}.") from err

    def close(self) -> None:
        """Stops the engine's process (also done at exit)."""
        if self.engine is not None:
            self.engine.stop()
            self.engine = None

    # ---- weights -----------------------------------------------------------------------------
    def after_update(self, sampling: SamplingContext) -> None:
        self.stale = True

    def stats(self) -> dict[str, float]:
        return {"rollout/weight_sync_s": self.last_sync_s}

    def sync(self, sampling: SamplingContext) -> None:
        """The policy's trained weights into the engine, within sync_timeout_s, or a one-line error."""
        start = time.perf_counter()
        path = str(Path(self.weights_dir) / "policy.safetensors")
        save_file({name: t.contiguous().cpu() for name, t in trained_weights(sampling.policy).items()}, path)
        try:
            self.engine.call("rpc", "load_policy_weights", (path,), timeout_s=self.sync_timeout_s)
        except TimeoutError as err:
            self.engine = None  # stopped
            raise ConfigError(f"RL step {sampling.version}: the weight sync to the vLLM engine did not finish in "
                              f"{self.sync_timeout_s:g} s (rollout.sync_timeout_s); the engine is stuck or too slow, "
                              f"the checkpoints written so far are intact; resume from the last one.") from err
        except Exception as err:
            message = clipped(err)
            raise ConfigError(f"RL step {sampling.version}: the weight sync to the vLLM engine failed ({message}); the "
                              f"checkpoints written so far are intact; use rollout=hf if it persists.") from err
        finally:
            Path(path).unlink(missing_ok=True)
        self.stale = False
        self.last_sync_s = time.perf_counter() - start

    def wake(self) -> None:
        if self.asleep:
            self.engine.call("wake_up")
            self.asleep = False

    def rest(self, device: torch.device) -> None:
        """Sleep mode (GPU only: vLLM's CPU backend has none): weights offloaded, KV cache freed."""
        if self.sleep and device.type == "cuda":
            self.engine.call("sleep", 1)
            self.asleep = True

    # ---- sampling ----------------------------------------------------------------------------
    def begin(self, sampling: SamplingContext, from_reference: bool) -> None:
        if from_reference:
            return
        self.wake()  # sleep mode: the weights are back on the device before a sync writes them
        if self.stale:
            self.sync(sampling)

    def end(self, sampling: SamplingContext, from_reference: bool) -> None:
        if not from_reference:
            self.rest(sampling.device)

    def takes_random_stream(self) -> bool:
        return self.seeded

    @torch.no_grad()
    def generate_turn(self, sampling: SamplingContext, contexts: list[list[int]], max_new_tokens: int,
                      from_reference: bool, greedy: bool) -> list[tuple[list[int], list[float] | None]]:
        """One engine call for every live episode's turn (vLLM batches them); the reference samples with
        generate() (rollout=hf)."""
        if from_reference:
            return self.generate_engine.generate_turn(sampling, contexts, max_new_tokens, True, greedy)
        settings = {**self.sampling_settings, "temperature": 0.0} if greedy else self.sampling_settings
        common = dict(n=1, max_tokens=max_new_tokens, stop_token_ids=[sampling.stop_token_id], ignore_eos=True,
                      logprobs=None if greedy else 0, detokenize=False, **settings)
        stream = sampling.random_stream  # async mode at S >= 1: the draw's own
        base = int(torch.randint(2**31 - 1, (1,), generator=stream, device=stream.device if stream else None)) \
            if self.seeded else None
        rank = sampling.rank
        params = [{**common, "seed": None if base is None else (base + 7919 * rank + i) % 2**31}
                  for i in range(len(contexts))]
        try:
            outputs = self.engine.call("generate", contexts, params)
        except EngineError as err:  # vLLM's request validation errors (their classes vary across versions)
            if "context length" in str(err) or "max_model_len" in str(err):
                longest = max(map(len, contexts))
                length = sampling.settings.response_length
                raise ConfigError(f"a context of {longest} tokens with algo.response_length={length} "
                                  f"does not fit the vLLM engine's context; raise rollout.max_model_len (up to the "
                                  f"model's) or shorten data.max_prompt_length (or env.max_tokens).") from err
            raise
        return [(list(tokens), None if logprobs is None else list(logprobs)) for (tokens, logprobs), in outputs]

