"""rollout=vllm_server against a running `vllm serve` of the embedded default (the CPU build): its logprobs of the
sampled tokens are the trainer's, after a weight sync it samples from the updated policy (and only then), a LoRA
policy's adapter alone serves under a versioned name (a mixture of experts' as its stacked experts), a LoRA, an
adapter-synced and a fully fine-tuned run train through train.py (and an asynchronous one, and two ranks under DDP
and FSDP2 that rank zero syncs for), a server another run synced serves this run's weights, and a server that goes
away stops a draw in one line naming it."""

import csv
import json
import urllib.request

import pytest
import torch
from peft.tuners.lora import ParamWrapper

from lit_rlhf.errors import ConfigError, UnavailableError
from lit_rlhf.rollout.vllm_server import VLLMServerEngine
from lit_rlhf.rollout.weights import trained_weights
from tests.apps import run_app
from tests.conftest import LORA, TINY_PYTHIA, make_rloo
from tests.helpers import FAST, ROOT, one_line_error
from tests.remote.test_reward_server import ServedInThread
from tests.vllm.servers import free_port, serve, stop
from tests.vllm.test_vllm_engine import TOLERANCE, first_batch, max_logprob_diff, save_tiny_moe, seeded_sample

# every test here starts a vLLM server or runs train.py: the integration tier
pytestmark = pytest.mark.integration

# docs/scale.md's server flags: /collective_rpc on, lit_rlhf's receiver, logprobs after the temperature; and those of
# rollout.weight_sync=adapter: runtime LoRA loading (its tests come first: the merged syncs change the base weights)
FLAGS = ("--generation-config", "vllm", "--logprobs-mode", "processed_logprobs",
         "--worker-extension-cls", "lit_rlhf.rollout.vllm_worker.WeightReceiver", "--enable-lora", "--max-lora-rank",
         "16")
ENV = {"VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": str(ROOT), "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}


def serve_policy(log_path, port: int):
    return serve(TINY_PYTHIA, port, log_path, *FLAGS, env=ENV)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port, log = free_port(), tmp_path_factory.mktemp("vllm_serve") / "server.log"
    process = serve_policy(log, port)
    yield {"url": f"http://127.0.0.1:{port}", "port": port, "log": log, "process": process}
    stop(process)


@pytest.fixture(scope="module")
def module(server):
    module = make_rloo(rollout_engine=VLLMServerEngine(urls=[server["url"]]), response_length=24)
    module.configure_model()
    return module


def perturb_adapters(policy) -> None:
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn_like(param) * 0.3)


def served_models(url: str) -> set[str]:
    with urllib.request.urlopen(url + "/v1/models", timeout=10) as answer:
        return {model["id"] for model in json.load(answer)["data"]}


def test_adapter_sync_serves_the_policy_s_adapter_under_a_versioned_name_and_unloads_the_last(server, tmp_path):
    engine = VLLMServerEngine(urls=[server["url"]], weight_sync="adapter", weights_dir=str(tmp_path))
    module = make_rloo(rollout_engine=engine, response_length=24)
    module.configure_model()
    perturb_adapters(module.policy)  # an adapter that changes what is sampled
    batch = first_batch()
    first = seeded_sample(module, batch)
    assert max_logprob_diff(module, first) < TOLERANCE  # the adapted policy's logprobs, not the base model's
    first_adapter = engine.servers[0].adapter
    assert first_adapter.endswith("-v0") and first_adapter in served_models(server["url"])
    perturb_adapters(module.policy)
    module.sampler.context.version = 1
    engine.after_update(module.sampler.context)
    second = seeded_sample(module, batch)
    assert not torch.equal(second.responses, first.responses) and max_logprob_diff(module, second) < TOLERANCE
    assert engine.servers[0].adapter.endswith("-v1")
    assert engine.servers[0].adapter in served_models(server["url"]) and first_adapter not in served_models(
        server["url"])  # the last version unloaded, and its folder removed
    assert [p.name for p in tmp_path.iterdir()] == [engine.servers[0].adapter]
    merged_mib = sum(t.numel() * t.element_size() for t in trained_weights(module.policy).values()) / 2**20
    assert 0 < engine.stats()["rollout/weight_sync_mib"] < merged_mib / 3  # the adapter, not the merged layers


def test_adapters_on_a_mixture_of_experts_load_as_its_stacked_experts(tmp_path):
    """A tiny Qwen3-MoE whose LoRA adapters reach its experts (peft's parameter wrappers on the stacked weights): a
    server started with --enable-mixed-moe-lora-format loads each version when the request says the experts are
    stacked, and one asked without saying so is one line naming the flag. (vLLM's CPU build has no kernel for LoRA
    on experts, so these adapters cannot sample here.)"""
    port = free_port()
    process = serve(save_tiny_moe(tmp_path / "moe"), port, tmp_path / "server.log", *FLAGS,
                    "--enable-mixed-moe-lora-format", env=ENV)
    try:
        url = f"http://127.0.0.1:{port}"
        engine = VLLMServerEngine(urls=[url], weight_sync="adapter", weights_dir=str(tmp_path / "adapters"),
                                  retries=0)
        module = make_rloo(model={"name_or_path": str(tmp_path / "moe"), "lora": LORA}, rollout_engine=engine)
        module.configure_model()
        assert any(isinstance(m, ParamWrapper) for m in module.policy.modules())  # adapters on the experts
        for version in (0, 1):
            module.sampler.context.version = version
            engine.begin(module.sampler.context, from_reference=False)
            assert engine.servers[0].adapter.endswith(f"-v{version}") and engine.servers[0].adapter in served_models(
                url)
        assert not any(name.endswith("-v0") for name in served_models(url))  # the last version unloaded
        server = engine.servers[0]
        with pytest.raises(ConfigError, match="start it with --enable-mixed-moe-lora-format"):
            server.load_adapter("unsaid", str(tmp_path / "adapters" / server.adapter), 1, 16, stacked_experts=False)
    finally:
        stop(process)


def test_train_py_trains_with_adapter_sync(server, tmp_path):
    trains_three_steps_synced_every_step(server, tmp_path, ["rollout.weight_sync=adapter"])  # model.lora.r=16


def two_ranks_sample_from_servers_that_rank_zero_alone_syncs(server, tmp_path, trainer: str, weight_sync: str):
    """Rank zero sends the weights once per version, the other rank waits for them and samples the same version (an
    adapter under the name rank zero gave it)."""
    route = "/v1/load_lora_adapter" if weight_sync == "adapter" else "/collective_rpc"
    before = server["log"].read_text().count(f"POST {route}")
    args = ["rollout=vllm_server", f"rollout.urls=[{server['url']}]", f"rollout.weight_sync={weight_sync}",
            *[a for a in FAST if not a.startswith("steps=")], "steps=3", f"trainer={trainer}",
            "trainer.accelerator=cpu", "trainer.devices=2", f"hydra.run.dir={tmp_path}"]
    result = run_app("train.py", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    # one sync per version, not one per rank: versions 0-2 for the three steps, 3 for the held-out evaluation after
    syncs = server["log"].read_text().count(f"POST {route}") - before
    assert syncs == 4, syncs
    rows = [r for r in csv.DictReader((tmp_path / "csv" / "metrics.csv").open()) if r.get("rollout/logprob_diff_max")]
    assert len(rows) == 3 and max(float(r["rollout/logprob_diff_max"]) for r in rows) < 1e-3


def test_fsdp2_ranks_sample_from_the_servers_that_rank_zero_syncs_with_the_gathered_adapter(server, tmp_path):
    """trainer=fsdp2: the adapter is saved from the whole weights gathered for the rollout, not from a rank's
    shards."""
    two_ranks_sample_from_servers_that_rank_zero_alone_syncs(server, tmp_path, "fsdp2", "adapter")


def test_a_run_samples_from_the_servers_beside_a_served_reward_and_a_served_teacher(server, tmp_path):
    """Distillation with everything served: the policy's samples from the rollout server (adapter sync), the reward
    from lit_rlhf's reward server (reward=http; the app `python -m lit_rlhf.serve` serves, in a thread here), the
    teacher's logprobs from a vLLM server (teacher=served: here the rollout server's base model, the first it lists)."""
    with ServedInThread("reward._target_=tests.helpers.length_reward") as reward_server:
        args = ["algo=distill", "teacher=served", f"teacher.url={server['url']}/v1", "algo.temperature=1",
                "algo.task_reward_coef=1", "reward=http", f"reward.url={reward_server.url}", "rollout=vllm_server",
                f"rollout.urls=[{server['url']}]", "rollout.weight_sync=adapter",
                *[a for a in FAST if not a.startswith("steps=")], "steps=2", f"hydra.run.dir={tmp_path}"]
        result = run_app("train.py", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [r for r in csv.DictReader((tmp_path / "csv" / "metrics.csv").open()) if r.get("rollout/logprob_diff_max")]
    assert len(rows) == 2 and max(float(r["rollout/logprob_diff_max"]) for r in rows) < 1e-3
    assert all(float(r["distill/teacher_tokens"]) > 0 and float(r["distill/teacher_logprob_mean"]) < 0 for r in rows)
    assert all(float(r["objective/scores"]) > 1 for r in rows)  # lengths in characters: the served reward's scores


def test_an_adapter_above_the_server_s_max_lora_rank_is_one_line(server, tmp_path):
    args = ["rollout=vllm_server", f"rollout.urls=[{server['url']}]", "rollout.weight_sync=adapter",
            "rollout.retries=0", "model.lora.r=32", *FAST, f"hydra.run.dir={tmp_path}"]
    line = one_line_error(run_app("train.py", *args, cwd=tmp_path))
    assert line.startswith("error: the rollout server http://127.0.0.1:"), line
    assert "cannot hold this policy's adapter, of rank 32 at most (model.lora.r" in line
    assert "start it with --max-lora-rank 32 or more" in line


def test_the_server_s_logprobs_of_the_sampled_tokens_are_the_trainer_s(module):
    batch = first_batch()
    samples = seeded_sample(module, batch)
    assert samples.responses.shape == samples.sampler_logprobs.shape == (len(batch["input_ids"]) * 4, 24)
    stopped = (samples.responses == module.stop_token_id).any(1)
    assert stopped.any()
    for row, mask in zip(samples.responses[stopped], samples.response_mask[stopped], strict=True):
        stop_at = int((row == module.stop_token_id).nonzero()[0])
        assert mask[: stop_at + 1].all() and not mask[stop_at + 1:].any()
    assert max_logprob_diff(module, samples) < TOLERANCE
    assert torch.equal(seeded_sample(module, batch).responses, samples.responses)  # seeded: the same tokens again


def test_after_a_sync_the_server_samples_from_the_updated_policy_and_only_then(module):
    batch = first_batch()
    before = seeded_sample(module, batch)
    perturb_adapters(module.policy)
    assert torch.equal(seeded_sample(module, batch).responses, before.responses)  # no update announced: old weights
    module.sampler.context.version = 1
    module.rollout_engine.after_update(module.sampler.context)
    after = seeded_sample(module, batch)
    assert not torch.equal(after.responses, before.responses)
    assert max_logprob_diff(module, after) < TOLERANCE  # the updated policy's logprobs
    stats = module.rollout_engine.stats()
    assert stats["rollout/weight_sync_s"] > 0 and stats["rollout/weight_sync_mib"] > 0
    assert module.rollout_engine.version == 1


def test_a_server_another_run_synced_serves_this_run_s_weights_from_the_first_draw(server):
    """The first sync sends every weight, not only the trained ones: a server keeps what an earlier run loaded
    (here a fully fine-tuned run whose embeddings moved), and a LoRA run sends only its adapted layers after that."""
    other = make_rloo(rollout_engine=VLLMServerEngine(urls=[server["url"]]), response_length=24,
                      model={"name_or_path": TINY_PYTHIA, "lora": None})
    other.configure_model()
    with torch.no_grad():
        other.policy.get_input_embeddings().weight.mul_(1.5)
    seeded_sample(other, first_batch())  # the server now holds the other run's embeddings
    fresh = make_rloo(rollout_engine=VLLMServerEngine(urls=[server["url"]]), response_length=24)
    fresh.configure_model()
    assert max_logprob_diff(fresh, seeded_sample(fresh, first_batch())) < TOLERANCE


def test_async_drawing_samples_with_the_producer_s_copy(server, tmp_path):
    args = ["rollout=vllm_server", f"rollout.urls=[{server['url']}]", *[a for a in FAST if not a.startswith("steps=")],
            "steps=3", "algo.max_staleness=1", f"hydra.run.dir={tmp_path}"]
    result = run_app("train.py", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [r for r in csv.DictReader((tmp_path / "csv" / "metrics.csv").open()) if r.get("async/staleness")]
    assert [float(r["async/staleness"]) for r in rows] == [0.0, 1.0, 1.0]
    assert float(rows[0]["rollout/logprob_diff_max"]) < 1e-4  # version 0 on the server and in the trainer


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_train_py_trains_with_the_server(server, tmp_path, lora):
    trains_three_steps_synced_every_step(server, tmp_path, [] if lora else ["model.lora=null"])


def trains_three_steps_synced_every_step(server, tmp_path, settings: list[str]) -> None:
    args = ["rollout=vllm_server", f"rollout.urls=[{server['url']}]", *[a for a in FAST if not a.startswith("steps=")],
            "steps=3", *settings]
    result = run_app("train.py", *args, f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [r for r in csv.DictReader((tmp_path / "csv" / "metrics.csv").open()) if r.get("rollout/logprob_diff_max")]
    assert len(rows) == 3 and max(float(r["rollout/logprob_diff_max"]) for r in rows) < 1e-3  # synced every step


def test_ddp_ranks_sample_from_the_servers_that_rank_zero_syncs(server, tmp_path):
    two_ranks_sample_from_servers_that_rank_zero_alone_syncs(server, tmp_path, "ddp", "merged")


def test_a_server_that_goes_away_stops_the_run_in_one_line_and_it_resumes_once_the_server_is_back(tmp_path):
    port, log = free_port(), tmp_path / "server.log"
    url = f"http://127.0.0.1:{port}"
    args = ["rollout=vllm_server", f"rollout.urls=[{url}]", "rollout.retries=0", "rollout.timeout_s=10",
            *[a for a in FAST if not a.startswith("steps=")]]
    process = serve_policy(log, port)
    engine = VLLMServerEngine(urls=[url], retries=0, timeout_s=10)
    module = make_rloo(rollout_engine=engine, response_length=8)
    module.configure_model()
    seeded_sample(module, first_batch())
    first = run_app("train.py", *args, "steps=2", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoint = tmp_path / "run" / "checkpoints" / "last.ckpt"
    saved = checkpoint.read_bytes()
    stop(process)  # the server goes away: a draw and a resumed run stop in one line naming it
    with pytest.raises(UnavailableError, match=f"the rollout server {url}"):
        seeded_sample(module, first_batch())
    down = run_app("train.py", *args, "steps=4", f"ckpt_path={checkpoint}", f"hydra.run.dir={tmp_path / 'down'}",
                   cwd=tmp_path)
    assert down.returncode != 0 and f"the rollout server {url}" in down.stderr
    assert "Traceback" not in down.stderr and checkpoint.read_bytes() == saved  # the checkpoint is untouched
    process = serve_policy(log, port)  # back, at the same address
    try:
        resumed = run_app("train.py", *args, "steps=4", f"ckpt_path={checkpoint}",
                          f"hydra.run.dir={tmp_path / 'resumed'}", cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        steps = [r for r in csv.DictReader((tmp_path / "resumed" / "csv" / "metrics.csv").open())
                 if r.get("rollout/logprob_diff_max")]
        assert len(steps) == 2 and max(float(r["rollout/logprob_diff_max"]) for r in steps) < 1e-3
    finally:
        stop(process)
