"""trainer=fsdp2 for train_dpo.py, train_kto.py and train_sft.py, in one process: the saved policy built from the
gathered tensors, and the finite-gradient check that stops every rank when one rank's shards are not finite. The
2-rank runs are tests/distributed/test_fsdp2_pairs.py."""

import shutil
import types
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from lit_rlhf.algos.pair_module import stop_unless_finite
from lit_rlhf.algos.pair_sharding import whole_policy
from lit_rlhf.errors import ConfigError
from lit_rlhf.models import load_policy, load_tokenizer
from tests.conftest import LORA, TINY_PYTHIA


def model_folder(tmp_path, tied: bool) -> str:
    """The tiny model with its input embeddings and head tied or not, saved with its tokenizer."""
    config = AutoConfig.from_pretrained(TINY_PYTHIA, tie_word_embeddings=tied)
    torch.manual_seed(0)
    folder = tmp_path / ("tied" if tied else "untied")
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    for source in Path(TINY_PYTHIA).glob("*token*"):  # its tokenizer's files
        shutil.copy(source, folder / source.name)
    return str(folder)


def root_of(policy):
    return policy.get_base_model() if hasattr(policy, "get_base_model") else policy


@pytest.mark.parametrize("lora", [None, LORA], ids=["full", "lora"])
@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("empty", [True, False], ids=["sharded-loading", "whole-loading"])
def test_the_saved_policy_holds_the_gathered_tensors(tmp_path, tied, lora, empty):
    """What rank zero saves after a sharded fit: the policy built again (with placeholders where the run loaded its
    shards alone) holding the trained tensors, tied weights one tensor, computing what the trained policy computes."""
    folder = model_folder(tmp_path, tied)
    tokenizer = load_tokenizer(folder)
    trained, _ = load_policy(folder, tokenizer, lora=lora)
    torch.manual_seed(1)
    with torch.no_grad():
        for param in trained.parameters():
            param.add_(torch.randn_like(param) * 0.1)  # every tensor moved off the model files
    state = {name: tensor.clone() for name, tensor in trained.state_dict().items()}

    saved = whole_policy({"name_or_path": folder, "lora": lora}, tokenizer, state, empty=empty)

    assert saved.state_dict().keys() == state.keys()
    for name, tensor in saved.state_dict().items():
        torch.testing.assert_close(tensor, state[name], rtol=0, atol=0, msg=name)
    root = root_of(saved)
    assert (root.get_input_embeddings().weight is root.get_output_embeddings().weight) == tied
    ids = torch.tensor([[5, 17, 3, 42, 7]])
    with torch.no_grad():
        torch.testing.assert_close(saved(input_ids=ids).logits, trained(input_ids=ids).logits, rtol=0, atol=0)


class RankStub:
    """A module on one of two ranks: summed_over_ranks adds the other rank's tensor."""

    def __init__(self, other_rank_flag: float):
        self.other = other_rank_flag
        self.global_step = 3
        self.device = torch.device("cpu")

    def summed_over_ranks(self, tensor):
        return tensor + self.other

    def optimizers(self):
        return types.SimpleNamespace(param_groups=[{"lr": 1e-3}])


@pytest.mark.parametrize("this_rank_finite", [True, False])
@pytest.mark.parametrize("other_rank_finite", [True, False])
def test_a_non_finite_gradient_shard_on_any_rank_stops_every_rank(this_rank_finite, other_rank_finite):
    """Each rank holds other shards of the gradients: a rank whose own shards are finite stops too when another's
    are not (else it would wait in the next step's collectives for the rank that stopped)."""
    grads = [torch.ones(3), torch.tensor([1.0, float("nan") if not this_rank_finite else 2.0])]
    module = RankStub(other_rank_flag=0.0 if other_rank_finite else 1.0)
    if this_rank_finite and other_rank_finite:
        stop_unless_finite(module, "gradient", grads, sharded=True)
        return
    with pytest.raises(ConfigError, match="training step 3: the gradient is not finite"):
        stop_unless_finite(module, "gradient", grads, sharded=True)
