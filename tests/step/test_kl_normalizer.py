import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_rlhf.errors import ConfigError
from lit_rlhf.step import KLController, RewardNormalizer, ScoreContext, adaptive_kl_update
from lit_rlhf.step.kl_controller import KLPenalty
from tests.algos.test_rloo import fake_rollout
from tests.conftest import make_datamodule, make_rloo
from tests.helpers import advantages_of


def test_adaptive_update_is_the_ziegler_formula():
    # e = clip(12 / 6 - 1, -0.2, 0.2) = 0.2 ; 0.1 * (1 + 0.2 * 32 / 10000)
    assert adaptive_kl_update(0.1, 12.0, 32, 6.0, 10000) == pytest.approx(0.1 * (1 + 0.2 * 32 / 10000))
    # e = 4.5 / 6 - 1 = -0.25 -> clipped to -0.2
    assert adaptive_kl_update(0.1, 4.5, 64, 6.0, 100) == pytest.approx(0.1 * (1 - 0.2 * 64 / 100))
    # e = 6.6 / 6 - 1 = 0.1, inside the clip
    assert adaptive_kl_update(0.2, 6.6, 10, 6.0, 50) == pytest.approx(0.2 * (1 + 0.1 * 10 / 50))
    with pytest.raises(ConfigError, match="kind='pid'"):
        KLController(kind="pid")


class RecordKL(L.Callback):
    """After each step: what the step used and logged, and what the module's controller set."""

    def __init__(self):
        self.rows = []

    def on_train_batch_end(self, trainer, module, *args):
        self.rows.append((module.last_stats["objective/kl_coef"], module.last_stats["objective/kl"], module.kl_coef))


def fit(module, steps, callbacks, dm=None, **kwargs):
    trainer = L.Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, accelerator="cpu", callbacks=callbacks,
                        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks))
    trainer.fit(module, dm or make_datamodule(), **kwargs)
    return trainer


@pytest.mark.integration
def test_adaptive_controller_follows_the_formula_during_training():
    L.seed_everything(0)
    controller, record = KLController(kind="adaptive", init_kl_coef=0.2, target=0.05, horizon=100), RecordKL()
    module = make_rloo(kl_coef=0.05, kl_controller=controller)
    penalties = []  # the per-token KL of a step is computed once: advantages, histograms and the controller share it
    penalty = controller.penalty
    controller.penalty = lambda rollout: penalties.append(penalty(rollout)) or penalties[-1]
    fit(module, 4, [record])
    assert len(penalties) == 4
    coef = 0.2
    for used, kl, after in record.rows:
        assert used == pytest.approx(coef)  # the step used the current coefficient and logged it
        coef = adaptive_kl_update(coef, kl, 16, 0.05, 100)  # 4 prompts x 4 samples per step
        assert after == pytest.approx(coef)
    assert coef != pytest.approx(0.2)


def test_steer_moves_an_adaptive_coefficient_on_the_mean_sequence_kl_over_ranks_and_a_fixed_one_reads_nothing():
    kl = torch.tensor([[0.5, 0.25, 0.0], [1.0, 0.0, 0.0]])  # N=2, R=3: sequence KLs 0.75 and 1.0, mean 0.875
    step = KLPenalty(kl, -0.1 * kl)
    reads = []

    def rank_mean(value):  # one rank's value; what the ranks' mean would be read as
        reads.append(value)
        return float(value) + 0.125  # another rank's KL pulls the mean: the controller must use what this returns

    adaptive = KLController(kind="adaptive", init_kl_coef=0.1, target=0.5, horizon=100)
    adaptive.start(0.1)
    adaptive.steer(step, 8, rank_mean)
    assert float(reads[0]) == pytest.approx(0.875)
    assert adaptive.kl_coef == pytest.approx(adaptive_kl_update(0.1, 1.0, 8, 0.5, 100))
    fixed = KLController()
    fixed.start(0.1)
    fixed.steer(step, 8, rank_mean)
    adaptive.steer(KLPenalty(None, torch.zeros(2, 3)), 8, rank_mean)  # no reference forward: nothing to steer on
    assert len(reads) == 1 and fixed.kl_coef == 0.1


def test_running_moments_match_the_statistics_of_all_scores_seen():
    torch.manual_seed(0)
    normalizer = RewardNormalizer()
    batches = [torch.randn(8) * 3 + 2, torch.randn(5) - 1, torch.randn(16) * 0.5]
    for batch in batches:
        normalizer.update(batch)
    everything = torch.cat(batches).double()
    assert normalizer.count == 29
    assert normalizer.mean == pytest.approx(everything.mean().item())
    assert normalizer.std == pytest.approx(everything.std().item())


def one_rank(reward=None) -> ScoreContext:
    """A transform's context in a one-process run: the reward, and gathering returns this rank's values."""
    return ScoreContext(score=reward, gather=lambda values: values)


def test_normalized_scores_scale_rloo_advantages_by_one_over_the_running_std():
    """LOO advantages are invariant to a shift and linear in a scale: A(norm) = A(raw) / std."""
    torch.manual_seed(0)
    normalizer = RewardNormalizer()
    normalizer.update(torch.randn(64) * 4 + 10)  # history
    raw = torch.randn(8) * 2 + 5
    scores = normalizer.transform_scores(raw, [""] * 8, [""] * 8, one_rank())
    std = normalizer.std  # includes this batch, as the normalization did
    mask, lp = torch.ones(8, 3, dtype=torch.bool), torch.zeros(8, 3)
    module = make_rloo(kl_coef=0.1)
    raw_adv, _ = advantages_of(module, fake_rollout(raw, lp, lp, mask, k=4))
    norm_adv, _ = advantages_of(module, fake_rollout(scores, lp, lp, mask, k=4))
    torch.testing.assert_close(norm_adv, raw_adv / (std + 1e-8))
    assert not torch.allclose(norm_adv, raw_adv)


def test_whitening_clipping_and_query_reward_subtraction():
    def length(prompts, completions):
        return torch.tensor([float(len(p + c)) for p, c in zip(prompts, completions, strict=True)])

    fake = one_rank(reward=length)
    prompts, completions = ["ab", "abcd", "a", "abc"], ["x", "xx", "xxx", "xxxx"]
    raw = length(prompts, completions)
    only_completion = RewardNormalizer(normalize=False, subtract_query_reward=True)
    assert only_completion.transform_scores(raw, prompts, completions, fake).tolist() == [1.0, 2.0, 3.0, 4.0]
    whitened = RewardNormalizer(normalize=False, whiten_batch=True).transform_scores(raw, prompts, completions, fake)
    assert whitened.mean().item() == pytest.approx(0, abs=1e-6) and whitened.std().item() == pytest.approx(1, abs=1e-5)
    clipped = RewardNormalizer(normalize=False, reward_clip_range=5.0).transform_scores(raw, prompts, completions, fake)
    assert clipped.max().item() == 5.0


def test_the_running_moments_take_every_rank_s_scores_from_the_context():
    other_ranks = torch.tensor([10.0, 20.0])
    everywhere = ScoreContext(score=None, gather=lambda values: torch.cat([values, other_ranks]))
    normalizer = RewardNormalizer()
    normalizer.transform_scores(torch.tensor([1.0, 3.0]), ["", ""], ["", ""], everywhere)
    assert normalizer.count == 4 and normalizer.mean == pytest.approx(8.5)


def test_a_transform_written_for_the_module_still_runs_with_a_deprecation_warning():
    from lit_rlhf.step.score_transforms import apply_score_transform

    class Doubling:  # the earlier signature
        def transform_scores(self, module, scores, prompts, completions):
            return scores * module.factor

    module = type("Module", (), {"factor": 2.0})()
    with pytest.warns(UserWarning, match="transform_scores\\(module, scores, prompts, completions\\) is deprecated"):
        out = apply_score_transform(Doubling(), torch.tensor([1.0, 2.0]), ["", ""], ["", ""], one_rank(), module)
    assert out.tolist() == [2.0, 4.0]


@pytest.mark.integration
def test_checkpoint_carries_kl_coefficient_and_normalizer_state_into_the_resumed_run(tmp_path):
    L.seed_everything(0)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1, filename="{step}")
    controller, normalizer = KLController(kind="adaptive", target=0.01, horizon=50), RewardNormalizer()
    module = make_rloo(kl_controller=controller, score_transforms=[normalizer])
    fit(module, 4, [checkpoint])
    mid = torch.load(tmp_path / "step=2.ckpt", weights_only=True)["rlhf_state"]  # the module's state, once
    states = {"KLController": mid["kl_controller"], "RewardNormalizer": mid["score_transforms"][0]}
    assert states["KLController"]["kl_coef"] != pytest.approx(0.05)
    assert states["RewardNormalizer"]["count"] == 2 * 16
    assert "kl_coef" not in mid and not any("KLController" in key for key in torch.load(
        tmp_path / "step=2.ckpt", weights_only=True)["callbacks"])  # the coefficient is saved in one place

    class Seen(L.Callback):
        def on_train_start(self, trainer, module):
            self.kl_coef, self.count = module.kl_coef, resumed_normalizer.count

    L.seed_everything(0)
    resumed_controller = KLController(kind="adaptive", target=0.01, horizon=50)
    resumed_normalizer, seen = RewardNormalizer(), Seen()
    resumed = make_rloo(kl_controller=resumed_controller, score_transforms=[resumed_normalizer])
    fit(resumed, 3, [seen], ckpt_path=str(tmp_path / "step=2.ckpt"))
    assert seen.kl_coef == pytest.approx(states["KLController"]["kl_coef"])
    assert seen.count == 2 * 16 and resumed_normalizer.count == 3 * 16


@pytest.mark.parametrize("settings, line", [
    ({"normalize": "false"}, "score_transforms.reward_normalizer.normalize='false' must be true or false."),
    ({"whiten_batch": 1}, "score_transforms.reward_normalizer.whiten_batch=1 must be true or false."),
    ({"reward_clip_range": -1.0}, "score_transforms.reward_normalizer.reward_clip_range=-1.0 must be a finite number "
                                  "> 0 (or null)."),
    ({"epsilon": 0}, "score_transforms.reward_normalizer.epsilon=0 must be a finite number > 0."),
])
def test_a_normalizer_setting_out_of_range_is_one_line(settings, line):
    """reward_clip_range=-1 clamped every score to -1: a constant that teaches nothing, without a word."""
    with pytest.raises(ConfigError) as err:
        RewardNormalizer(**settings)
    assert str(err.value) == line


@pytest.mark.parametrize("settings, line", [
    # a negative starting coefficient rewarded KL, without a word
    ({"init_kl_coef": -1}, "algo.kl_controller.init_kl_coef=-1 must be a finite number >= 0, or null (the coefficient "
                           "starts at algo.kl_coef)."),
    ({"init_kl_coef": "abc"}, "algo.kl_controller.init_kl_coef='abc' must be a finite number >= 0, or null (the "
                              "coefficient starts at algo.kl_coef)."),  # a traceback at the first RL step
    ({"target": "abc"}, "algo.kl_controller.target='abc' must be a finite number."),  # a TypeError traceback
    ({"horizon": 0}, "algo.kl_controller.horizon=0 must be > 0."),
    ({"kind": "adaptve"}, "algo.kl_controller.kind='adaptve' is not one of fixed, adaptive (did you mean "
                          "'adaptive'?)."),
])
def test_a_kl_controller_setting_out_of_range_is_one_line(settings, line):
    KLController(kind="adaptive", init_kl_coef=0.0)  # a zero start is a coefficient
    with pytest.raises(ConfigError) as err:
        KLController(**settings)
    assert str(err.value) == line
