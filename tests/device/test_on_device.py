"""The correctness pass of `python bench/gpu.py`: training under bf16 autocast, the loss contract and exact resume,
on CUDA where there is one (bench/gpu.py runs these there), else on the CPU (every test run)."""

import math

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_rlhf.models.forwards import batched_logprobs
from tests.algos.fixed_rollout import assert_same, one_step_delta
from tests.checkpoints.test_resume import Record, fit, small_prompts  # noqa: F401 (a fixture)
from tests.conftest import make_datamodule, make_rloo

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.integration
def test_a_bf16_autocast_run_trains_with_finite_statistics():
    L.seed_everything(0)
    module, record = make_rloo(), Record()
    module.configure_model()
    before = {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}
    L.Trainer(max_steps=3, precision="bf16-mixed", accelerator=DEVICE, devices=1, logger=False,
              enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
              limit_val_batches=0, callbacks=[record]).fit(module, make_datamodule())
    assert sorted(record.stats) == [1, 2, 3]
    for step, stats in record.stats.items():
        bad = {k: v for k, v in stats.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, f"step {step}: {bad}"
    after = {n: p.detach().cpu() for n, p in module.named_parameters() if n in before}
    assert all(torch.isfinite(t).all() for t in after.values())
    assert any(not torch.equal(after[n], before[n].cpu()) for n in before)  # it trained


def test_bf16_autocast_logprobs_stay_near_float32():
    L.seed_everything(0)
    module = make_rloo()
    module.configure_model()
    module.to(DEVICE).eval()
    gen, vocab = torch.Generator().manual_seed(0), module.policy.config.vocab_size
    queries = torch.randint(3, vocab, (8, 6), generator=gen).to(DEVICE)
    responses = torch.randint(3, vocab, (8, 10), generator=gen).to(DEVICE)
    query_mask, response_mask = torch.ones_like(queries), torch.ones_like(responses, dtype=torch.bool)
    with torch.no_grad():
        exact = batched_logprobs(module.policy, queries, query_mask, responses, response_mask, 1.0)  # N,R
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            autocast = batched_logprobs(module.policy, queries, query_mask, responses, response_mask, 1.0)
    assert (autocast.float() - exact).abs().mean().item() < 0.05  # bf16 keeps ~3 significant digits


@pytest.mark.integration
def test_the_loss_contract_holds_on_the_device():
    whole = one_step_delta("grpo", accelerator=DEVICE, loss_type="dapo")
    assert_same(one_step_delta("grpo", accelerator=DEVICE, loss_type="dapo", gradient_accumulation_steps=4), whole,
                atol=1e-5 if DEVICE == "cpu" else 1e-4)


@pytest.mark.integration
def test_a_resumed_run_matches_the_uninterrupted_run_on_the_device(small_prompts, tmp_path):  # noqa: F811
    full, first, second = Record(), Record(), Record()
    reference = fit("rloo", small_prompts, 4, [full], accelerator=DEVICE)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=-1, filename="{step}")
    fit("rloo", small_prompts, 2, [first, checkpoint], accelerator=DEVICE)
    resumed = fit("rloo", small_prompts, 4, [second], ckpt_path=str(tmp_path / "ckpt" / "step=2.ckpt"),
                  accelerator=DEVICE)
    assert sorted(second.stats) == [3, 4]
    for step in (3, 4):
        assert second.stats[step] == full.stats[step], f"step {step}"
    for (name, a), (_, b) in zip(reference.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


class PolicyDevice(L.Callback):
    """Where the policy's weights are during training (Lightning moves the module back to the CPU after fit)."""

    def on_train_batch_end(self, trainer, module, *args):
        self.types = {p.device.type for p in module.policy.parameters()}


@pytest.mark.integration
@pytest.mark.skipif(DEVICE == "cpu", reason="no CUDA device")
def test_the_run_is_on_the_cuda_device():
    module, seen = make_rloo(), PolicyDevice()
    module.configure_model()
    L.Trainer(max_steps=1, accelerator="cuda", devices=1, logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
              callbacks=[seen]).fit(module, make_datamodule())
    assert seen.types == {"cuda"}


@pytest.mark.integration  # torch.compile starts its compiler's worker processes
@pytest.mark.skipif(DEVICE != "cuda", reason="CUDA graphs need CUDA (the CPU path: tests/rollout)")
def test_the_cuda_graph_decoding_step_samples_what_plain_generate_samples():
    from lit_rlhf.rollout import HFEngine
    from tests.rollout.test_compiled_decoding import prompt_batch, sample

    module = make_rloo(response_length=16, temperature=0.7)
    module.configure_model()
    module.to(DEVICE)
    batch = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in prompt_batch().items()}
    engine = HFEngine(compile_mode="reduce-overhead")
    for seed in (0, 1):  # the second call replays the captured graphs
        compiled, plain = sample(module, engine, batch, seed), sample(module, HFEngine(), batch, seed)
        # float rounding may differ between kernels: a token on a boundary of the inverse CDF can flip a sequence
        assert (compiled == plain).all(1).float().mean() >= 0.9
    assert engine.compile_ready


@pytest.mark.integration  # torch.compile starts its compiler's worker processes
@pytest.mark.skipif(DEVICE != "cuda", reason="CUDA graphs need CUDA (the CPU path: tests/rollout)")
@pytest.mark.parametrize("kind", ["qwen2", "gemma2"])
def test_the_cuda_graph_step_decodes_prompts_longer_than_a_sliding_window_as_plain_generate(kind):
    """The compiled step's starting cache (the shared prefill in a static cache) on a model with sliding-window
    layers of 2 positions, under CUDA graphs: plain generate()'s logits, captured and replayed."""
    import copy

    from transformers import GenerationConfig

    from lit_rlhf.rollout import compiled_decoding as compiled
    from lit_rlhf.rollout.hf import cache_keyword, starting_cache
    from tests.rollout.test_compiled_decoding import sliding_window_model

    model = sliding_window_model(kind).to(DEVICE)
    queries = torch.randint(3, 64, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(queries)
    queries[1, :2], mask[1, :2] = 0, 0
    queries, mask = queries.repeat_interleave(2, 0).to(DEVICE), mask.repeat_interleave(2, 0).to(DEVICE)
    plain_config = GenerationConfig(max_new_tokens=4, do_sample=False, return_dict_in_generate=True,
                                    output_logits=True, pad_token_id=0, eos_token_id=None)
    compiled_config = copy.deepcopy(plain_config)
    compiled_config.compile_config = compiled.compile_config("reduce-overhead")

    def logits(config, **cache):  # N,4,V
        out = model.generate(input_ids=queries, attention_mask=mask, generation_config=config, **cache)
        return torch.stack(out.logits, dim=1).float()

    with torch.no_grad():
        plain = logits(plain_config)
        for _ in range(2):  # the second call replays the captured graphs
            cache = starting_cache(model, queries, mask, siblings=2, static_length=16)
            torch.testing.assert_close(logits(compiled_config, **{cache_keyword(model): cache}), plain,
                                       atol=1e-3, rtol=0)
