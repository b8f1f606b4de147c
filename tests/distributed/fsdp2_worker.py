"""`python tests/distributed/fsdp2_worker.py DEVICES OUT CASE [CASE ...]`, each CASE `ALGO,LORA[,SETTING=VALUE...]`
(LORA: lora or full): for each case in turn, 3 RL steps (AdamW) on the fixed rollout on DEVICES FSDP2 CPU ranks (gloo),
in the same processes (one launch: a Trainer after the first finds its ranks started and their group joined); rank 0
saves the trained tensors, whole, to OUT as {case: tensors}."""

import functools
import sys

import lightning as L
import torch
import yaml

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.distributed.sharding import full_tensor
from lit_rlhf.distributed.strategy import FSDP2Strategy
from lit_rlhf.rewards import VaderSentiment
from tests.algos.fixed_rollout import ALGORITHMS, K_SETTING, PROMPTS, K, R
from tests.conftest import LORA, make_datamodule

RL_STEPS = 3


def in_float64(cls):
    """The module's models in float64, before they are sharded: the sum of the ranks' gradients and the one
    process' gradient round differently in float32, and AdamW turns a rounding difference in a near-zero gradient
    into a step of up to lr; in float64 the comparison is of the maths, not of the rounding."""

    class Float64(cls):
        def load_models(self):
            super().load_models()
            for model in [*self.own_models(), *self.sharding.scored_models()]:
                model.double()

    return Float64


def trained_after_three_steps(devices: int, algo: str, lora: bool, **settings) -> dict[str, torch.Tensor]:
    L.seed_everything(0)
    # the first RL step's policy is the sampling policy (ratio 1); the next two train off the fixed rollout
    settings = {K_SETTING[algo]: K, "response_length": R, "reuse_rollout_forward": False, **settings}
    module = in_float64(ALGORITHMS[algo])(model={"name_or_path": TINY_PYTHIA, "lora": LORA if lora else None},
                              reward=VaderSentiment(), optimizer=functools.partial(torch.optim.AdamW, lr=1e-3),
                              **settings)
    trainer = L.Trainer(max_steps=RL_STEPS * module.optimizer_steps_per_rl_step, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, accelerator="cpu", devices=devices,
                        strategy=FSDP2Strategy() if devices > 1 else "auto")
    trainer.fit(module, make_datamodule(batch_size=PROMPTS))
    assert module.sharding.sharded == (devices > 1)
    return {n: full_tensor(p.detach()).clone() for n, p in module.named_parameters() if p.requires_grad}


def parse_case(case: str) -> tuple[str, bool, dict]:
    algo, lora, *settings = case.split(",")
    return algo, lora == "lora", {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in settings)}


if __name__ == "__main__":
    devices, out, cases = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    trained = {}
    for case in cases:
        algo, lora, settings = parse_case(case)
        trained[case] = trained_after_three_steps(devices, algo, lora, **settings)
    if int(torch.distributed.get_rank() if torch.distributed.is_initialized() else 0) == 0:
        torch.save(trained, out)
