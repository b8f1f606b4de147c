"""Sharded loading (trainer=fsdp2, trainer.strategy.sharded_loading=true): a model built with placeholder
parameters costs no memory, wraps in LoRA as a loaded model does (the same random numbers drawn), and each rank
reads only its shards' rows of the safetensors files; gathered, the weights are from_pretrained's."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.distributed.meta_loading import WeightFiles, is_empty, materialize
from lit_rlhf.errors import ConfigError
from lit_rlhf.models import load_tokenizer
from lit_rlhf.models.policy import fit_embeddings, load_policy
from tests.conftest import LORA
from tests.distributed.ranks import run_two_ranks
from tests.helpers import save_reward_model


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


@pytest.mark.parametrize("lora", [LORA, None], ids=["lora", "full"])
def test_an_output_layer_tied_to_the_input_embeddings_loads_by_shards_tied(lora, tmp_path):
    """A model whose output layer is its input embeddings (config.tie_word_embeddings: Qwen2.5's and Llama 3.2's small
    models, Gemma): its files hold the weight once, under the embeddings' key. The empty model is tied as
    from_pretrained ties it; it was not (accelerate's empty-weights context registers each parameter anew), and
    sharded loading stopped at "its safetensors files hold no 'lm_head.weight'"."""
    tokenizer = load_tokenizer(TINY_PYTHIA)
    config = AutoConfig.for_model("qwen2", vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  tie_word_embeddings=True)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    torch.manual_seed(0)
    policy, _ = load_policy(str(tmp_path), tokenizer, lora=lora, empty=True)
    torch.manual_seed(0)
    loaded, _ = load_policy(str(tmp_path), tokenizer, lora=lora)
    materialize(policy, torch.device("cpu"))
    assert policy.get_output_embeddings().weight is policy.get_input_embeddings().weight
    expected = dict(loaded.named_parameters())
    assert dict(policy.named_parameters()).keys() == expected.keys()
    for name, param in policy.named_parameters():
        assert torch.equal(param, expected[name]), name


@pytest.mark.parametrize("lora", [LORA, None], ids=["lora", "full"])
def test_a_mixture_of_experts_stored_one_tensor_per_expert_loads_by_experts(lora, tmp_path):
    """Qwen3-MoE's files hold each expert's gate, up and down projections; the model holds them stacked, experts along
    dim 0, gate and up fused (transformers converts them while loading). Each rank's rows are whole experts, read and
    fused as transformers fuses them; an empty model holding placeholders runs no dropout probe (its grouped matmul
    refuses them: trainer=fsdp2 with model.lora=null failed there)."""
    from lit_rlhf.step.dropout import has_active_dropout
    from tests.algos.test_router_aux_loss import save_tiny_moe

    path = save_tiny_moe(tmp_path / "moe")
    tokenizer = load_tokenizer(path)
    torch.manual_seed(0)
    policy, _ = load_policy(path, tokenizer, lora=lora, empty=True)
    assert has_active_dropout(policy)  # unknown on placeholders: counted as random
    files, keys = next(vars(module)["_lit_rlhf_weight_keys"] for name, module in policy.named_modules()
                       if "layers.1.mlp.experts" in name and "gate_up_proj" in vars(module).get("_lit_rlhf_weight_keys",
                                                                                                  (None, {}))[1])
    torch.manual_seed(0)
    loaded, _ = load_policy(path, tokenizer, lora=lora)
    for name in ("gate_up_proj", "down_proj"):
        whole = next(p for n, p in loaded.named_parameters() if "layers.1.mlp.experts" in n and n.endswith(name))
        assert torch.equal(files.rows(keys[name], 1, 3), whole[1:3])  # a rank's experts 1 and 2
        assert files.rows(keys[name], 4, 4).shape == (0, *whole.shape[1:])  # a rank with none
    materialize(policy, torch.device("cpu"))
    expected = dict(loaded.named_parameters())
    assert dict(policy.named_parameters()).keys() == expected.keys()
    for name, param in policy.named_parameters():
        assert torch.equal(param, expected[name]), name


def test_file_keys_follow_the_renamings_of_transformers():
    """pythia's files store the head as embed_out; recent transformers name it lm_head (renamed on loading), earlier
    5.x releases embed_out: either way the head reads the file's key."""
    policy, _ = load_policy(TINY_PYTHIA, load_tokenizer(TINY_PYTHIA), lora=None, empty=True)
    assert vars(policy.get_output_embeddings())["_lit_rlhf_weight_keys"][1] == {"weight": "embed_out.weight"}


def test_a_tokenizer_that_adds_tokens_is_one_line():
    policy, _ = load_policy(TINY_PYTHIA, load_tokenizer(TINY_PYTHIA), lora=None, empty=True)
    rows = policy.get_input_embeddings().num_embeddings

    class Larger:
        def __len__(self):
            return rows + 1

    with pytest.raises(ConfigError, match=f"the tokenizer adds a pad token \\({rows + 1} tokens, the model has {rows}"):
        fit_embeddings(policy, Larger(), "model.name_or_path")


def test_ppo_reads_a_reward_model_critic_by_shards_too(tmp_path, monkeypatch):
    """PPO's algo.critic=reward_model under sharded loading: backbone and score head are placeholders until
    materialized, then equal the reward model's files; a causal LM's folder (no score head saved) gets a real head,
    initialised as from_pretrained initialises it."""
    from lit_rlhf.models.value import load_reward_model_critic
    from lit_rlhf.step.model_sharding import ModelSharding
    from tests.conftest import make_ppo

    saved = save_reward_model(tmp_path)
    monkeypatch.setattr(ModelSharding, "loads_sharded", True)  # what trainer=fsdp2 sets
    module = make_ppo(critic="reward_model", critic_model_path=str(tmp_path), model={"name_or_path": TINY_PYTHIA,
                                                                                     "lora": None})
    module.load_models()
    assert is_empty(module.critic_backbone) and is_empty(module.value_head) and is_empty(module.policy)
    assert storage_bytes(module.critic_backbone) <= 8 * len(list(module.critic_backbone.parameters()))
    for model in (module.critic_backbone, module.value_head):
        materialize(model, torch.device("cpu"))
    expected = saved.state_dict()
    for name, tensor in module.critic_backbone.state_dict().items():
        assert torch.equal(tensor, expected[f"gpt_neox.{name}"]), name
    assert torch.equal(module.value_head.weight, expected["score.weight"])

    torch.manual_seed(0)
    _, head = load_reward_model_critic(TINY_PYTHIA, None, None, empty=True)
    assert not is_empty(head) and head.weight.requires_grad
    assert 0.01 < head.weight.std() < 0.03  # normal(0, initializer_range=0.02), not a placeholder's zeros


def two_rank_worker(rank: int, init_method: str, out: str) -> None:
    torch.distributed.init_process_group("gloo", init_method=init_method, rank=rank, world_size=2)
    rows = WeightFiles.rows
    try:
        load_both_by_shards(rank, out)
    finally:
        WeightFiles.rows = rows
        torch.distributed.destroy_process_group()


def load_both_by_shards(rank: int, out: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy

    from lit_rlhf.distributed.meta_loading import placeholders_to_meta
    from lit_rlhf.distributed.sharding import full_tensor, shard
    from lit_rlhf.models.value import load_reward_model_critic

    read = {}
    rows = WeightFiles.rows

    def counting(self, key, start, stop):
        read[self.key, key] = read.get((self.key, key), 0) + stop - start
        return rows(self, key, start, stop)

    WeightFiles.rows = counting
    policy, _ = load_policy(TINY_PYTHIA, load_tokenizer(TINY_PYTHIA), lora=None, empty=True)
    critic, _ = load_reward_model_critic(f"{out}/reward_model", None, None, empty=True)
    for model in (policy, critic):
        placeholders_to_meta(model)
        shard(model, init_device_mesh("cpu", (2,)), cpu_offload=True)
        materialize(model, torch.device("cpu"))
    whole = {name: full_tensor(p.detach()).clone() for name, p in policy.named_parameters()}
    whole_critic = {name: full_tensor(p.detach()).clone() for name, p in critic.named_parameters()}
    offloaded = all(isinstance(unit._get_fsdp_state()._fsdp_param_group.offload_policy, CPUOffloadPolicy)
                    for unit in policy.modules() if hasattr(unit, "_get_fsdp_state"))
    saved = {"read": read, "whole": whole, "whole_critic": whole_critic, "offloaded": offloaded}
    torch.save(saved, f"{out}/rank{rank}.pt")


@pytest.mark.multi_rank
def test_each_rank_reads_only_its_rows(tmp_path):
    """The policy and a PPO critic's reward model, sharded over 2 ranks (CPU-offloaded): each rank reads its half of
    every tensor's rows, and the shards gathered are the files' tensors."""
    reward_model = save_reward_model(tmp_path / "reward_model")
    run_two_ranks(two_rank_worker, str(tmp_path))
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    loaded = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)
    expected = dict(loaded.named_parameters())
    expected_critic = {name.removeprefix("gpt_neox."): p for name, p in reward_model.named_parameters()}
    for rank in ranks:
        assert rank["offloaded"]
        assert rank["whole"].keys() == expected.keys()
        for name, tensor in rank["whole"].items():
            assert torch.equal(tensor, expected[name]), name
        assert rank["whole_critic"].keys() == expected_critic.keys() - {"score.weight"}
        for name, tensor in rank["whole_critic"].items():
            assert torch.equal(tensor, expected_critic[name]), name
    file_tensors = {("model.name_or_path", "embed_out.weight" if k == "lm_head.weight" else k): p
                    for k, p in expected.items()}
    file_tensors.update({("algo.critic_model_path", k): p for k, p in reward_model.state_dict().items()
                         if k != "score.weight"})
    assert ranks[0]["read"].keys() == file_tensors.keys()
    for key, tensor in file_tensors.items():  # the two ranks read disjoint halves, together the whole
        total = tensor.shape[0] if tensor.dim() else 0
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


@pytest.mark.integration
def test_sharded_sampling_refuses_a_reward_model_beside_a_waiting_reward():
    """A reward that waits runs in a thread while the rollout's forwards go on; with sampling sharded, a reward model
    in it would gather blocks while those forwards gather theirs, in an order the ranks need not share."""
    import lightning as L

    from lit_rlhf.distributed.strategy import FSDP2Strategy
    from lit_rlhf.rewards import SequenceClassifierReward, VaderSentiment, WeightedSum
    from tests.conftest import make_rloo

    class Waiting(VaderSentiment):
        waits = True

    rewards = {"model": SequenceClassifierReward("unloaded"), "server": Waiting()}
    module = make_rloo(reward=WeightedSum(rewards))
    trainer = L.Trainer(strategy=FSDP2Strategy(sharded_sampling=True), accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False)
    with pytest.raises(ConfigError, match="sharded_sampling=true with a reward model beside a reward that waits"):
        module.sharding.setup(trainer)  # Lightning's setup hook checks sharded sampling
    module.reward = WeightedSum({"model": SequenceClassifierReward("unloaded"), "vader": VaderSentiment()})
    module.sharding.check_sharded_sampling()  # scored in the rollout's own thread: every rank gathers in the same order
