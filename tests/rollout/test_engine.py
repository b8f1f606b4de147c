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


def test_contexts_and_episodes_become_padded_tensors():
    """Token lists of mixed lengths -> left-padded prompts; episodes (a model turn, an observation, a model turn) ->
    right-padded responses with the model's tokens, every token after the prompt, and the sampler's logprobs."""
    from lit_rlhf.rollout.engine import left_pad
    from lit_rlhf.rollout.trajectory import Episode, episode_tensors

    ids, mask = left_pad([[5, 6, 7], [8]], 0, torch.device("cpu"))
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert ids.dtype == mask.dtype == torch.long

    multi_turn, short = Episode([1], None), Episode([1], None)
    multi_turn.append([11, 12], True, [-0.5, -0.25])
    multi_turn.append([13], False)
    multi_turn.append([14], True, [-1.0])
    short.append([21], True, [-2.0])
    tensors = episode_tensors([multi_turn, short], 5, 0, torch.device("cpu"))
    assert tensors["responses"].tolist() == [[11, 12, 13, 14, 0], [21, 0, 0, 0, 0]]
    assert tensors["response_mask"].tolist() == [[True, True, False, True, False], [True, False, False, False, False]]
    assert tensors["context_mask"].tolist() == [[True, True, True, True, False], [True, False, False, False, False]]
    assert tensors["sampler_logprobs"].tolist() == [[-0.5, -0.25, 0.0, -1.0, 0.0], [-2.0, 0.0, 0.0, 0.0, 0.0]]
    assert tensors["sampler_logprobs"].dtype == torch.float32 and tensors["response_mask"].dtype == torch.bool
    assert episode_tensors([], 5, 0, torch.device("cpu"))["responses"].shape == (0, 5)


def test_padding_the_batch_costs_the_same_tensor_operations_for_any_number_of_sequences():
    """left_pad and episode_tensors run around every generate() call: one tensor per output, not operations per row
    (each dispatched operation costs host time in a launch-bound decoding loop)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from lit_rlhf.rollout.engine import left_pad
    from lit_rlhf.rollout.trajectory import Episode, episode_tensors

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.ops += 1
            return func(*args, **(kwargs or {}))

    def operations(n: int) -> int:
        episodes = [Episode([1, 2], None) for _ in range(n)]
        for episode in episodes:
            episode.append([3, 4], True, [-1.0, -1.0])
        Count.ops = 0
        with Count():
            left_pad([[1, 2, 3]] * n, 0, torch.device("cpu"))
            episode_tensors(episodes, 4, 0, torch.device("cpu"))
        return Count.ops

    assert operations(2) == operations(32)
