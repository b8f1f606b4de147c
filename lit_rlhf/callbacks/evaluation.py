"""PolicyEvaluation: at the end of fit, the trained policy against its reference on the held-out prompts.

The same numbers as `python evaluate.py ckpt_path=...` (lit_rlhf.evaluation), written to
<run dir>/evaluation/ and logged as eval/score_diff, eval/win_rate, ... to the run's loggers.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

from lit_rlhf.callbacks.interrupt import stopped_by_interrupt
from lit_rlhf.callbacks.run_folder import run_folder
from lit_rlhf.callbacks.settings import check_count, check_fraction
from lit_rlhf.config.validation import check_bootstraps
from lit_rlhf.errors import ConfigError
from lit_rlhf.evaluation import Evaluation, PairwiseJudge, compare_with_reference, print_report, write_report


class PolicyEvaluation(L.Callback):
    def __init__(self, samples_per_prompt: int = 4, seed: int = 0, judge: PairwiseJudge | None = None,
                 confidence: float = 0.95, num_bootstraps: int = 1000, dirpath: str | None = None):
        check_count("evaluation.samples_per_prompt", samples_per_prompt, 1)
        check_count("evaluation.num_bootstraps", num_bootstraps, 1)
        check_fraction("evaluation.confidence", confidence, "0.95")
        check_bootstraps("callbacks.evaluation.num_bootstraps", num_bootstraps, confidence)
        if judge is not None and not callable(judge):  # judge=nope failed only at the end of fit
            raise ConfigError(f"callbacks.evaluation.judge={judge!r} is not a judge; give its class and settings "
                              f"(callbacks.evaluation.judge._target_=<a PairwiseJudge class>), or null for the "
                              f"RewardJudge.")
        self.samples_per_prompt, self.seed, self.judge = samples_per_prompt, seed, judge
        self.confidence, self.num_bootstraps, self.dirpath = confidence, num_bootstraps, dirpath
        self.evaluation: Evaluation | None = None

    def on_fit_end(self, trainer: L.Trainer, module) -> None:
        datamodule = getattr(trainer, "datamodule", None)
        if stopped_by_interrupt(trainer) is not None:  # the user asked to stop: minutes of evaluation would not be
            return
        # ZeRO-3 generation needs every rank stepping together; otherwise rank zero evaluates alone
        if datamodule is None or not (trainer.is_global_zero or module.rollout_engine.lockstep):
            return
        if next(iter(datamodule.val_dataloader()), None) is None:  # every rank sees the same held-out set
            rank_zero_info("No held-out prompts (data.num_eval_prompts=0): no end-of-run evaluation.")
            return
        self.evaluation = compare_with_reference(
            module, datamodule.val_dataloader(), self.samples_per_prompt, self.seed, self.judge,
            self.confidence, self.num_bootstraps)
        if not trainer.is_global_zero:
            return
        out = write_report(self.evaluation, run_folder(trainer, self.dirpath) / "evaluation")
        print_report(self.evaluation)
        rank_zero_info(f"Evaluation: {out}/evaluation.json, generations.jsonl, scores.png")
        for logger in trainer.loggers:
            logger.log_metrics(self.evaluation.flat_metrics(), step=trainer.global_step)
            logger.save()
