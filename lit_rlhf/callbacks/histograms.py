"""Histograms: distributions of each RL step, for the loggers that draw them.

Names follow TRL's PPO logging page: env/reward_dist, objective/kl_dist, objective/logprobs,
objective/ref_logprobs, policy/advantages, policy/ratio, tokens/responses_len_dist. TensorBoard gets
add_histogram, W&B gets wandb.Histogram; CSV keeps the scalars only.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from lit_rlhf.callbacks.settings import check_count


class Histograms(L.Callback):
    def __init__(self, every_n_steps: int = 10):
        check_count("histograms.every_n_steps", every_n_steps, 1)
        self.every_n_steps = every_n_steps

    def on_train_batch_end(self, trainer: L.Trainer, module, *args) -> None:
        step = module.rl_step  # counted after the step
        if not trainer.is_global_zero or (step - 1) % self.every_n_steps:
            return
        # float64: numpy cannot split a float32 range of a few ulps (e.g. ratios all within 1e-7 of 1) into bins
        values = {k: v.detach().double().cpu() for k, v in module.last_distributions.items()
                  if v is not None and v.numel()}
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                for name, tensor in values.items():
                    logger.experiment.add_histogram(name, tensor, global_step=step)
            elif isinstance(logger, WandbLogger):
                import wandb

                logger.experiment.log({name: wandb.Histogram(t.numpy()) for name, t in values.items()}
                                      | {"trainer/global_step": trainer.global_step})
