"""A model's location: a folder here, or a name that can name a Hugging Face Hub repository."""

import json

import pytest

from lit_rlhf.config.locations import check_model_location, hub_name, local_folder_note
from lit_rlhf.errors import ConfigError


@pytest.mark.parametrize("name, hub", [
    ("gpt2", True), ("EleutherAI/pythia-14m", True), ("runs/rloo-policy", True),  # owner/name: may be on the Hub
    ("/models/pythia", False), ("./policy", False), ("../policy", False), ("~/policy", False), ("a/b/c", False),
    ("runs/rloo-policy/", False), ("my policy", False)])
def test_a_name_that_is_no_folder_here_is_looked_up_on_the_hub_only_if_it_can_name_a_repository(name, hub):
    assert hub_name(name) is hub


def test_a_folder_here_passes_whatever_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my policy" / "v1").mkdir(parents=True)  # no Hub name, but a folder
    check_model_location("model.name_or_path", "my policy/v1")
    with pytest.raises(ConfigError, match=r"^model.name_or_path='my policy/v2' is no folder here"):
        check_model_location("model.name_or_path", "my policy/v2")


@pytest.mark.parametrize("name, checkpoint_note", [("last.ckpt", True), ("metrics.csv", False)])
def test_a_file_given_as_a_model_is_refused_and_a_checkpoint_is_pointed_to_its_export(name, checkpoint_note, tmp_path,
                                                                                        monkeypatch):
    """policy_path=<run>/checkpoints/last.ckpt said "is a local folder that cannot be loaded" after the imports."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_bytes(b"")
    with pytest.raises(ConfigError) as err:
        check_model_location("policy_path", name)
    assert str(err.value).startswith(f"policy_path={name!r} is a file, not a model folder; give the folder that "
                                     f"save_pretrained wrote")
    assert ("export it (python -m lit_rlhf.export CKPT OUT_DIR)" in str(err.value)) is checkpoint_note


def test_a_hub_shaped_name_whose_owner_is_a_folder_here_is_noted_as_a_path_that_folder_lacks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "rloo-policy").mkdir(parents=True)
    assert local_folder_note("runs/rloo") == " (If you meant a path: the folder 'runs' is here, but holds no 'rloo'.)"
    assert local_folder_note("runs/rloo-policy") == ""  # there: a path, nothing to note
    assert local_folder_note("EleutherAI/pythia-14m") == "" and local_folder_note("gpt2") == ""  # no such folder here


def adapter_folder(folder, base: str = "EleutherAI/pythia-14m"):
    """A folder of a peft adapter alone, as save_pretrained writes it for a PeftModel."""
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": base}))
    (folder / "adapter_model.safetensors").write_bytes(b"")
    return str(folder)


@pytest.mark.parametrize(("key", "fix"), [
    ("model.name_or_path", "load it onto its base with model.adapter_path={path} model.name_or_path="
                           "EleutherAI/pythia-14m."),
    ("teacher.name_or_path", "load it onto its base with teacher.adapter_path={path} teacher.name_or_path="
                             "EleutherAI/pythia-14m."),
    ("reward.name_or_path", "merge it into its base (EleutherAI/pythia-14m) and save that"),
    ("model.reference_name_or_path", "merge it into its base (EleutherAI/pythia-14m) and save that"),
])
def test_a_folder_holding_an_adapter_alone_is_refused_where_a_whole_model_is_loaded(key, fix, tmp_path):
    path = adapter_folder(tmp_path / "adapter")
    with pytest.raises(ConfigError) as err:
        check_model_location(key, path, whole_model=True)
    assert str(err.value).startswith(f"{key}={path!r} holds a peft adapter (adapter_config.json, no config.json), not "
                                     f"a whole model; {fix.format(path=path)}")
    check_model_location(key.replace("name_or_path", "adapter_path"), path)  # where an adapter belongs it passes


def test_a_model_folder_with_an_adapter_config_beside_its_weights_passes(tmp_path):
    path = adapter_folder(tmp_path / "model")
    (tmp_path / "model" / "config.json").write_text("{}")
    check_model_location("model.name_or_path", path, whole_model=True)


def test_loading_an_adapter_folder_as_a_model_from_python_is_refused_before_transformers_reads_it(tmp_path):
    from transformers import AutoModelForCausalLM

    from lit_rlhf.models.loading import from_pretrained

    path = adapter_folder(tmp_path / "adapter")
    with pytest.raises(ConfigError, match="holds a peft adapter"):
        from_pretrained(AutoModelForCausalLM.from_pretrained, path, key="teacher.name_or_path")


def test_a_run_folder_given_as_a_model_points_to_the_model_it_saved_or_to_its_export(tmp_path, monkeypatch):
    """A run directory as model.name_or_path (or teacher's, policy_path) said "Unrecognized model ... should have a
    `model_type` key in its config.json" or "has no tokenizer files"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rl_run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "rl_run" / "checkpoints" / "last.ckpt").write_bytes(b"")
    export = ("is a run's folder, not a model folder; export its checkpoint (python -m lit_rlhf.export "
              "rl_run/checkpoints/last.ckpt OUT_DIR{}) and give OUT_DIR (ckpt_path=rl_run/checkpoints/last.ckpt "
              "resumes or evaluates it).")
    for key, folder, flag in (("model.name_or_path", "rl_run", ""), ("policy_path", "rl_run/checkpoints", ""),
                              ("model.adapter_path", "rl_run", " --adapter-only")):
        with pytest.raises(ConfigError) as caught:
            check_model_location(key, folder)
        assert str(caught.value) == f"{key}={folder!r} {export.format(flag)}"
    (tmp_path / "sft_run" / ".hydra").mkdir(parents=True)
    (tmp_path / "sft_run" / "policy").mkdir()
    (tmp_path / "sft_run" / "policy" / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"^teacher.name_or_path='sft_run' is a run's folder, not a model folder; "
                                          r"give the model it saved: sft_run/policy\.$"):
        check_model_location("teacher.name_or_path", "sft_run")
    check_model_location("teacher.name_or_path", "sft_run/policy")  # the saved model itself passes
    (tmp_path / "rl_run" / "config.json").write_text("{}")  # a model saved into a folder that also holds checkpoints
    check_model_location("model.name_or_path", "rl_run")
