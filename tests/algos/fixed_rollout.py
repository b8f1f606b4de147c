"""Modules whose rollout is a fixed, seeded batch (random prompts and responses of mixed lengths, fixed scores),
so that two runs see the same rollout however it is split over micro-batches, minibatches or ranks: the
update's gradient can then be compared exactly. Each rank takes its prompts' K siblings."""

from __future__ import annotations

import torch

from lit_rlhf import GRPOModule, PPOModule, ReinforcePPModule, RLOOModule
from lit_rlhf.models.forwards import batched_logprobs
from lit_rlhf.ops import importance_weights
from lit_rlhf.rollout.engine import Samples
from lit_rlhf.step.rollout import Rollout

PROMPTS, K, P, R = 4, 4, 5, 8


def fixed_rollout(module, equal_first_group: bool = False, drop_first_group: bool = False,
                  equal_value: float = 0.5, sampler_noise: float = 0.0, empty_truncated: bool = False) -> Rollout:
    """This rank's share of a global rollout of PROMPTS x K sequences; old logprobs are the policy's own; the scores are
    the sum of two named rewards', the second None (NaN) on every fifth sequence.
    equal_first_group: prompt 0's K scores are all equal_value; drop_first_group: prompt 0's sequences are left
    out; empty_truncated: the responses of R tokens (none ends with the stop token) have no tokens, their scores
    kept."""
    gen = torch.Generator().manual_seed(1234)
    n = PROMPTS * K
    vocab = module.policy.config.vocab_size
    queries = torch.randint(3, vocab, (n, P), generator=gen)
    query_mask = torch.ones(n, P, dtype=torch.long)
    query_mask[::3, :2] = 0  # some left padding
    responses = torch.randint(3, vocab, (n, R), generator=gen)
    lengths = torch.randint(1, R + 1, (n,), generator=gen)  # mixed response lengths
    response_mask = torch.arange(R).unsqueeze(0) < lengths.unsqueeze(1)
    if empty_truncated:
        response_mask[lengths == R] = False
    scores = torch.randn(n, generator=gen)
    ref_noise = 0.1 * torch.randn(n, R, generator=gen)
    values = torch.randn(n, R, generator=gen)
    prompt_index = torch.arange(PROMPTS).repeat_interleave(K)
    if equal_first_group:
        scores[:K] = equal_value
    second = torch.randn(n, generator=torch.Generator().manual_seed(4321))  # drawn apart: the draws above stay
    second[::5] = float("nan")
    components = {"first": scores - second.nan_to_num(0.0), "second": second}
    world, rank = (module.trainer.world_size, module.trainer.global_rank)
    mine = torch.arange(n)[(prompt_index % world == rank) & ((prompt_index > 0) | (not drop_first_group))]
    prompt_index = prompt_index[mine] // world
    prompt_index = prompt_index - prompt_index.min()
    device = module.device
    queries, query_mask, responses = queries[mine].to(device), query_mask[mine].to(device), responses[mine].to(device)
    response_mask = response_mask[mine].to(device)
    scores, lengths, ref_noise, values = scores.to(device), lengths.to(device), ref_noise.to(device), values.to(device)
    prompt_index = prompt_index.to(device)
    module.policy.eval()
    logprobs = batched_logprobs(module.policy, queries, query_mask, responses, response_mask,
                                module.hparams.temperature)
    module.policy.train()
    sampler_logprobs = is_weights = None  # an engine whose logprobs differ from the trainer's by sampler_noise
    if sampler_noise:
        sampler_logprobs = logprobs + sampler_noise * torch.randn(n, R, generator=gen)[mine].to(device)
        hp = module.hparams
        is_weights = importance_weights(logprobs, sampler_logprobs, response_mask, hp.rollout_is_cap,
                                        hp.rollout_is_mode, hp.rollout_is_min)
    # the algorithm's own shaping, as the step applies it when it builds a training rollout (GRPO's zero-std filter)
    samples = Samples(queries, query_mask, responses, response_mask, prompt_index, sampler_logprobs)
    trained_scores, in_loss = module.training_scores(scores[mine], samples)
    return Rollout(sampler_logprobs=sampler_logprobs, is_weights=is_weights, queries=queries, query_mask=query_mask,
                   responses=responses, response_mask=response_mask,
                   prompt_index=prompt_index, logprobs=logprobs, ref_logprobs=logprobs + ref_noise[mine],
                   scores=trained_scores, raw_scores=scores[mine], contains_stop=lengths[mine] < R, in_loss=in_loss,
                   loss_masked=lengths[mine] == R if module.masks_truncated_completions else None,
                   reward_components={name: part[mine].to(device) for name, part in components.items()},
                   values=values[mine] if isinstance(module, PPOModule) else None)


class FixedRollout:
    rollout_options: dict = {}

    def rollout(self, batch, *args, **kwargs):
        if kwargs.get("for_training", True) is False or args:
            return super().rollout(batch, *args, **kwargs)
        return fixed_rollout(self, **self.rollout_options)


class FixedGRPO(FixedRollout, GRPOModule):
    pass


class FixedRLOO(FixedRollout, RLOOModule):
    pass


class FixedPPO(FixedRollout, PPOModule):
    pass


class FixedReinforcePP(FixedRollout, ReinforcePPModule):
    pass


ALGORITHMS = {"grpo": FixedGRPO, "rloo": FixedRLOO, "ppo": FixedPPO, "reinforce_pp": FixedReinforcePP}
K_SETTING = {"grpo": "num_generations", "rloo": "rloo_k", "ppo": "samples_per_prompt",
             "reinforce_pp": "samples_per_prompt"}


def assert_same(a: dict, b: dict, atol: float = 1e-5) -> None:
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=0, msg=name)
    assert any(bool(t.abs().max() > 1e-4) for t in a.values())  # the step did something


def differs(a: dict, b: dict) -> bool:
    return any(not torch.allclose(a[n], b[n], atol=1e-5, rtol=0) for n in a)


def one_step_delta(algo: str, devices: int = 1, rollout_options: dict | None = None, accelerator: str = "cpu",
                   **settings) -> dict[str, torch.Tensor]:
    """The change of every trained tensor after one SGD step (lr 1, no clipping): minus the step's gradient."""
    import functools

    import lightning as L

    from lit_rlhf.assets import TINY_PYTHIA
    from lit_rlhf.rewards import VaderSentiment
    from tests.conftest import LORA, make_datamodule

    L.seed_everything(0)
    settings = {K_SETTING[algo]: K, "response_length": R, "max_grad_norm": None, "reuse_rollout_forward": False,
                **settings}
    module = ALGORITHMS[algo](model={"name_or_path": TINY_PYTHIA, "lora": LORA}, reward=VaderSentiment(),
                              optimizer=functools.partial(torch.optim.SGD, lr=1.0), **settings)
    module.rollout_options = rollout_options or {}
    module.configure_model()
    before = {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}
    trainer = L.Trainer(max_steps=module.optimizer_steps_per_rl_step, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        accelerator=accelerator, devices=devices, strategy="ddp" if devices > 1 else "auto")
    trainer.fit(module, make_datamodule(batch_size=PROMPTS // devices))
    return {n: (p.detach() - before[n].to(p.device)).cpu() for n, p in module.named_parameters() if n in before}
