"""An unknown key on the command line: the one line suggests the setting the user most likely meant, whether it is
a near spelling beside it or the same name at another level (`lr` -> algo.optimizer.lr), and stays short."""

from omegaconf import OmegaConf

from lit_rlhf.cli.composition import setting_hint

CONFIG = OmegaConf.create({
    "seed": 0,
    "algo": {"kl_coef": 0.05, "kl_estimator": "k1", "lr_scheduler": None, "rloo_k": 4,
             "optimizer": {"_target_": "torch.optim.AdamW", "lr": 1e-3, "weight_decay": 0.0},
             **{f"setting_{i}": i for i in range(20)}},
    "dpo": {"beta": 0.1, "model": None},
    "data": {"batch_size": 4},
})


def test_a_near_spelling_beside_it_comes_first():
    assert setting_hint("algo.kl_coeff", CONFIG) == " (did you mean 'kl_coef'?)"
    assert setting_hint("algo.num_generations", CONFIG) == " (did you mean 'rloo_k'? this algorithm's name for it)"


def test_the_same_name_at_another_level_is_named_in_full():
    assert setting_hint("lr", CONFIG) == " (did you mean 'algo.optimizer.lr'?)"
    assert setting_hint("algo.lr", CONFIG) == " (did you mean 'algo.optimizer.lr'?)"  # before lr_scheduler
    assert setting_hint("batchsize", CONFIG) == " (did you mean 'data.batch_size'?)"


def test_a_prefix_lists_the_keys_it_begins_and_nothing_close_stays_short():
    assert setting_hint("algo.kl", CONFIG) == " (did you mean 'kl_coef' or 'kl_estimator'?)"
    assert setting_hint("dpo.label_smoothing", CONFIG) == " (valid keys: beta, model)"
    assert setting_hint("algo.xyz", CONFIG) == " (no setting of that name under algo)"
    assert setting_hint("algo.xyz", None) == ""
