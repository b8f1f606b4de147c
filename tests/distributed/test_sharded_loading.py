"""Sharded loading (trainer=fsdp2, trainer.strategy.sharded_loading=true): a model built with placeholder
parameters costs no memory, wraps in LoRA as a loaded model does (the same random numbers drawn), and each rank
reads only its shards' rows of the safetensors files; gathered, the weights are from_pretrained's."""

import os

import pytest
import torch
import torch.multiprocessing as mp
from transformers import AutoModelForCausalLM

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.distributed.meta_loading import WeightFiles, is_empty, materialize
from lit_rlhf.errors import ConfigError
from lit_rlhf.models import load_tokenizer
from lit_rlhf.models.policy import fit_embeddings, load_policy
from tests.conftest import LORA


def storage_bytes(model: torch.nn.Module) -> int:
    return sum(p.untyped_storage().nbytes() for p in model.parameters())


@pytest.mark.parametrize("lora", [LORA, None], ids=["lora", "full"])
def test_placeholders_cost_nothing_and_fill_to_the_loaded_model(lora):
    tokenizer = load_tokenizer(TINY_PYTHIA)
    torch.manual_seed(0)
    policy, reference = load_policy(TINY_PYTHIA, tokenizer, lora=lora, empty=True)
    drawn_empty = torch.random.get_rng_state()
    torch.manual_seed(0)
    loaded, loaded_reference = load_policy(TINY_PYTHIA, tokenizer, lora=lora)
    assert torch.equal(drawn_empty, torch.random.get_rng_state())  # LoRA's initialisation drew the same numbers

    base = [p for n, p in policy.named_parameters() if "lora_" not in n]
    assert is_empty(policy) and all(p.untyped_storage().nbytes() <= 8 for p in base)  # one element each
    materialize(policy, torch.device("cpu"))
    assert not is_empty(policy) and storage_bytes(policy) == storage_bytes(loaded)
    expected = dict(loaded.named_parameters())
    for name, param in policy.named_parameters():
        assert torch.equal(param, expected[name]), name
    assert policy.generation_config == loaded.generation_config
    if lora is None:  # the frozen reference copy is read from the same files
        materialize(reference.frozen_copy, torch.device("cpu"))
        for a, b in zip(reference.frozen_copy.parameters(), loaded_reference.frozen_copy.parameters(), strict=True):
            assert torch.equal(a, b)


def test_file_keys_follow_the_renamings_of_transformers():
    """pythia's files store the head as embed_out, the model names it lm_head (transformers renames on loading)."""
    policy, _ = load_policy(TINY_PYTHIA, load_tokenizer(TINY_PYTHIA), lora=None, empty=True)
    assert vars(policy.lm_head)["_lit_rlhf_weight_keys"][1] == {"weight": "embed_out.weight"}


def test_a_tokenizer_that_adds_tokens_is_one_line():
    policy, _ = load_policy(TINY_PYTHIA, load_tokenizer(TINY_PYTHIA), lora=None, empty=True)
    rows = policy.get_input_embeddings().num_embeddings

    class Larger:
        def __len__(self):
            return rows + 1

    with pytest.raises(ConfigError, match=f"the tokenizer adds a pad token \\({rows + 1} tokens, the model has {rows}"):
        fit_embeddings(policy, Larger(), "model.name_or_path")


def two_rank_worker(rank: int, port: int, out: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy

    from lit_rlhf.distributed.meta_loading import placeholders_to_meta
    from lit_rlhf.distributed.sharding import full_tensor, shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    read = {}
    rows = WeightFiles.rows

    def counting(self, key, start, stop):
        read[key] = read.get(key, 0) + stop - start
        return rows(self, key, start, stop)

    WeightFiles.rows = counting
    policy, _ = load_policy(TINY_PYTHIA, load_tokenizer(TINY_PYTHIA), lora=None, empty=True)
    placeholders_to_meta(policy)
    shard(policy, init_device_mesh("cpu", (2,)), cpu_offload=True)
    materialize(policy, torch.device("cpu"))
    whole = {name: full_tensor(p.detach()).clone() for name, p in policy.named_parameters()}
    offloaded = all(isinstance(unit._get_fsdp_state()._fsdp_param_group.offload_policy, CPUOffloadPolicy)
                    for unit in policy.modules() if hasattr(unit, "_get_fsdp_state"))
    torch.save({"read": read, "whole": whole, "offloaded": offloaded}, f"{out}/rank{rank}.pt")
    torch.distributed.destroy_process_group()


def test_each_rank_reads_only_its_rows(tmp_path):
    from tests.distributed.test_fsdp2_train import free_port

    mp.spawn(two_rank_worker, args=(free_port(), str(tmp_path)), nprocs=2)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    loaded = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    expected = dict(loaded.named_parameters())
    for rank in ranks:
        assert rank["offloaded"]
        assert rank["whole"].keys() == expected.keys()
        for name, tensor in rank["whole"].items():
            assert torch.equal(tensor, expected[name]), name
    file_rows = {key: tensor.shape[0] if tensor.dim() else 0 for key, tensor in (
        (k, expected["lm_head.weight" if k == "embed_out.weight" else k]) for k in ranks[0]["read"])}
    for key, total in file_rows.items():  # the two ranks read disjoint halves, together the whole
        assert ranks[0]["read"][key] + ranks[1]["read"].get(key, 0) == total, key
        assert ranks[0]["read"][key] == -(-total // 2), key


def test_an_index_naming_a_missing_file_is_one_line(tmp_path):
    import json
    import shutil

    shutil.copy(f"{TINY_PYTHIA}/config.json", tmp_path / "config.json")
    index = {"weight_map": {"a.weight": "part-1.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match="names 'part-1.safetensors', which is not there"):
        WeightFiles.find(str(tmp_path), "model.name_or_path")
