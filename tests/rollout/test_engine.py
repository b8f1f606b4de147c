"""The rollout seam: an engine of the user's own plugs into training through `rollout_engine=`, and the
default Hydra config builds the Hugging Face engine."""

import lightning as L
import pytest
import torch

from lit_rlhf.rollout import HFEngine, RolloutEngine, Samples, repeat_prompts
from tests.conftest import make_datamodule, make_rloo


class FixedEngine(RolloutEngine):
    """Answers every prompt with "good" then the stop token, and counts the weight updates it is told of."""

    def __init__(self):
        self.setups = self.updates = 0

    def setup(self, sampling):
        self.setups += 1
        self.answer = sampling.tokenizer(" good", add_special_tokens=False)["input_ids"] + [sampling.stop_token_id]

    def sample(self, sampling, batch, samples_per_prompt, from_reference=False, greedy=False):
        queries, query_mask, prompt_index = repeat_prompts(batch, samples_per_prompt)
        responses = torch.full((len(queries), sampling.settings.response_length), sampling.tokenizer.pad_token_id)
        responses[:, : len(self.answer)] = torch.tensor(self.answer)
        mask = torch.zeros_like(responses, dtype=torch.bool)
        mask[:, : len(self.answer)] = True
        return Samples(queries, query_mask, responses, mask, prompt_index)

    def after_update(self, sampling):
        self.updates += 1


@pytest.mark.integration
def test_a_user_engine_drives_the_rollouts_and_hears_of_every_update():
    engine = FixedEngine()
    module = make_rloo(rollout_engine=engine, response_length=8)
    seen = []

    class Watch(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, *args):
            seen.append(pl_module.last_stats["objective/scores"])

    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", callbacks=[Watch()])
    trainer.fit(module, make_datamodule())
    assert engine.setups == 1 and engine.updates == 2
    vader_good = module.reward(["x"], [" good"]).item()
    assert seen == pytest.approx([vader_good, vader_good])  # every completion was the engine's


def test_the_default_engine_is_hf_and_samples_k_per_prompt(tiny_path):
    module = make_rloo(response_length=6)
    assert isinstance(module.rollout_engine, HFEngine)
    module.configure_model()
    batch = next(iter(_val(make_datamodule())))
    samples = module.rollout_engine.sample(module.sampler.context, batch, samples_per_prompt=3)
    assert samples.responses.shape == (3 * len(batch["input_ids"]), 6)
    assert torch.equal(samples.prompt_index, torch.arange(len(batch["input_ids"])).repeat_interleave(3))


def _val(datamodule):
    datamodule.setup()
    return datamodule.val_dataloader()
