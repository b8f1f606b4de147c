"""The declared interface between module and callbacks: both algorithms satisfy RLHFModuleView, and a
callback a user writes against it works."""

import lightning as L
import pytest

from lit_rlhf.callbacks import RLHFModuleView
from lit_rlhf.callbacks.heldout import heldout_batch
from tests.conftest import make_datamodule, make_ppo, make_rloo

pytestmark = pytest.mark.integration  # runs a Trainer or an app


class BestHeldoutScore(L.Callback):
    """A user's callback: after every step, the held-out score of greedy completions; keeps the best."""

    def __init__(self):
        self.scores, self.best = [], None

    def on_train_batch_end(self, trainer, module: RLHFModuleView, *args):
        assert isinstance(module, RLHFModuleView)
        out = module.sample_heldout(heldout_batch(trainer, module, 4), seed=0, greedy=True)
        self.scores.append((module.rl_step, module.episode, out["mean_score"], module.kl_coef,
                            module.last_stats["objective/scores"]))
        self.best = max(self.best or out["mean_score"], out["mean_score"])


def test_both_algorithms_satisfy_the_view_and_a_user_callback_runs_against_it():
    for make in (make_rloo, make_ppo):
        module = make(response_length=8)
        assert isinstance(module, RLHFModuleView)
        callback = BestHeldoutScore()
        trainer = L.Trainer(max_steps=2 * module.optimizer_steps_per_rl_step, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            limit_val_batches=0, accelerator="cpu", callbacks=[callback])
        trainer.fit(module, make_datamodule())
        assert [s[0] for s in callback.scores] == [1, 2] and callback.scores[-1][1] == 2 * 16
        assert callback.best is not None and all(s[3] == module.kl_coef for s in callback.scores)
