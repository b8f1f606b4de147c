"""How an RLHF module meets Lightning's strategy: FSDP2 sharding of its models (trainer=fsdp2), sampling in
lockstep where it needs every rank, and atomic weights-only checkpoint files. The module holds one ModelSharding
(module.sharding), given its Sampler (the engine, the reward and the teacher), and calls it from setup (which gives it
the trainer) and configure_model (which gives it the module's models to shard)."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy
from lightning.pytorch.utilities import rank_zero_info

from lit_rlhf.checkpoints.loading import use_safe_checkpoint_io
from lit_rlhf.distributed.sharding import is_sharded, shard_and_load, sharded_models_line
from lit_rlhf.errors import ConfigError
from lit_rlhf.rewards.reward_model import SequenceClassifierReward
from lit_rlhf.rewards.weighted_sum import reward_models
from lit_rlhf.rollout.hf import HFEngine
from lit_rlhf.rollout.sampler import Sampler
from lit_rlhf.rollout.scoring import reward_waits
from lit_rlhf.teachers.causal_lm import CausalLMTeacher, loaded_teachers


class ModelSharding:
    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler  # the module's: its engine, its reward and its teacher
        self.trainer: L.Trainer | None = None  # the run's, from setup (None outside a Trainer)
        self.policy: torch.nn.Module | None = None  # the module's, once shard_models ran

    def scored_models(self) -> list[torch.nn.Module]:
        """Under trainer=fsdp2, the models the Sampler scores with that shard with the module's: the reward's
        sequence-classification models and a distillation teacher's causal LMs."""
        return [reward.model for reward in self.rewards()] + [teacher.model for teacher in self.teachers()]

    @property
    def fsdp2(self) -> bool:
        return self.trainer is not None and isinstance(self.trainer.strategy, ModelParallelStrategy)

    def rewards(self) -> list[SequenceClassifierReward]:
        """Under trainer=fsdp2, the reward's sequence-classification models: sharded like the policy and scored on
        the rollout's weights (gathered with the policy's, or block by block when sampling sharded)."""
        reward = self.sampler.reward
        return reward_models(reward) if self.fsdp2 and reward is not None else []

    def teachers(self) -> list[CausalLMTeacher]:
        """Under trainer=fsdp2, the distillation teacher's causal LMs: sharded like the policy and scored on the
        rollout's gathered weights (the Sampler scores them inside the rollout's gathered block)."""
        teacher = self.sampler.teacher
        return loaded_teachers(teacher) if self.fsdp2 and teacher is not None else []

    def load_teacher_models(self, tokenizer) -> torch.nn.ModuleList | None:
        """The teacher's causal LMs (with the student's tokenizer), loaded before sharding (placeholders under sharded
        loading), for the module to register under trainer=fsdp2, so that the rollout gathers them with the policy and
        they follow the rank's device. None: nothing to register."""
        teachers = self.teachers()
        for teacher in teachers:
            teacher.load(tokenizer, empty=self.loads_sharded)
        return torch.nn.ModuleList(teacher.model for teacher in teachers) if teachers else None

    def load_reward_models(self) -> torch.nn.ModuleList | None:
        """The reward's sequence-classification models, with placeholders under sharded loading (each rank reads
        its shards once sharded), for the module to register under trainer=fsdp2, so that the rollout gathers (or
        reshards) them with the policy and they follow the rank's device. None: nothing to register."""
        rewards = self.rewards()
        for reward in rewards:
            reward.load(empty=self.loads_sharded)
        return torch.nn.ModuleList(reward.model for reward in rewards) if rewards else None

    def setting(self, name: str):
        """A setting of the run's FSDP2Strategy by name (None without trainer=fsdp2)."""
        return getattr(self.trainer.strategy, name, None) if self.trainer is not None else None

    @property
    def loads_sharded(self) -> bool:
        """Models built with placeholder parameters, each rank reading its shards after fully_shard
        (trainer=fsdp2; lit_rlhf/distributed/meta_loading.py)."""
        return bool(self.setting("sharded_loading"))

    @property
    def samples_sharded(self) -> bool:
        """Rollouts on the sharded model, each block gathered as the forward reaches it (trainer=fsdp2 with
        trainer.strategy.sharded_sampling=true), instead of on the whole weights gathered once."""
        return bool(self.setting("sharded_sampling"))

    def check_sharded_sampling(self) -> None:
        sampler = self.sampler
        if not isinstance(sampler.engine, HFEngine):
            raise ConfigError(f"trainer.strategy.sharded_sampling=true samples through the sharded model's generate() "
                              f"(rollout=hf); {type(sampler.engine).__name__} holds its own whole copy of the "
                              f"weights. Use rollout=hf, or trainer.strategy.sharded_sampling=false.")
        if self.rewards() and reward_waits(sampler.reward):
            raise ConfigError("trainer.strategy.sharded_sampling=true with a reward model beside a reward that waits "
                              "(a server, a judge): the reward runs in a thread while the rollout's sharded forwards "
                              "gather, and the ranks' collectives could interleave differently; use "
                              "trainer.strategy.sharded_sampling=false (the reward model is then scored on gathered "
                              "weights).")
        if self.teachers():
            raise ConfigError("trainer.strategy.sharded_sampling=true with a loaded teacher: its packed forwards "
                              "differ in number between ranks, and every sharded forward gathers on all ranks; use "
                              "trainer.strategy.sharded_sampling=false (the teacher is then scored on gathered "
                              "weights).")
        if sampler.environment is not None:
            raise ConfigError("trainer.strategy.sharded_sampling=true samples single-turn rollouts (with an "
                              "environment the ranks take different numbers of turns, and every turn gathers on all "
                              "ranks); use env=none, or trainer.strategy.sharded_sampling=false.")

    @property
    def sharded(self) -> bool:
        """Whether the module's models are FSDP2-sharded (trainer=fsdp2)."""
        return self.policy is not None and is_sharded(self.policy)

    def shard_models(self, models: list[torch.nn.Module], device_mesh, max_tokens_per_micro_batch: int | None) -> bool:
        """Under Lightning's ModelParallelStrategy (trainer=fsdp2): fully_shard the module's models (the policy
        first), and the reward's and teacher's it registered, over the data-parallel ranks of device_mesh. Called from
        configure_model, after the weights loaded. -> whether it sharded (the rollout's forwards then run on gathered
        weights and the update's on shards: no single update)"""
        self.policy = models[0]
        if not self.fsdp2:
            return False
        if max_tokens_per_micro_batch is not None:  # ranks would run different numbers of sharded forwards
            raise ConfigError(f"algo.max_tokens_per_micro_batch={max_tokens_per_micro_batch} makes ranks run "
                              f"different numbers of micro-batches, which sharded updates cannot (every rank gathers "
                              f"each block together); use algo.gradient_accumulation_steps with trainer=fsdp2.")
        mesh = device_mesh["data_parallel"]
        models = [*models, *self.scored_models()]
        shard_and_load(models, mesh, self.trainer.strategy.root_device, cpu_offload=bool(self.setting("cpu_offload")))
        sampling = "the sharded model" if self.samples_sharded else "the gathered whole weights"
        rank_zero_info(sharded_models_line(len(models), mesh.size(), self.loads_sharded, f"; sampling on {sampling}",
                                           offload=bool(self.setting("cpu_offload"))))
        return True

    def setup(self, trainer: L.Trainer | None) -> None:
        """Lightning's setup hook (the module's trainer, None outside one): how the engine samples under the run's
        strategy, and its checkpoint files."""
        self.trainer = trainer
        strategy = type(self.trainer.strategy).__name__ if self.trainer is not None else ""
        if self.trainer is not None and isinstance(self.trainer.strategy, FSDPStrategy):
            raise ConfigError("Lightning's FSDPStrategy (FSDP1) cannot gather the weights that generation needs; use "
                              "trainer=fsdp2 to shard (FSDP2: lit_rlhf.distributed.strategy.FSDP2Strategy).")
        zero3 = "DeepSpeed" in strategy and getattr(self.trainer.strategy, "zero_stage_3", False)
        # ZeRO-3 gathers parameters layer by layer in every forward: all ranks keep generating together. FSDP2
        # gathers the whole weights once per rollout: all ranks must sample (also rank zero's reports), each at
        # its own pace.
        engine = self.sampler.engine
        engine.lockstep = zero3 or isinstance(self.trainer.strategy, ModelParallelStrategy) or (
            engine.shared_by_ranks and self.trainer.world_size > 1)
        # trainer.strategy.sharded_sampling: as ZeRO-3, every generation step gathers each block on all ranks
        engine.synced_generation = zero3 or self.samples_sharded
        if self.samples_sharded:
            self.check_sharded_sampling()
        use_safe_checkpoint_io(self.trainer)  # atomic writes, weights-only loads, no non-finite weights
