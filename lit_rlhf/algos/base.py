"""RLHFModule: the RL step every algorithm shares (RLOO, PPO, GRPO, REINFORCE++, distillation): draw through the
Sampler (lit_rlhf.rollout.sampler), the trainer's forwards (RolloutForwards), the algorithm's advantages, the
manual-optimization update (PolicyUpdate, lit_rlhf.algos.policy_update), and the step's statistics; a subclass defines
its advantages and, where it differs, its loss.

Shapes: B prompts per rank, K samples per prompt, N = B*K sequences, P prompt length,
R response length, V vocab.
"""

from __future__ import annotations

import functools
import inspect
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lit_rlhf.algos.data_checks import check_data_module
from lit_rlhf.algos.default_callbacks import display_callbacks
from lit_rlhf.algos.forwards import RolloutForwards, check_sequence_length
from lit_rlhf.algos.gradient_reach import ChecksGradientReach
from lit_rlhf.algos.heldout import HeldoutSampling, log_heldout_before_training
from lit_rlhf.algos.loading import BuildsModelsToLoadState, LoadsRLCheckpoints
from lit_rlhf.algos.policy_update import PolicyUpdate
from lit_rlhf.algos.run_length import endless_fit_line, finished_fit_line, rl_steps_of_fit
from lit_rlhf.algos.step_stats import StepStatistics, step_distributions
from lit_rlhf.checkpoints.state import TrainedStateCheckpoints
from lit_rlhf.config import ModelConfig, RLHFConfig, build, model_config
from lit_rlhf.config.docs import settings_docstring
from lit_rlhf.config.idle import idle_settings
from lit_rlhf.config.validation import check_optimizer, warn_once
from lit_rlhf.distributed.process_group_exit import destroy_process_group_at_exit
from lit_rlhf.distributed.ranks import sum_over_ranks
from lit_rlhf.envs import EnvSpec, as_env_spec
from lit_rlhf.models import load_model_tokenizer, load_policy
from lit_rlhf.models.router_load import router_load_of
from lit_rlhf.rewards.protocol import Reward, check_reward, load_reward
from lit_rlhf.rollout import HFEngine, RolloutEngine
from lit_rlhf.rollout.context import SamplingSettings
from lit_rlhf.rollout.queue import QueueSettings, RolloutQueue, check_concurrent_draws
from lit_rlhf.rollout.sampler import Sampler, sampler_attribute
from lit_rlhf.rollout.sampling import stop_token_id
from lit_rlhf.step.dropout import has_active_dropout
from lit_rlhf.step.episodes import estimate_advantages
from lit_rlhf.step.kl_controller import KLController, KLPenalty
from lit_rlhf.step.model_sharding import ModelSharding
from lit_rlhf.step.nonfinite import NonfiniteGuard
from lit_rlhf.step.reference_sync import ReferenceSync
from lit_rlhf.step.rollout import Rollout
from lit_rlhf.step.score_transforms import ScoreTransform
from lit_rlhf.tasks.metrics import TaskMetric


class RLHFModule(TrainedStateCheckpoints, LoadsRLCheckpoints, BuildsModelsToLoadState, RolloutForwards, PolicyUpdate,
                 HeldoutSampling, StepStatistics, ChecksGradientReach, L.LightningModule):
    """Holds the policy, its reference and the Sampler (which holds the engine, the reward and a teacher);
    subclasses define the advantages.

    `model` is a spec (name_or_path, dtype, lora, adapter_path, ...): weights load in `configure_model`, so the
    module can be built and configured without them.
    """

    samples_per_prompt: int = 1
    trains_on = "prompts"  # the batches it takes (a data module's `batches`), checked at a fit's start
    # One optimizer step on the whole rollout, no dropout: the update's forward can run in the rollout, its detached
    # logprobs are the old ones (ratio 1), saving a forward; PPO, whose rollout forward computes values, opts out
    supports_single_update: bool = True
    estimator: str = ""  # the advantage estimator, a key of lit_rlhf.estimators.ESTIMATORS

    config_class: type[RLHFConfig] = RLHFConfig

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "config_class" in cls.__dict__:  # help(RLOOModule) lists the settings **settings takes
            cls.__doc__ = f"{inspect.cleandoc(cls.__doc__ or '')}\n\n{settings_docstring(cls.config_class, 'algo')}"

    def __init__(self, model: dict[str, Any] | ModelConfig, reward: Reward, optimizer: Callable | None = None,
                 lr_scheduler: Callable | None = None, rollout_engine: RolloutEngine | None = None,
                 kl_controller: KLController | None = None, score_transforms: Sequence[ScoreTransform] = (),
                 task_metrics: Sequence[TaskMetric] = (), environment: EnvSpec | type | None = None,
                 gold_reward: Reward | None = None, **settings: Any):
        """settings: the fields of `config_class` (RLOOConfig, PPOConfig, ...), whose defaults are the CLI's;
        an unknown one is a one-line error naming the nearest valid key. The module owns its KL controller
        (fixed at kl_coef by default) and its score transforms (applied to training scores, in order); both
        are checkpointed with it. task_metrics (e.g. ExactMatch) are measured on the held-out prompts at every
        validation (eval/<name>) and by the end-of-run evaluation, apart from the reward. environment (an
        EnvSpec or an Environment class) makes rollouts multi-turn episodes (docs/environments.md). gold_reward:
        deprecated, pass callbacks.GoldReward(reward) to the Trainer instead (docs/preferences.md)."""
        super().__init__()
        config = build(self.config_class, settings, "algo")
        # Factories stay out of the hyper-parameters: checkpoints then load with weights_only=True.
        self.save_hyperparameters({"model": asdict(model_config(model)), **asdict(config)})
        self.optimizer_factory = optimizer or functools.partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.0)
        self.lr_scheduler_factory = lr_scheduler
        check_optimizer(self.optimizer_factory)
        self.automatic_optimization = False
        self.strict_loading = False  # checkpoints hold the trained tensors only; see on_save_checkpoint
        # everything that draws: the engine (rollout=hf by default), the reward, the environment of episodes
        self.sampler = Sampler(rollout_engine or HFEngine(), reward, SamplingSettings.of(self.hparams),
                               as_env_spec(environment))
        if gold_reward is not None:
            warnings.warn("RLOOModule(gold_reward=...) (any RLHF module's) is deprecated and will be removed in the "
                          "next release: pass lit_rlhf.callbacks.GoldReward(reward) to the Trainer's callbacks.",
                          FutureWarning, stacklevel=2)
            self.sampler.use_gold(gold_reward)
        check_concurrent_draws(config, self.rollout_engine)
        self.sharding = ModelSharding(self.sampler)  # trainer=fsdp2: which models shard, how the engine samples
        # every training rollout; S >= 1: drawn ahead by a producer thread
        self.rollout_queue = RolloutQueue(self.sampler, QueueSettings.of(self.hparams, self.samples_per_prompt))
        for line in idle_settings(config, self.rollout_engine.reports_logprobs):
            warn_once(line)
        self.kl_controller = kl_controller or KLController()
        self.kl_controller.start(config.kl_coef, config.kl_estimator)
        self.score_transforms = list(score_transforms)
        self.task_metrics = list(task_metrics)
        self.episode = self.num_tokens = 0  # sequences, and their prompt and model tokens, trained on over all ranks
        self.rl_step = 0  # rollouts trained on (training_step calls)
        self.tokenizer = self.policy = self.reference = None
        self.single_update = False  # set in configure_model
        self.last_stats: dict[str, float] = {}
        self.last_distributions: dict[str, torch.Tensor] = {}
        self.last_step_episodes = 0
        self.last_step_prompts: list[str] = []
        self._ratios: list[torch.Tensor] = []
        self._trainable: list[torch.nn.Parameter] | None = None  # set in configure_optimizers
        # {time/<what>: seconds, rewards/<name>/<what>: count} of the RL step's rollouts (cleared once logged)
        self.step_timings: dict[str, float] = {}
        self.packing_pad_id: int | None = None  # algo.padding_free: the pad token of padding-free forwards
        self._fit_start_time = None
        self.last_validated_rl_step = -1
        self.heldout_before_training: dict[str, float] | None = None  # eval/* at step 0, see on_train_start
        self.run_config: dict[str, Any] | None = None  # the app's reward, gold, ... configs (record_run_config)
        self.training_finished = False  # set at the end of training, before the end-of-run reports
        self.nonfinite = NonfiniteGuard()  # skips an optimizer step with a non-finite loss or gradient
        self.reference_sync = ReferenceSync.of(config, self.hparams.model)  # algo.sync_ref_model: a moving reference

    # what draws is the Sampler's
    rollout_engine = sampler_attribute("engine", "How responses are sampled (RolloutEngine).")
    reward = sampler_attribute("reward", "What training maximizes.")
    environment = sampler_attribute("environment", "The environment of multi-turn episodes (EnvSpec; None: one turn).")

    @property
    def optimizer_steps_per_rl_step(self) -> int:
        """Lightning's global_step counts optimizer steps: num_ppo_epochs x num_mini_batches per RL step."""
        return self.hparams.num_ppo_epochs * self.hparams.num_mini_batches

    def total_rl_steps(self) -> int | None:
        """The RL steps this fit runs: the fewest that rl_steps, the Trainer's max_steps (optimizer steps) and its batch
        limits allow (None: no limit)."""
        return rl_steps_of_fit(self.hparams.rl_steps, self._trainer, self.optimizer_steps_per_rl_step)

    # ---- weights ---------------------------------------------------------------------------
    def configure_model(self) -> None:
        if self.policy is not None:
            return
        self.load_models()
        # trainer=fsdp2: rollouts run on gathered weights, updates on shards, so no update reuses a rollout's forward
        if self.sharding.shard_models(self.own_models(), self.device_mesh, self.hparams.max_tokens_per_micro_batch):
            self.single_update = False
        self.sampler.attach(self.policy, self.reference, self.tokenizer, self.stop_token_id, self.device,
                            self.global_rank, self.local_rank)
        self.rollout_engine.setup(self.sampler.context)

    def load_models(self) -> None:
        """The tokenizer, policy, reference (and, in subclasses, critic) from the model spec."""
        spec = dict(self.hparams.model)
        self.tokenizer = load_model_tokenizer(spec)
        spec.pop("tokenizer_name_or_path", None)  # the policy's loader takes the rest
        self.policy, self.reference = self.reference_sync.own_reference(
            *load_policy(tokenizer=self.tokenizer, empty=self.sharding.loads_sharded, **spec))
        # trainer=fsdp2: the reward's and teacher's models shard with the policy (else the Sampler loads the
        # teacher), registered so that they follow the rank's device
        for name, models in (("reward_models", self.sharding.load_reward_models()),
                             ("teacher_models", self.sharding.load_teacher_models(self.tokenizer))):
            if models is not None:
                setattr(self, name, models)
        load_reward(self.reward)  # a bad reward model path fails here, before any training work
        if self.sampler.gold is not None:  # scored beside the reward (callbacks.GoldReward)
            load_reward(self.sampler.gold)
        self.policy.train()  # dropout (e.g. lora_dropout) acts in updates; rollouts switch to eval
        self.frozen_reference = self.reference.frozen_copy  # registered, so it follows the device
        hp = self.hparams
        self.single_update = hp.reuse_rollout_forward and self.supports_single_update and (
            hp.num_ppo_epochs == hp.num_mini_batches == hp.gradient_accumulation_steps == 1
        ) and hp.max_tokens_per_micro_batch is None and not has_active_dropout(self.policy)
        self.router_load = router_load_of(self.policy, hp.router_aux_loss_coef)
        self.stop_token_id = stop_token_id(self.tokenizer, hp.stop_token)
        self.packing_pad_id = self.tokenizer.pad_token_id if hp.padding_free else None

    def own_models(self) -> list[torch.nn.Module]:
        """The loaded models, the policy first, then a full fine-tune's frozen reference copy and PPO's critic (value
        head, reward-model backbone): what trainer=fsdp2 shards, with the reward's and the teacher's models."""
        names = ("policy", "frozen_reference", "critic_backbone", "value_head")
        return [model for model in (getattr(self, name, None) for name in names) if model is not None]

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    def configure_callbacks(self) -> list[L.Callback]:
        """Under a plain Trainer: an RL-step progress bar and a summary without uncounted FLOPs in place of Lightning's
        defaults (lit_rlhf.algos.default_callbacks)."""
        return display_callbacks(self._trainer)

    def configure_optimizers(self):
        self._trainable = self.trainable_parameters()
        optimizer = self.optimizer_factory(params=self._trainable)
        if self.lr_scheduler_factory is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": self.lr_scheduler_factory(optimizer=optimizer),
                                                         "interval": "step"}}

    def use_run_task(self, task_metrics: Sequence[TaskMetric], environment: EnvSpec | None) -> None:
        """A module loaded from a checkpoint takes the task metrics and environment of the run that trained it
        (evaluate.py: they are configs of the run, not settings of the module)."""
        self.task_metrics = list(task_metrics)
        self.environment = environment

    @property
    def kl_coef(self) -> float:
        """The current KL coefficient: the KL controller's."""
        return self.kl_controller.kl_coef

    # ---- the RL step -----------------------------------------------------------------------
    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        rollout = self.training_rollout(batch)  # 1. samples, scores, reference (and teacher) logprobs
        penalty = self.kl_penalty(rollout)  # 2. the per-token KL to the reference and its penalty, once
        advantages, objective_stats = self.compute_advantages(rollout, penalty)  # 3. the algorithm's estimator
        update_stats = self.update(rollout, advantages)  # 4. the optimizer steps, then the engine's weights
        self.log_stats(rollout, {**objective_stats, **update_stats})  # 5. statistics: the mean over ranks, logged
        self.last_distributions = step_distributions(rollout, advantages, penalty.kl, self._ratios)
        # 6. after the statistics logged the coefficient this step used; the same mean KL on every rank
        self.kl_controller.steer(penalty, self.last_step_episodes, self.rank_mean)
        self.reference_sync.after_step(self, self.trainer.global_step)  # 7. for the next rollout's reference
        self.rl_step += 1
        if self.hparams.rl_steps is not None and self.rl_step >= self.hparams.rl_steps:
            self.trainer.should_stop = True  # RL steps are the unit: no optimizer-step arithmetic for max_steps

    def training_rollout(self, batch: dict[str, torch.Tensor]) -> Rollout:
        """The rollout an RL step trains on (GRPO's dynamic sampling may add refill rollouts)."""
        return self.rollout(batch)

    def kl_penalty(self, rollout: Rollout) -> KLPenalty:
        """The step's per-token KL to the reference and its penalty (the KL controller's; an algorithm may shape it)."""
        return self.kl_controller.penalty(rollout)

    def compute_advantages(self, rollout: Rollout, penalty: KLPenalty) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """-> advantages (N,R) and the objective/* statistics, from the rollout and the step's KL penalty. Defined by
        each algorithm."""
        raise NotImplementedError

    def estimate(self, rollout: Rollout, non_score_reward: torch.Tensor):
        """The advantages of the algorithm's estimator (ESTIMATORS[self.estimator]) with its settings."""
        return estimate_advantages(rollout, non_score_reward, self.estimator, self.hparams,
                                   sum_over_ranks(self._trainer))

    # ---- lifetime ----------------------------------------------------------------------------
    def on_train_start(self) -> None:
        super().on_train_start()  # a resume's random states first: the producer starts at this step
        # rl_steps: the RL steps this module stops after (Lightning's max_steps stops itself)
        if line := finished_fit_line(self.rl_step, self.hparams.rl_steps, resumed=self.trainer.ckpt_path is not None):
            rank_zero_info(line)
            self.trainer.should_stop = True  # no RL step runs, and no producer starts
            return
        if line := endless_fit_line(self.trainer, self.total_rl_steps()):
            rank_zero_warn(line)
        # a fresh run only; draws nothing from the restored states
        self.heldout_before_training = log_heldout_before_training(self) or self.heldout_before_training
        self.rollout_queue.start(self.trainer, self.rl_step, self.total_rl_steps(), self.packing_pad_id)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.rollout_queue.publish_after_step(self.rl_step)

    def on_train_end(self) -> None:
        self.rollout_queue.stop()
        if line := self.nonfinite.nothing_trained_line():
            rank_zero_warn(line)
        super().on_train_end()

    def setup(self, stage: str) -> None:
        destroy_process_group_at_exit()
        self.sharding.setup(self._trainer)

    def teardown(self, stage: str) -> None:
        self.rollout_queue.stop()  # also after a failed step: no thread outlives the run
        super().teardown(stage)

    def on_fit_start(self) -> None:
        check_reward(self.reward, training=True)
        datamodule = getattr(self.trainer, "datamodule", None)
        self.rollout_queue.check(datamodule, self.sharding.sharded)
        self.check_entropy_quantile_ranks()
        self.reference_sync.check(self, sharded=self.sharding.fsdp2)
        check_data_module(self, datamodule, self.tokenizer)
        if datamodule is not None and getattr(datamodule, "rows", None):
            self.sampler.check_rows(datamodule.rows, datamodule.hparams.dataset, self.task_metrics)
            check_sequence_length(self.hparams.max_tokens_per_micro_batch, max(len(row.ids) for row in datamodule.rows),
                                  self.sampler.context.trajectory_length, self.policy)
        self.training_finished = False
        self._fit_start_time = self._last_step_logged = time.time()
        self._episode_at_start = self.episode
