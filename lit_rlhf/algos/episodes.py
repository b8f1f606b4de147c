"""The module's side of multi-turn episodes (lit_rlhf/rollout/trajectory.py samples them): the trajectory's
length, the advantage estimate on model tokens, and the checks an environment needs before training. Mixed into
RLHFModule.

Shapes: N sequences, R trajectory length.
"""

from __future__ import annotations

from dataclasses import replace

from lit_rlhf.algos.rollout import Rollout
from lit_rlhf.estimators import ESTIMATORS, Estimate, EstimatorInputs
from lit_rlhf.ops import gather_tokens, model_tokens_first, scatter_tokens


class EpisodeSupport:
    @property
    def trajectory_length(self) -> int:
        """R: the tokens after the prompt a rollout holds: env.max_tokens, or algo.response_length single-turn."""
        return self.sampler.context.trajectory_length

    def estimate(self, rollout: Rollout, non_score_reward) -> Estimate:
        """The advantages of the algorithm's estimator (ESTIMATORS[self.estimator]) with its settings.

        On a trajectory the estimator sees the model's tokens side by side (observation tokens taken out), so
        reward-to-go and GAE chain across tool turns with gamma and lambda as if the turns were one response, the
        values and advantages living on model tokens only (as verl's multi-turn PPO); results go back in place."""
        order = None if rollout.context_mask is None else model_tokens_first(rollout.response_mask)  # N,R
        per_token = [non_score_reward, rollout.response_mask, rollout.values]
        if order is not None:
            per_token = [None if t is None else gather_tokens(t, order) for t in per_token]
        inputs = EstimatorInputs(rollout.scores, per_token[0], per_token[1], rollout.prompt_index, per_token[2],
                                 self.all_reduce_sum)
        estimate = ESTIMATORS[self.estimator](inputs, self.hparams)
        if order is None:
            return estimate
        return replace(estimate, advantages=scatter_tokens(estimate.advantages, order),
                       returns=None if estimate.returns is None else scatter_tokens(estimate.returns, order))
