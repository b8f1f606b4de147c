"""Every algorithm on trajectories: advantages are the single-turn ones of the same model tokens with the
observation tokens taken out (reward-to-go and GAE chain across tool turns), loss denominators count model tokens,
and a few RL steps train with any algorithm, padding-free or by token budget."""

import functools

import lightning as L
import pytest
import torch

from lit_rlhf import GRPOModule, PPOModule, ReinforcePPModule, RLOOModule
from lit_rlhf.envs import EnvSpec
from lit_rlhf.rewards import VaderSentiment
from lit_rlhf.step.rollout import Rollout
from tests.conftest import LORA, TINY_PYTHIA, make_datamodule
from tests.envs.scripted import EchoEnvironment, ScriptedEngine
from tests.helpers import advantages_of

SAMPLES = {RLOOModule: "rloo_k", GRPOModule: "num_generations", PPOModule: "samples_per_prompt",
           ReinforcePPModule: "samples_per_prompt"}


def make(cls, engine=None, max_tokens=12, **settings):
    return cls(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, reward=VaderSentiment(),
               optimizer=functools.partial(torch.optim.AdamW, lr=1e-2), rollout_engine=engine,
               environment=EnvSpec(EchoEnvironment, max_tokens=max_tokens),
               **{"response_length": 8, SAMPLES[cls]: 2, **settings})


def trajectory_rollout(seed: int = 0) -> Rollout:
    """4 trajectories of 2 prompts, R=12: model tokens with observation tokens between them, then padding."""
    g = torch.Generator().manual_seed(seed)
    model = torch.tensor([[1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
                          [1, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    context = torch.tensor([[1] * 7 + [0] * 5, [1] * 12, [1] * 9 + [0] * 3, [1] * 3 + [0] * 9], dtype=torch.bool)
    n, r = model.shape
    noise = torch.randn(n, r, generator=g)
    return Rollout(queries=torch.zeros(n, 2, dtype=torch.long), query_mask=torch.ones(n, 2, dtype=torch.long),
                   responses=torch.zeros(n, r, dtype=torch.long), response_mask=model,
                   prompt_index=torch.tensor([0, 0, 1, 1]), logprobs=noise * model,
                   ref_logprobs=(noise + 0.3 * torch.randn(n, r, generator=g)) * model,
                   scores=torch.randn(n, generator=g), raw_scores=torch.zeros(n),
                   contains_stop=torch.ones(n, dtype=bool),
                   values=torch.randn(n, r, generator=g) * model, context_mask=context)


def without_observations(rollout: Rollout) -> Rollout:
    """The same model tokens as a single-turn rollout: observations taken out, model tokens side by side."""
    fields = {}
    for name in ("logprobs", "ref_logprobs", "values"):
        values = getattr(rollout, name)
        fields[name] = torch.stack([torch.cat([v[m], v.new_zeros(int((~m).sum()))])
                                    for v, m in zip(values, rollout.response_mask, strict=True)])
    lengths = rollout.response_mask.sum(1, keepdim=True)
    mask = torch.arange(rollout.response_mask.shape[1]).unsqueeze(0) < lengths
    return Rollout(**{**rollout.__dict__, **fields, "response_mask": mask, "context_mask": None})


@pytest.mark.parametrize("cls, settings", [
    (RLOOModule, {}), (RLOOModule, {"kl_penalty": "token"}), (GRPOModule, {"kl_coef": 0.1}),
    (ReinforcePPModule, {}), (PPOModule, {"gamma": 0.9, "lam": 0.8}), (PPOModule, {"whiten_rewards": True}),
])
def test_advantages_on_a_trajectory_are_those_of_its_model_tokens_side_by_side(cls, settings):
    module = make(cls, **{"kl_coef": 0.05, **settings})
    rollout = trajectory_rollout()
    reference = without_observations(rollout)
    advantages, stats = advantages_of(module, rollout)
    expected, expected_stats = advantages_of(module, reference)
    torch.testing.assert_close(advantages[rollout.response_mask], expected[reference.response_mask])
    assert (advantages[~rollout.response_mask] == 0).all()
    torch.testing.assert_close(stats["objective/kl"], expected_stats["objective/kl"])
    if cls is PPOModule:
        torch.testing.assert_close(rollout.returns[rollout.response_mask], reference.returns[reference.response_mask])


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo", "bnpo"])
def test_loss_denominators_count_model_tokens_only(loss_type):
    module = make(GRPOModule, loss_type=loss_type, kl_coef=0.0)  # no KL term: the surrogate alone
    rollout = trajectory_rollout()
    mask = rollout.response_mask.float()
    advantages = torch.randn(mask.shape).masked_fill(~rollout.response_mask, 100.0)  # garbage off the model tokens
    idx = torch.arange(len(rollout))
    share = module.loss_share(rollout, idx, micro_batches=1)
    loss, _ = module.policy_loss(rollout.logprobs.clone(), torch.zeros_like(mask), rollout, advantages, idx, share)
    per_token = -advantages * mask  # ratio 1: the clipped surrogate is -A on every token
    expected = {"dapo": per_token.sum() / mask.sum(), "bnpo": per_token.sum() / mask.sum(),
                "grpo": (per_token.sum(1) / mask.sum(1)).mean(),
                "dr_grpo": per_token.sum() / (len(rollout) * 12)}[loss_type]  # 12 = env.max_tokens
    torch.testing.assert_close(loss, expected)


@pytest.mark.integration
@pytest.mark.parametrize("cls, settings", [
    (RLOOModule, {}), (GRPOModule, {"loss_type": "dapo", "padding_free": True, "logits_chunk_size": 8}),
    (PPOModule, {"max_tokens_per_micro_batch": 100}), (ReinforcePPModule, {}),
])
def test_every_algorithm_trains_on_trajectories(cls, settings):
    engine = ScriptedEngine([" <call>echo(good)</call>", " great"])
    module = make(cls, engine, max_tokens=64, response_length=32, **settings)
    L.seed_everything(0)
    trainer = L.Trainer(max_steps=2 * module.optimizer_steps_per_rl_step, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    module.configure_model()
    before = {k: v.clone() for k, v in module.policy.named_parameters() if v.requires_grad}
    trainer.fit(module, make_datamodule())
    stats = module.last_stats
    assert stats["rollout/turns_mean"] == 2.0 and stats["rollout/tool_calls_mean"] == 1.0
    assert stats["rollout/tool_errors"] == 0.0 and 0 < stats["rollout/env_token_frac"] < 1
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    after = dict(module.policy.named_parameters())
    assert any(not torch.equal(before[k], after[k]) for k in before)
