"""GRPOModule and ReinforcePPModule through Lightning's Trainer on the embedded default."""

import functools

import lightning as L
import pytest
import torch

from lit_rlhf import GRPOModule, ReinforcePPModule
from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.config import GRPOConfig, build
from lit_rlhf.rewards import VaderSentiment
from tests.algos.fixed_rollout import assert_same, differs, one_step_delta
from tests.conftest import FAST_LEARNING, LORA, assert_learns_positivity, make_datamodule


def make(cls=GRPOModule, **overrides):
    kwargs = dict(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, reward=VaderSentiment(),
                  optimizer=functools.partial(torch.optim.AdamW, lr=1e-3), response_length=16)
    return cls(**{**kwargs, **overrides})


def fit(module, steps=2):
    trainer = L.Trainer(max_steps=steps * module.optimizer_steps_per_rl_step, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    trainer.fit(module, make_datamodule())
    return module


def test_trl_names_beta_and_num_iterations_set_kl_coef_and_num_ppo_epochs():
    config = build(GRPOConfig, {"beta": 0.0, "num_iterations": 3}, "algo")
    assert config.kl_coef == 0.0 and config.num_ppo_epochs == 3


@pytest.mark.integration
def test_beta_zero_skips_the_reference_forward_and_logs_no_kl():
    module = make(beta=0.0)
    calls = []
    original = module.reference_logprobs
    module.reference_logprobs = lambda *a: calls.append(1) or original(*a)
    fit(module)
    assert calls == []
    assert "objective/kl" not in module.last_stats and "loss/kl_avg" not in module.last_stats
    assert module.last_stats["objective/non_score_reward"] == 0


@pytest.mark.integration
def test_grpo_logs_trl_grpo_metric_names():
    stats = fit(make(cliprange_high=0.28, num_iterations=2)).last_stats
    for name in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "frac_reward_zero_std",
                 "rollout/zero_std_frac", "completions/mean_length", "completions/clipped_ratio", "loss/kl_avg",
                 "objective/kl"):
        assert name in stats, name
    assert 0 <= stats["clip_ratio/region_mean"] <= 1 and 1 <= stats["completions/mean_length"] <= 16


@pytest.mark.integration
def test_num_tokens_counts_every_rollout_s_prompt_and_response_tokens_as_trl_does(monkeypatch):
    """TRL's GRPO num_tokens: the running total of the prompts' and the completions' tokens (padding left out), kept in
    the checkpoint's state."""
    module, counted, padded = make(), [], []
    original = module.log_stats

    def log_stats(rollout, stats):
        counted.append(int(rollout.query_mask.sum() + rollout.response_mask.sum()))
        padded.append(rollout.queries.numel() + rollout.responses.numel())
        return original(rollout, stats)

    monkeypatch.setattr(module, "log_stats", log_stats)
    fit(module, steps=2)
    assert len(counted) == 2 and sum(counted) < sum(padded)  # the padding is not counted
    assert module.last_stats["num_tokens"] == module.num_tokens == sum(counted)
    checkpoint = {"state_dict": module.state_dict()}
    module.on_save_checkpoint(checkpoint)
    assert checkpoint["rlhf_state"]["num_tokens"] == sum(counted)


@pytest.mark.integration
def test_the_kl_is_a_loss_term_or_a_reward_penalty():
    assert differs(one_step_delta("grpo", kl_coef=0.5), one_step_delta("grpo", kl_coef=0.0))
    in_reward = fit(make(kl_in="reward", kl_estimator="k1", kl_coef=0.5), steps=2).last_stats
    in_loss = fit(make(kl_coef=0.5), steps=2).last_stats
    assert in_reward["objective/non_score_reward"] != 0 and "loss/kl_avg" not in in_reward
    assert in_loss["objective/non_score_reward"] == 0 and in_loss["loss/kl_avg"] >= 0


@pytest.mark.integration
def test_overlong_penalty_lowers_the_training_scores_of_long_responses():
    module = make(overlong_buffer=16, overlong_penalty_factor=1.0)  # the whole response is the buffer
    fit(module, steps=1)
    assert module.last_stats["rollout/overlong_penalty"] < 0


@pytest.mark.integration
@pytest.mark.parametrize("cls, settings", [(GRPOModule, {}), (ReinforcePPModule, {})])
def test_learns_positivity(cls, settings):
    assert_learns_positivity(make(cls, response_length=24, optimizer=FAST_LEARNING, **settings), rl_steps=15)


def test_rloo_and_grpo_sample_with_the_same_generate_call(monkeypatch):
    """bench/gpu.py's RLOO and GRPO (the same model, sampling settings and samples per prompt) reach generate() with
    the same arguments: the same generation config, logits processors, prompt shapes, cache and policy state. A
    slower RLOO generation measured on a GPU is not a difference in what the two sample with."""
    from transformers import GenerationMixin

    from lit_rlhf import RLOOModule

    calls = []
    original = GenerationMixin.generate

    def recorded(model, *args, **kwargs):
        calls.append({"config": kwargs["generation_config"].to_dict(), "training": model.training,
                      "processors": [type(p).__name__ for p in kwargs.get("logits_processor", [])],
                      **{k: (type(v).__name__, tuple(getattr(v, "shape", ()))) for k, v in kwargs.items()
                         if k not in ("generation_config", "logits_processor")}})
        return original(model, *args, **kwargs)

    monkeypatch.setattr(GenerationMixin, "generate", recorded)
    datamodule = make_datamodule()
    datamodule.setup()
    batch = next(iter(datamodule.train_dataloader()))
    sampling = dict(temperature=0.7, generation_kwargs={"min_new_tokens": 16}, allow_biased_sampling=True)
    for module in (make(RLOOModule, rloo_k=4, kl_coef=0.05, missing_eos_penalty=1.0, **sampling),
                   make(num_generations=4, beta=0.04, loss_type="dapo", **sampling)):
        module.configure_model()
        module.rollout_engine.setup(module.sampler.context)
        module.rollout_engine.sample(module.sampler.context, batch, samples_per_prompt=4)
    rloo, grpo = calls
    assert rloo == grpo
    assert rloo["input_ids"][1][0] == 16 and rloo["processors"] == ["InverseCDFSampler"]


@pytest.mark.integration
def test_delta_bounds_the_second_epochs_update_and_a_delta_no_ratio_reaches_changes_nothing():
    """With one update per rollout every ratio is 1 and delta (> 1) cannot bind; in a second epoch (SGD at lr 1)
    the ratios have moved, and a delta of 1.01 removes some negative-advantage tokens' gradient."""
    unbounded = one_step_delta("grpo", num_ppo_epochs=2, cliprange=10.0)
    assert differs(one_step_delta("grpo", num_ppo_epochs=2, cliprange=10.0, delta=1.01), unbounded)
    assert_same(one_step_delta("grpo", num_ppo_epochs=2, cliprange=10.0, delta=1e6), unbounded)


def test_top_entropy_quantile_leaves_low_entropy_tokens_out_of_the_policy_term_as_trls_formula():
    """TRL's GRPO loss with top_entropy_quantile: the per-token surrogate times the mask of tokens at or above the
    (1 - rho) entropy quantile of the micro-batch's response tokens, plus beta x k3 on every token, each row's token
    mean over all its response tokens; loss and gradient by hand."""
    from lit_rlhf.ops import LossShare
    from lit_rlhf.step.rollout import Rollout

    gen = torch.Generator().manual_seed(0)
    m, r, rho, beta = 4, 6, 0.25, 0.1
    module = GRPOModule(model={"name_or_path": "m"}, reward=None, top_entropy_quantile=rho, kl_coef=beta,
                        loss_type="grpo", use_bias_correction_kl=False)
    module._ratios = []
    mask = torch.arange(r) < torch.tensor([[6], [3], [5], [1]])  # M,R
    old, ref = -torch.rand(m, r, generator=gen) * 3, -torch.rand(m, r, generator=gen) * 3
    new = (old + 0.3 * torch.randn(m, r, generator=gen)).requires_grad_()
    entropy = torch.rand(m, r, generator=gen) * 4
    advantages = torch.randn(m, 1, generator=gen).expand(m, r)
    zeros = torch.zeros(m)
    rollout = Rollout(queries=torch.zeros(m, 2, dtype=torch.long), query_mask=torch.ones(m, 2, dtype=torch.long),
                      responses=torch.zeros(m, r, dtype=torch.long), response_mask=mask, prompt_index=zeros.long(),
                      logprobs=old, ref_logprobs=ref, scores=zeros, raw_scores=zeros, contains_stop=zeros.bool())
    loss, _ = module.policy_loss(new, entropy, rollout, advantages, torch.arange(m),
                                 LossShare(loss_type="grpo", step_sequences=m))
    loss.backward()
    ours = new.grad.clone()

    new.grad = None
    threshold = torch.quantile(entropy[mask], 1 - rho)
    high = (entropy >= threshold) & mask
    assert 0 < high.sum() < mask.sum()
    ratio = torch.exp(new - old)
    surrogate = torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 0.8, 1.2)) * high
    kl = torch.exp(ref - new) - (ref - new) - 1
    per_token = (surrogate + beta * kl) * mask
    expected = (per_token.sum(1) / mask.sum(1)).mean()
    expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(ours, new.grad)
    low = mask & ~high  # only their KL's gradient is left
    torch.testing.assert_close(ours[low], (beta * (1 - torch.exp(ref - new)) / mask.sum(1, keepdim=True))[low] / m)


def test_top_entropy_quantile_with_token_count_micro_batches_is_refused_on_more_than_one_rank(monkeypatch):
    """The quantile is taken over every rank's micro-batch at once: ranks must run as many micro-batches."""
    from types import SimpleNamespace

    from lit_rlhf.errors import ConfigError

    module = GRPOModule(model={"name_or_path": "m"}, reward=None, top_entropy_quantile=0.2,
                        max_tokens_per_micro_batch=256)
    monkeypatch.setattr(GRPOModule, "trainer", property(lambda self: SimpleNamespace(world_size=self.ranks)))
    module.ranks = 1
    module.check_entropy_quantile_ranks()  # one rank: its own micro-batches
    module.ranks = 2
    with pytest.raises(ConfigError, match=r"^algo.top_entropy_quantile=0.2 takes each micro-batch's quantile over all "
                                          r"2 ranks, and algo.max_tokens_per_micro_batch=256 gives ranks different"):
        module.check_entropy_quantile_ranks()


@pytest.mark.parametrize("loss_type, rho", [("dapo", 1.0), ("grpo", 1.0), ("dapo", 0.5)])
def test_the_entropy_bonus_is_trls_mean_entropy_with_its_gradient(loss_type, rho):
    """entropy_coef = c subtracts c x TRL's bonus from the loss: the entropy of softmax(logits / T) at each response
    token (a slow per-token loop here, from the model's own forward), summed over the tokens the loss trains (those
    of the top_entropy_quantile mask when set) and divided by the step's tokens (dapo) or averaged per micro-batch
    (the other loss types). Loss and gradient against the same micro-batch without the bonus."""
    from lit_rlhf.ops import LossShare
    from lit_rlhf.step.rollout import Rollout

    gen = torch.Generator().manual_seed(0)
    module = GRPOModule(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, reward=VaderSentiment(),
                        loss_type=loss_type, top_entropy_quantile=rho, kl_coef=0.0, temperature=0.7)
    module.configure_model()
    module._ratios = []
    m, p, r, vocab = 4, 3, 5, module.policy.config.vocab_size
    queries, responses = torch.randint(3, vocab, (m, p), generator=gen), torch.randint(3, vocab, (m, r), generator=gen)
    mask = torch.arange(r) < torch.tensor([[5], [2], [4], [1]])  # M,R
    with torch.no_grad():
        from lit_rlhf.models.forwards import response_logits

        old = torch.log_softmax(response_logits(module.policy, queries, torch.ones_like(queries), responses, mask)
                                / 0.7, -1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    zeros = torch.zeros(m)
    rollout = Rollout(queries=queries, query_mask=torch.ones_like(queries), responses=responses, response_mask=mask,
                      prompt_index=torch.arange(m) // 2, logprobs=old, ref_logprobs=old, scores=zeros,
                      raw_scores=zeros, contains_stop=zeros.bool())
    advantages = torch.randn(m, 1, generator=gen).expand(m, r)
    share = LossShare(loss_type=loss_type, micro_batches=2, step_tokens=13.0, step_sequences=m)
    trained = [p for p in module.policy.parameters() if p.requires_grad]

    def loss_and_grads(coef):
        module.entropy_control.coef = coef
        loss = module.minibatch_loss(rollout, advantages, torch.arange(m), share)[0]
        return loss.detach(), torch.autograd.grad(loss, trained)

    without, without_grads = loss_and_grads(0.0)
    coef = 0.3
    with_bonus, with_grads = loss_and_grads(coef)

    inputs = torch.cat([queries, responses], 1)
    logits = module.policy(input_ids=inputs, attention_mask=torch.cat([torch.ones_like(queries), mask.long()], 1)
                           ).logits  # M,P+R,V
    entropy = torch.zeros(m, r)
    for i in range(m):
        for t in range(r):
            probs = torch.softmax(logits[i, p - 1 + t] / 0.7, -1)
            entropy[i, t] = -(probs * torch.log(probs)).sum()
    kept = mask
    if rho < 1:
        threshold = torch.quantile(entropy.detach()[mask], 1 - rho)
        kept = mask & (entropy.detach() >= threshold)
        assert 0 < kept.sum() < mask.sum()
    total = (entropy * kept).sum()
    bonus = total / 13.0 if loss_type == "dapo" else total / kept.sum() / 2
    bonus_grads = torch.autograd.grad(bonus, trained)
    torch.testing.assert_close(with_bonus - without, -coef * bonus.detach(), atol=1e-5, rtol=1e-4)
    for got, base, expected in zip(with_grads, without_grads, bonus_grads, strict=True):
        torch.testing.assert_close(got - base, -coef * expected, atol=1e-5, rtol=1e-3)


def test_normalize_then_sum_normalizes_each_named_reward_and_each_score_penalty_with_its_weight():
    """GDPO's estimator sees each named reward of a WeightedSum (its None as NaN) with its weight, and the score terms
    the settings add (missing_eos_penalty, the overlong penalty) as rewards of weight 1, as TRL sees reward functions;
    sum_then_normalize keeps the one total."""
    from lit_rlhf.estimators import ESTIMATORS, EstimatorInputs
    from lit_rlhf.rewards import WeightedSum
    from lit_rlhf.step.rollout import Rollout

    reward = WeightedSum({"correct": VaderSentiment(), "format": VaderSentiment()}, weights={"format": 0.5})
    module = GRPOModule(model={"name_or_path": "m"}, reward=reward, multi_objective_aggregation="normalize_then_sum",
                        missing_eos_penalty=2.0, overlong_buffer=2, response_length=4)
    n, nan = 8, float("nan")
    lengths = torch.tensor([1, 4, 2, 3, 4, 4, 1, 2])
    mask = torch.arange(4) < lengths.unsqueeze(1)  # N,R
    correct = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    format_ = torch.tensor([1.0, nan, 0.0, 1.0, 1.0, 1.0, nan, 0.0])
    stops = torch.tensor([True, False, True, True, False, True, True, True])
    zeros = torch.zeros(n)
    rollout = Rollout(queries=torch.ones(n, 2, dtype=torch.long), query_mask=torch.ones(n, 2, dtype=torch.long),
                      responses=torch.ones(n, 4, dtype=torch.long), response_mask=mask,
                      prompt_index=torch.arange(2).repeat_interleave(4), logprobs=zeros, ref_logprobs=zeros,
                      scores=torch.randn(n), raw_scores=zeros, contains_stop=stops,
                      reward_components={"correct": correct, "format": format_})
    scores, weights = module.reward_scores(rollout)
    overlong = torch.tensor([0.0, -1.0, 0.0, -0.5, -1.0, -1.0, 0.0, 0.0])  # past response_length - 2 = 2 tokens
    torch.testing.assert_close(scores, torch.stack([correct, format_, -2.0 * (~stops).float(), overlong], 1),
                               equal_nan=True)
    assert weights.tolist() == [1.0, 0.5, 1.0, 1.0]
    estimate = module.estimate(rollout, torch.zeros(n, 4))
    expected = ESTIMATORS["group_decoupled"](EstimatorInputs(rollout.scores, torch.zeros(n, 4), mask,
                                                             rollout.prompt_index, reward_scores=scores,
                                                             reward_weights=weights), None)
    torch.testing.assert_close(estimate.advantages, expected.advantages)
    module.hparams.multi_objective_aggregation = "sum_then_normalize"
    assert not torch.allclose(module.estimate(rollout, torch.zeros(n, 4)).advantages, estimate.advantages)


@pytest.mark.parametrize("settings, error", [
    ({"scale_rewards": "batch"}, "algo.scale_rewards=batch has no effect with algo.multi_objective_aggregation="
                                 "normalize_then_sum, which divides each reward by its group's std"),
    ({"kl_in": "reward", "kl_estimator": "k1"}, "algo.kl_in=reward charges the KL in the reward, which algo."
                                                "multi_objective_aggregation=normalize_then_sum leaves out")])
def test_normalize_then_sum_refuses_the_settings_it_would_ignore(settings, error):
    from lit_rlhf.errors import ConfigError

    with pytest.raises(ConfigError, match="^" + error.replace(".", r"\.")):
        build(GRPOConfig, {"multi_objective_aggregation": "normalize_then_sum", **settings}, "algo")
    build(GRPOConfig, {"multi_objective_aggregation": "normalize_then_sum", **settings, "kl_coef": 0,
                       "scale_rewards": "group"}, "algo")  # no KL charged, the group's std: accepted


@pytest.mark.integration
def test_adaptive_entropy_applies_no_bonus_before_its_first_measurement_then_steers_and_resumes(tmp_path):
    """TRL's use_adaptive_entropy: the first optimizer step has no measured entropy, so no bonus (the step equals
    the step without one, which a fixed coefficient's does not); each step then moves the coefficient by delta (up:
    the entropy is below a target of 100 nats) and logs it as entropy_coef; a checkpoint carries the controller's
    state into the resumed run."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    adaptive = {"use_adaptive_entropy": True, "entropy_coef": 0.3, "entropy_target": 100.0}
    no_bonus = one_step_delta("grpo")
    assert_same(one_step_delta("grpo", **adaptive), no_bonus)
    assert differs(one_step_delta("grpo", entropy_coef=0.3), no_bonus)

    def run(steps, callbacks=(), ckpt_path=None):
        L.seed_everything(0)
        module = make(**adaptive, entropy_coef_delta=0.01)
        trainer = L.Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                            limit_val_batches=0, accelerator="cpu", callbacks=list(callbacks),
                            default_root_dir=tmp_path)
        trainer.fit(module, make_datamodule(), ckpt_path=ckpt_path)
        return module

    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    module = run(2, [checkpoint])
    assert module.last_stats["entropy_coef"] == pytest.approx(0.32)
    saved = torch.load(tmp_path / "step=1.ckpt", weights_only=True)["rlhf_state"]["entropy_controller"]
    assert saved["coef"] == pytest.approx(0.31) and 0 < saved["last_entropy"] < 100

    class Seen(L.Callback):
        def on_train_start(self, trainer, module):
            self.state = module.entropy_control.state_dict()

    seen = Seen()
    resumed = run(2, [seen], ckpt_path=str(tmp_path / "step=1.ckpt"))
    assert seen.state == saved and resumed.entropy_control.coef == pytest.approx(0.32)
    assert resumed.entropy_control.last_entropy == pytest.approx(module.entropy_control.last_entropy, abs=1e-4)
