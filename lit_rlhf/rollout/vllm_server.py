"""VLLMServerEngine: sampling from running vLLM servers (`rollout=vllm_server`), so that generation runs on machines
of its own while the trainer trains.

Each model turn of each episode is one request to a server's OpenAI-compatible completions endpoint, token ids in and
token ids out (no text round trip):

    POST {url}/v1/completions  {"model": m, "prompt": [ids], "max_tokens": n, "temperature": t, "seed": s,
                                "logprobs": 0, "return_tokens_as_token_ids": true, "stop_token_ids": [eos], ...}
    -> {"choices": [{"logprobs": {"tokens": ["token_id:17", ...], "token_logprobs": [-0.3, ...]}}]}

the requests spread over the servers (`urls`) in turn. After each RL step's update the servers take the policy's
weights before the next rollout, one of two ways (`weight_sync`):
- `merged`: the trained weights (LoRA merged into the layers it adapts: rollout/weights.py) are written to a
  safetensors file in `weights_dir`, a folder the servers read, and every server loads them in place through vLLM's
  `/collective_rpc` (lit_rlhf's WeightReceiver, the colocated engine's loader); a server that answers with another
  number of tensors than was sent stops the run;
- `adapter` (LoRA policies): the adapter alone is saved (peft's save_pretrained) to `weights_dir/<name>` and loaded
  by vLLM's runtime LoRA loading (`/v1/load_lora_adapter`) under a name that carries the version; the requests name
  it as their model, and the previous version is unloaded once every server holds the new one. Adapters on a
  mixture of experts' stacked experts (peft's parameter wrappers) are loaded as vLLM's 3D MoE LoRA weights.
The file's or adapter's name carries the version (RL steps trained). With several ranks (trainer=ddp, fsdp2) rank
zero alone sends each version while the others wait, then every rank samples its own prompts from it. Requests,
timeouts, retries and auth follow HTTPService's rules (lit_rlhf.remote.http).

Shapes: N contexts.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from peft.tuners.lora import ParamWrapper
from safetensors.torch import save_file

from lit_rlhf.config.validation import check_flag, check_setting_number
from lit_rlhf.distributed.ranks import on_rank_zero
from lit_rlhf.errors import ConfigError, UnavailableError
from lit_rlhf.interrupts import thread_pool
from lit_rlhf.models.policy import TRAINABLE_ADAPTER
from lit_rlhf.remote.http import HTTPService
from lit_rlhf.remote.schema import shown
from lit_rlhf.rollout.context import SamplingContext
from lit_rlhf.rollout.engine import RolloutEngine
from lit_rlhf.rollout.hf import HFEngine
from lit_rlhf.rollout.vllm_checks import vllm_sampling_settings
from lit_rlhf.rollout.weights import every_weight, trained_outside_lora, trained_weights

SERVE_HINT = ("start each server with `VLLM_SERVER_DEV_MODE=1 vllm serve <model.name_or_path> --worker-extension-cls "
              "lit_rlhf.rollout.vllm_worker.WeightReceiver --logprobs-mode processed_logprobs --generation-config "
              "vllm` (docs/scale.md)")
ADAPTER_SERVE_HINT = ("with rollout.weight_sync=adapter start each server with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "
                      "vllm serve <model.name_or_path> --enable-lora --max-lora-rank <model.lora.r or more> "
                      "--logprobs-mode processed_logprobs --generation-config vllm` (docs/scale.md)")
WEIGHT_SYNCS = ("merged", "adapter")


class RolloutServerError(UnavailableError):
    """A rollout server that cannot be reached, or whose answer is not what the engine asked for."""


class RolloutServer(HTTPService):
    """One vLLM server of the engine: its requests follow HTTPService's rules, its errors name it."""

    key, server_name, error = "rollout", "the rollout server", RolloutServerError
    health_path, docs_page = "/v1/models", "scale.md"
    url_setting, url_example = "urls", "[http://127.0.0.1:8000] (vllm serve <model> starts one)"

    def __init__(self, url: str, **http: Any):
        super().__init__(url.rstrip("/").removesuffix("/v1") if isinstance(url, str) else url, **http)
        self.served_model: str | None = None
        self.adapter: str | None = None  # the LoRA adapter requests name as their model (weight_sync=adapter)

    def connect(self, model: str | None) -> None:
        """The server is up and serves `model` (None: the first it lists)."""
        self.served_model = self.pick_served_model(model)

    def load_weights(self, path: str, tensors: int, version: int) -> None:
        """The weights in `path` (a file this server can read) into its model, through WeightReceiver."""
        where = f"{self.server_name} {self.shown_url} (weights of RL step {version})"
        body = self.request("POST", "/collective_rpc", {"method": "load_policy_weights", "args": [path]}, where,
                            missing_ok=True)
        if body is None:
            raise ConfigError(f"{where} has no /collective_rpc, so it cannot take the policy's weights; {SERVE_HINT}.")
        results = body.get("results") if isinstance(body, dict) else None
        if not isinstance(results, list) or not results or any(str(r) != str(tensors) for r in results):
            raise self.error(f"{where} loaded {shown(results)} tensors of the {tensors} sent; it did not take the "
                             f"policy's weights; {SERVE_HINT}.")

    def load_adapter(self, name: str, folder: str, version: int, largest_rank: int,
                     stacked_experts: bool = False) -> None:
        """The adapter saved in `folder` (a folder this server can read), loaded as `name`: what requests name next.
        `stacked_experts`: it adapts a mixture of experts' stacked expert weights (peft's parameter wrappers), which
        vLLM reads when the request says so (`is_3d_lora_weight`) and the server was started to."""
        where = f"{self.server_name} {self.shown_url} (adapter of RL step {version})"
        payload = {"lora_name": name, "lora_path": folder, **({"is_3d_lora_weight": True} if stacked_experts else {})}
        try:
            body = self.request("POST", "/v1/load_lora_adapter", payload, where, missing_ok=True, text=True)
        except RolloutServerError as err:
            if "max_lora_ran" in str(err):  # vLLM's "LoRA rank R is greater than max_lora_rank M", cut short
                raise ConfigError(f"{where} cannot hold this policy's adapter, of rank {largest_rank} at most "
                                  f"(model.lora.r, twice it on a mixture of experts' fused gate and up projections): "
                                  f"start it with --max-lora-rank {largest_rank} or more; {ADAPTER_SERVE_HINT}."
                                  ) from None
            if "3D MoE" in str(err):  # vLLM's "... contains fused 3D MoE weights ..., but the model uses a 2D ..."
                raise ConfigError(f"{where} cannot read adapters on a mixture of experts' stacked experts: start it "
                                  f"with --enable-mixed-moe-lora-format as well; {ADAPTER_SERVE_HINT}.") from None
            raise
        if body is None:
            raise ConfigError(f"{where} has no /v1/load_lora_adapter, so it cannot take the policy's adapter; "
                              f"{ADAPTER_SERVE_HINT}.")
        self.adapter = name

    def unload_adapter(self, name: str, version: int) -> None:
        where = f"{self.server_name} {self.shown_url} (the adapter of RL step {version})"
        self.request("POST", "/v1/unload_lora_adapter", {"lora_name": name}, where, text=True)

    def complete(self, context: list[int], max_new_tokens: int, settings: dict[str, Any], seed: int | None,
                 stop_token_id: int, greedy: bool, where: str) -> tuple[list[int], list[float] | None]:
        """One model turn after `context`: the sampled ids and the server's logprobs of them."""
        payload = {"model": self.adapter or self.served_model, "prompt": context, "max_tokens": max_new_tokens,
                   **settings, "stop_token_ids": [stop_token_id], "ignore_eos": True, "skip_special_tokens": False,
                   "logprobs": 0, "return_tokens_as_token_ids": True,
                   **({"temperature": 0.0} if greedy else {}), **({} if seed is None else {"seed": seed})}
        body = self.request("POST", "/v1/completions", payload, where)
        return parse_completion(body, stop_token_id, where, greedy)


def parse_completion(body: Any, stop_token_id: int, where: str, greedy: bool) -> tuple[list[int], list[float] | None]:
    """The sampled ids (`token_id:<id>` entries of logprobs.tokens) and their logprobs, or a one-line error."""
    try:
        logprobs = body["choices"][0]["logprobs"]
        tokens, values = logprobs["tokens"], logprobs["token_logprobs"]
        ids = [int(token.removeprefix("token_id:")) for token in tokens]
        if not all(token.startswith("token_id:") for token in tokens) or len(values) != len(ids):
            raise ValueError
        values = [float(v) for v in values]
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        raise RolloutServerError(f"{where} answered {shown(body)}; the engine asks for the sampled tokens as ids with "
                                 f"their logprobs (return_tokens_as_token_ids, logprobs: 0), which vLLM's "
                                 f"/v1/completions gives; {SERVE_HINT}.") from None
    if any(v > 1e-4 or v != v for v in values):
        raise RolloutServerError(f"{where} answered a logprob above 0 or NaN ({shown(values[:8])}); its answer is "
                                 f"not a distribution's.")
    return ids, None if greedy else values


class VLLMServerEngine(RolloutEngine):
    """Samples from the vLLM servers at `urls` (one URL or a list; requests spread over them in turn), each serving
    the policy's base model (`model`: its served name, null: the first it lists). weights_dir: a folder the trainer
    writes the policy's weights to and every server reads (a shared file system across machines; null: a fresh folder
    in shared memory, for servers on the trainer's machine). seeded: each turn's request carries a seed drawn from the
    draw's random stream, so a seeded run samples the same tokens again. weight_sync: how the servers take the
    policy's weights after an update, `merged` (the weights training changes, LoRA merged, loaded in place) or
    `adapter` (a LoRA policy's adapter alone, through vLLM's runtime LoRA loading). max_concurrency, timeout_s, retries,
    backoff_s, auth_env: HTTPService's, per server. The reference (evaluation's baseline) samples with `generate`
    in the trainer, as rollout=vllm does: the servers hold the policy's weights only."""

    reports_logprobs = True
    concurrent_draws = False  # the servers hold one set of weights at a time
    shared_by_ranks = True  # every rank samples from the same servers, which rank zero syncs

    def __init__(self, urls: str | list[str], model: str | None = None, weights_dir: str | None = None,
                 seeded: bool = True, max_concurrency: int = 16, timeout_s: float = 120.0, retries: int = 3,
                 backoff_s: float = 0.5, auth_env: str | None = None, weight_sync: str = "merged"):
        urls = [urls] if isinstance(urls, str) else list(urls or [])
        if not urls:
            raise ConfigError("rollout.urls is empty: give the vLLM servers to sample from, e.g. "
                              "rollout.urls=[http://127.0.0.1:8000].")
        check_flag("rollout.seeded", seeded)
        if weight_sync not in WEIGHT_SYNCS:
            raise ConfigError(f"rollout.weight_sync={weight_sync!r} is not one of {', '.join(WEIGHT_SYNCS)}: merged "
                              f"sends the weights training changes, adapter a LoRA policy's adapter alone.")
        check_setting_number("rollout.max_concurrency", max_concurrency, minimum=1, integer=True)
        self.servers = [RolloutServer(url, batch_size=1, max_concurrency=max_concurrency, timeout_s=timeout_s,
                                      retries=retries, backoff_s=backoff_s, auth_env=auth_env) for url in urls]
        repeated = next((server for i, server in enumerate(self.servers)
                         if server.url in [other.url for other in self.servers[:i]]), None)
        if repeated is not None:  # it would take each weight sync twice and two shares of every draw
            raise ConfigError(f"rollout.urls names {repeated.shown_url} twice; list each server once.")
        self.model, self.weights_dir, self.seeded, self.weight_sync = model, weights_dir, seeded, weight_sync
        self.adapter_prefix = f"lit_rlhf-{uuid.uuid4().hex[:8]}"  # this run's adapters, apart from another run's
        self.max_concurrency = max_concurrency * len(urls)
        self.generate_engine = HFEngine()  # the reference's samples
        self.sampling_settings: dict[str, Any] = {}
        self.stale = True  # the servers' weights are behind the policy's
        self.synced_everything = False
        self.version: int | None = None  # the RL steps the servers' weights were trained on
        self.last_sync_s, self.last_sync_mib = 0.0, 0.0

    def setup(self, sampling: SamplingContext) -> None:
        if self.sampling_settings:
            return
        if self.synced_generation:  # every rank sees it: all of them stop on the same line
            raise ConfigError("rollout=vllm_server sends the servers whole weights, which ZeRO-3 "
                              "(trainer=deepspeed_zero3) never holds; use trainer=ddp or trainer=fsdp2.")
        settings = sampling.settings
        self.sampling_settings = vllm_sampling_settings(settings.temperature, dict(settings.generation_kwargs),
                                                        settings.allow_biased_sampling)
        self.generate_engine.setup(sampling)
        for server in self.servers:
            server.connect(self.model)
        # several ranks: rank zero writes the weights and names the adapters, the others sample from what it sent
        self.adapter_prefix = on_rank_zero(lambda: self.adapter_prefix)
        if sampling.rank == 0:
            if self.weights_dir is None:
                shm = Path("/dev/shm")
                self.weights_dir = tempfile.mkdtemp(prefix="lit_rlhf_servers_", dir=shm if shm.is_dir() else None)
            Path(self.weights_dir).mkdir(parents=True, exist_ok=True)
        self.stale = True  # the servers may serve other weights than the policy's (an adapter, a resume)
        self.synced_everything = False  # the first sync sends every weight: a server may hold another run's

    # ---- weights -----------------------------------------------------------------------------
    def after_update(self, sampling: SamplingContext) -> None:
        self.stale = True

    def stats(self) -> dict[str, float]:
        return {"rollout/weight_sync_s": self.last_sync_s, "rollout/weight_sync_mib": self.last_sync_mib}

    def sync(self, sampling: SamplingContext) -> None:
        """The policy's weights into every server, or a one-line error naming the server. With several ranks (the
        same weights on each) rank zero sends them while the others wait, and all stop on its error."""
        start = time.perf_counter()
        send = self.sync_adapter if self.weight_sync == "adapter" else self.sync_merged
        self.last_sync_mib = on_rank_zero(lambda: send(sampling))
        if self.weight_sync == "adapter":  # what every rank's requests name from now on
            for server in self.servers:
                server.adapter = self.adapter_name(sampling.version)
        self.stale, self.version = False, sampling.version
        self.last_sync_s = time.perf_counter() - start

    def sync_merged(self, sampling: SamplingContext) -> float:
        """The trained weights, LoRA merged (the first time every weight), loaded in place; the MiB sent."""
        changed = trained_weights if self.synced_everything else every_weight
        weights = {name: t.contiguous().cpu() for name, t in changed(sampling.policy).items()}
        path = Path(self.weights_dir) / f"policy-v{sampling.version}.safetensors"
        save_file(weights, str(path))
        try:
            for server in self.servers:
                server.load_weights(str(path), len(weights), sampling.version)
        finally:
            path.unlink(missing_ok=True)
        self.synced_everything = True
        return sum(t.numel() * t.element_size() for t in weights.values()) / 2**20

    def sync_adapter(self, sampling: SamplingContext) -> float:
        """The LoRA adapter alone, saved and loaded under a versioned name, the previous one unloaded; the MiB
        written."""
        policy = sampling.policy
        if not isinstance(policy, PeftModel):
            raise ConfigError("rollout.weight_sync=adapter sends a LoRA adapter, and this policy has none "
                              "(model.lora=null): use rollout.weight_sync=merged, or train with model.lora.")
        if any(getattr(config, "use_dora", False) for config in policy.peft_config.values()):
            raise ConfigError("rollout.weight_sync=adapter sends the LoRA adapter, and vLLM does not serve DoRA "
                              "adapters (model.lora.use_dora=true): use rollout.weight_sync=merged.")
        if outside := trained_outside_lora(policy):
            raise ConfigError(f"rollout.weight_sync=adapter sends the LoRA adapter only, and this policy also trains "
                              f"{shown(outside[:3])}: use rollout.weight_sync=merged.")
        name = self.adapter_name(sampling.version)
        folder = Path(self.weights_dir) / name
        # the parameters as they are now: under trainer=fsdp2 the whole tensors gathered for the rollout (the
        # module's state_dict() would give each rank's shards)
        policy.save_pretrained(str(folder), state_dict={n: p.detach() for n, p in policy.named_parameters()})
        previous = self.servers[0].adapter
        config = policy.peft_config[TRAINABLE_ADAPTER]  # peft's rank_pattern: the fused experts' larger rank
        largest_rank = max([config.r, *(config.rank_pattern or {}).values()])
        stacked_experts = any(isinstance(module, ParamWrapper) for module in policy.modules())
        for server in self.servers:
            server.load_adapter(name, str(folder), sampling.version, largest_rank, stacked_experts)
        if previous is not None and previous != name:
            for server in self.servers:
                server.unload_adapter(previous, self.version)
            shutil.rmtree(Path(self.weights_dir) / previous, ignore_errors=True)
        return sum(f.stat().st_size for f in folder.iterdir()) / 2**20

    def adapter_name(self, version: int) -> str:
        """The name the servers hold the adapter of `version` under (this run's prefix, the same on every rank)."""
        return f"{self.adapter_prefix}-v{version}"

    def begin(self, sampling: SamplingContext, from_reference: bool) -> None:
        """Before a rollout: the servers take the weights of the context's policy unless they hold them already (the
        trainer's and the async producer's copy take turns)."""
        if not from_reference and (self.stale or self.version != sampling.version):
            self.sync(sampling)

    def takes_random_stream(self) -> bool:
        return self.seeded

    # ---- sampling ----------------------------------------------------------------------------
    @torch.no_grad()
    def generate_turn(self, sampling: SamplingContext, contexts: list[list[int]], max_new_tokens: int,
                      from_reference: bool, greedy: bool) -> list[tuple[list[int], list[float] | None]]:
        """One request per context, spread over the servers, max_concurrency per server at a time."""
        if from_reference:
            return self.generate_engine.generate_turn(sampling, contexts, max_new_tokens, True, greedy)
        if self.stale or self.version != sampling.version:
            raise ConfigError(f"RL step {sampling.version}: the rollout servers hold the weights of RL step "
                              f"{self.version}; a draw must begin with the engine's sync (RolloutEngine.sample).")
        stream = sampling.random_stream  # async mode at S >= 1: the draw's own
        base = int(torch.randint(2**31 - 1, (1,), generator=stream, device=stream.device if stream else None)) \
            if self.seeded else None
        servers = itertools.cycle(self.servers)
        jobs = [(next(servers), i) for i in range(len(contexts))]
        offset = 7919 * sampling.rank  # the ranks' random streams start alike: each rank its own seeds

        def turn(job: tuple[RolloutServer, int]) -> tuple[list[int], list[float] | None]:
            server, i = job
            seed = None if base is None else (base + offset + i) % 2**31
            where = f"{server.server_name} {server.shown_url} (RL step {sampling.version}, context {i + 1} of " \
                    f"{len(contexts)})"
            return server.complete(contexts[i], max_new_tokens, self.sampling_settings, seed,
                                   sampling.stop_token_id, greedy, where)

        with thread_pool(self.max_concurrency, "rollout-server") as pool:
            return list(pool.map(turn, jobs))
