"""HFEngine: sampling with Hugging Face `generate` on the module's own policy (`rollout=hf`, the default).

Shapes: N sequences, P prompt length, R response length.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from transformers import DynamicCache, GenerationConfig, LogitsProcessorList, StaticCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from lit_rlhf.config.sampling_checks import NEUTRAL_VALUES
from lit_rlhf.config.validation import check_flag, check_setting_number, warn_once
from lit_rlhf.errors import ConfigError
from lit_rlhf.rollout import compiled_decoding as compiled
from lit_rlhf.rollout.context import SamplingContext
from lit_rlhf.rollout.engine import RolloutEngine, left_pad
from lit_rlhf.rollout.inverse_cdf import InverseCDFSampler
from lit_rlhf.rollout.merged_adapters import check_merge_adapters, merged_adapters
from lit_rlhf.rollout.sampling import pure_sampling_config, sampling_defaults_only

TOKEN_SAMPLERS = ("inverse_cdf", "generate")
# generate() settings that act only while generate() samples itself (its warpers after the temperature), or that
# choose another decoding strategy: with any of them set, generate() draws the tokens. Its logits processors
# (min_new_tokens, repetition_penalty, ...) run before either token sampler.
GENERATE_SAMPLES = ("top_h", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "num_beams",
                    "num_beam_groups", "penalty_alpha", "diversity_penalty", "constraints", "force_words_ids",
                    "dola_layers")


class HFEngine(RolloutEngine):
    """`generate()` on the policy (or on the reference: adapters disabled, or its frozen copy), pure sampling
    from softmax(logits / temperature); the policy is in eval mode (no dropout) while it samples.

    shared_prefill: the K samples of a prompt share one prefill: the B distinct prompts run through the model once
    and their KV cache is repeated K times, instead of N = B*K identical prefills (the same logits, so the same
    samples under the same seed).

    token_sampler: how the next token is drawn from softmax(logits / temperature): "inverse_cdf", one uniform number per
    sequence against the cumulative distribution (lit_rlhf.rollout.inverse_cdf); "generate", generate()'s own
    torch.multinomial (one random number per vocabulary entry; what runs anyway where algo.generation_kwargs set a
    warper such as top_k or top_p). The same distribution and reproducible under a seed, but other tokens for the
    same seed.

    compile_mode: a torch.compile mode for the decoding step over a static KV cache of static_cache_length
    positions (None: sized per call), lit_rlhf.rollout.compiled_decoding; None: plain generate(); "auto" (the
    default): reduce-overhead (CUDA graphs) where the policy samples on CUDA, plain generate() elsewhere. Where
    compilation cannot run (no compiler, an unsupported platform, weights sharded across ranks), one warning and
    plain generate().

    merge_adapters: sample with each LoRA layer's adapters merged into a new copy of its weight
    (lit_rlhf.rollout.merged_adapters): "auto" where the weights are float32, True in any dtype, False never;
    not with weights sharded across ranks, nor under a compile mode that captures CUDA graphs.

    sampler: token_sampler's old name (rollout.sampler), with a FutureWarning; it goes in the next release."""

    def __init__(self, shared_prefill: bool = True, token_sampler: str = "inverse_cdf",
                 compile_mode: str | None = compiled.AUTO, static_cache_length: int | None = None,
                 merge_adapters: str | bool = "auto", sampler: str | None = None):
        if sampler is not None:
            warnings.warn(f"rollout.sampler={sampler} is now rollout.token_sampler={sampler} (HFEngine(token_sampler="
                          f"...)); the old name goes in the next release.", FutureWarning, stacklevel=2)
            token_sampler = sampler
        if token_sampler not in TOKEN_SAMPLERS:
            raise ConfigError(f"rollout.token_sampler={token_sampler!r} is not a token sampler; use one of "
                              f"{', '.join(TOKEN_SAMPLERS)}.")
        check_flag("rollout.shared_prefill", shared_prefill)
        compiled.check_compile_mode(compile_mode)
        check_setting_number("rollout.static_cache_length", static_cache_length, minimum=1, optional=True,
                             integer=True)
        if static_cache_length is not None and compile_mode is None:
            warn_once(f"rollout.static_cache_length={static_cache_length} does nothing without rollout.compile_mode "
                      f"(plain generate() sizes its cache per call); set rollout.compile_mode or drop it.")
        check_merge_adapters(merge_adapters)
        self.merge_adapters = merge_adapters
        self.generation_config: GenerationConfig | None = None
        self.shared_prefill = shared_prefill
        self.token_sampler = token_sampler
        self.compile_mode, self.static_cache_length = compile_mode, static_cache_length
        # decided at the first call, on the device the policy samples on: the mode that runs (auto resolved), and
        # whether compilation can run there
        self.resolved_mode: str | None = None
        self.compile_ready: bool | None = None

    def setup(self, sampling: SamplingContext) -> None:
        compiled.check_static_cache_length(self.static_cache_length, compiled.model_context(sampling.policy))
        settings = sampling.settings
        self.generation_config = pure_sampling_config(
            settings.response_length, settings.temperature, sampling.stop_token_id, sampling.tokenizer.pad_token_id,
            settings.generation_kwargs, settings.allow_biased_sampling)

    @torch.no_grad()
    def generate_turn(self, sampling: SamplingContext, contexts: list[list[int]], max_new_tokens: int,
                      from_reference: bool, greedy: bool) -> list[tuple[list[int], None]]:
        input_ids, attention_mask = left_pad(contexts, sampling.tokenizer.pad_token_id, sampling.device)  # N,L ; N,L
        # ZeRO-3 steps every rank's forwards together: a prefill on one rank alone would stall the others
        siblings = sibling_count(contexts) if self.shared_prefill and not self.synced_generation else 1
        config = GenerationConfig(**{**self.generation_config.to_dict(), "max_new_tokens": max_new_tokens,
                                     **({"do_sample": False} if greedy else {})})
        was_training = sampling.policy.training
        sampling.policy.eval()
        try:
            if from_reference:
                with sampling.reference.active() as reference:
                    sequences = self.generate(sampling, reference, input_ids, attention_mask, config,
                                              siblings)  # N,L+T
            else:
                sequences = self.generate(sampling, sampling.policy, input_ids, attention_mask, config, siblings,
                                          sampling.random_stream)
        finally:
            sampling.policy.train(was_training)
        return [(row, None) for row in sequences[:, input_ids.shape[1]:].tolist()]  # one transfer to the host

    def generate(self, sampling: SamplingContext, model: torch.nn.Module, queries: torch.Tensor,
                 query_mask: torch.Tensor, config: GenerationConfig, siblings: int = 1,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Samples of N = B*siblings contexts (each distinct one repeated `siblings` times, adjacent). -> N,P+R'
        generator: the draw's own random stream (None: torch's default generator); only the inverse-CDF sampler
        takes one (generate()'s own sampler always draws from torch's default generator)."""
        requested = config
        extra = {}  # generate()'s keyword arguments beyond the prompts and config
        if self.draws_with_own_stream(config):
            # a greedy generate() whose last logits processor draws the token (generate() has no sampler hook)
            extra["logits_processor"] = LogitsProcessorList([InverseCDFSampler(config.temperature, generator)])
            config = GenerationConfig(**{**config.to_dict(), "do_sample": False, "temperature": None, "top_k": None,
                                         "top_p": None})  # sampling's settings unset: the processor samples
        # no merge of sharded weights (ZeRO-3 gathers them layer by layer as generate() runs; FSDP2 gathers them
        # for the rollout, and merged copies would add to the memory sharding saves), nor under CUDA graphs, which
        # hold their weights' addresses (new merged tensors at every call would change them)
        mode = self.compiled_mode(queries.device, model)
        unmergeable = self.lockstep or self.synced_generation or mode in compiled.CUDA_GRAPH_MODES
        merge = False if unmergeable else self.merge_adapters
        with merged_adapters(model, merge):
            return self.generate_with(sampling, model, queries, query_mask, config, siblings, requested, extra, mode,
                                      generator)

    def generate_with(self, sampling: SamplingContext, model: torch.nn.Module, queries: torch.Tensor,
                      query_mask: torch.Tensor, config: GenerationConfig, siblings: int, requested: GenerationConfig,
                      extra: dict[str, Any], mode: str | None, generator: torch.Generator | None
                      ) -> torch.Tensor:
        use_compiled = mode is not None
        static_length = None
        if use_compiled:  # a static cache (holding the shared prefill, if any), and generate() compiles its step
            static_length = compiled.cache_length(queries.shape[1] + config.max_new_tokens, self.static_cache_length,
                                                  compiled.model_context(model))
            config = copy.deepcopy(config)
            config.compile_config = compiled.compile_config(mode)
        cache = starting_cache(model, queries, query_mask, siblings, static_length)
        if cache is not None:
            extra[cache_keyword(model)] = cache
        try:
            with sampling_defaults_only(model):  # not the model folder's repetition_penalty, min_p, ...
                sequences = model.generate(input_ids=queries, attention_mask=query_mask, generation_config=config,
                                           synced_gpus=self.synced_generation, **extra)  # N,P+R'
            for processor in extra.get("logits_processor", []):
                if isinstance(processor, InverseCDFSampler):
                    processor.check()
            return sequences
        except RuntimeError as err:
            if use_compiled and compiled.is_compile_failure(err):
                self.fall_back(f"torch.compile failed ({type(err).__name__}: {str(err).strip().splitlines()[0]})")
                return self.generate(sampling, model, queries, query_mask, requested, siblings, generator)
            if "probability tensor contains" not in str(err):
                raise
            raise ConfigError(f"sampling failed at RL step {sampling.version}: the policy's logits are not finite; "
                              f"lower algo.optimizer.lr (and keep algo.max_grad_norm), or resume from an earlier "
                              f"checkpoint.") from err

    def draws_with_own_stream(self, config: GenerationConfig) -> bool:
        """Whether sampling draws with the inverse-CDF sampler, which takes a random stream of its own."""
        return self.token_sampler == "inverse_cdf" and config.do_sample and only_temperature_warps(config)

    def takes_random_stream(self) -> bool:
        return self.generation_config is not None and self.draws_with_own_stream(self.generation_config)

    def compiled_mode(self, device: torch.device, model: torch.nn.Module | None = None) -> str | None:
        """The torch.compile mode this call decodes with, None for plain generate() (decided once: the setting, the
        device, the platform, the model's cache)."""
        if self.compile_ready is None:
            self.resolved_mode = compiled.resolve_mode(self.compile_mode, device)
            self.compile_ready = self.resolved_mode is not None
            if self.compile_ready:
                compiled.check_mode_runs_on(self.resolved_mode, device)
                states = model is not None and not keys_and_values_only(model)
                if (self.synced_generation or states) and self.compile_mode == compiled.AUTO:
                    self.compile_ready = False  # plain generate(), as the default expects of such runs
                elif reason := self.why_not_compiled(device, model, states):
                    self.fall_back(reason)
            if not self.compile_ready and self.static_cache_length is not None and self.compile_mode is not None:
                setting = "auto" if self.compile_mode == compiled.AUTO else self.compile_mode
                warn_once(f"rollout.static_cache_length={self.static_cache_length} does nothing here: "
                          f"rollout.compile_mode={setting} decodes with plain generate() on {device.type} (a cache "
                          f"sized per call); drop it, or set a compile mode that runs here "
                          f"(rollout.compile_mode=default).")
        return self.resolved_mode if self.compile_ready else None

    def why_not_compiled(self, device: torch.device, model: torch.nn.Module | None, states: bool) -> str | None:
        if self.synced_generation:
            return "the weights are sharded across ranks, whose decoding steps run in lockstep"
        if states:
            kind = getattr(model.config, "model_type", type(model).__name__)
            return (f"the {kind} model's cache holds layer states other than keys and values "
                    f"(linear attention, convolution or state-space layers), which the compiled step's static cache "
                    f"does not")
        return compiled.unavailable_reason(device)

    def fall_back(self, reason: str) -> None:
        self.compile_ready = False
        setting = (f"auto ({self.resolved_mode} on this device)" if self.compile_mode == compiled.AUTO
                   else self.compile_mode)
        rank_zero_warn(f"rollout.compile_mode={setting}: {reason}; sampling with plain generate() "
                       f"(a dynamic KV cache, no compilation).")


def only_temperature_warps(config: GenerationConfig) -> bool:
    """Whether generate() would sample from softmax(processed logits / temperature): no other warper, no other
    decoding strategy."""
    return all(getattr(config, key, None) in NEUTRAL_VALUES[key] for key in GENERATE_SAMPLES)


def sibling_count(contexts: list[list[int]]) -> int:
    """K when the contexts are groups of K adjacent identical ones (a rollout's first turn), else 1."""
    k = 1
    while k < len(contexts) and contexts[k] == contexts[0]:
        k += 1
    if k == 1 or len(contexts) % k:
        return 1
    same = all(contexts[i] == contexts[i - i % k] for i in range(len(contexts)))
    return k if same else 1


def starting_cache(model: torch.nn.Module, queries: torch.Tensor, query_mask: torch.Tensor, siblings: int,
                   static_length: int | None) -> DynamicCache | StaticCache | None:
    """The KV cache generate() starts from: the shared prefill where `siblings` adjacent rows share each prompt, in a
    static cache of static_length positions where the decoding step is compiled (None: generate()'s own cache).
    queries, query_mask: N,P left-padded."""
    prefilled = None
    if siblings > 1 and queries.shape[1] > 1 and keys_and_values_only(model):
        prefilled = shared_prefill(model, queries[::siblings], query_mask[::siblings], siblings,
                                   every_position=static_length is not None)
    return prefilled if static_length is None else compiled.static_cache(model, static_length, prefilled)


def keys_and_values_only(model: torch.nn.Module) -> bool:
    """Whether every layer of the model's cache holds attention keys and values (full or sliding-window attention),
    which the shared prefill repeats and the compiled step's static cache holds. Not so where layers keep the state
    of linear attention, a convolution or a state-space model (Qwen3.5, Qwen3-Next, LFM2, Nemotron-H, Falcon-H1):
    generate() prefills those models' rows itself, in a cache of its own making."""
    config = getattr(model, "config", None)
    layers = DynamicCache(config=config).layers if config is not None else []
    return all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) for layer in layers)


def shared_prefill(model: torch.nn.Module, queries: torch.Tensor, query_mask: torch.Tensor, k: int,
                   every_position: bool = False) -> DynamicCache:
    """The KV cache of the B distinct prompts but their last token, each repeated k times (generate() runs the last
    token, which gives the first sampled token's logits). queries, query_mask: B,P left-padded. every_position: each
    layer keeps every position, a sliding-window layer too, as a static cache filled from it needs (a cache built from
    the model's configuration keeps a sliding layer's last window - 1 positions only, and a static layer given those
    would take them for the whole prompt: wrong positions and masks once the prompt is longer than the window)."""
    positions = (query_mask.cumsum(-1) - 1).clamp(min=0)  # B,P  as generate() numbers left-padded rows
    cache = DynamicCache(config=None if every_position else getattr(model, "config", None))
    model(input_ids=queries[:, :-1], attention_mask=query_mask[:, :-1], position_ids=positions[:, :-1],
          use_cache=True, **{cache_keyword(model): cache})
    cache.batch_repeat_interleave(k)
    return cache


def cache_keyword(model: torch.nn.Module) -> str:
    """The name under which this model's forward and generate() take a KV cache: `cache` in newer transformers,
    `past_key_values` before."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values"
