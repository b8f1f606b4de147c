"""A model's location: a folder here, or a name that can name a Hugging Face Hub repository."""

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


def test_a_hub_shaped_name_whose_owner_is_a_folder_here_is_noted_as_a_path_that_folder_lacks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "rloo-policy").mkdir(parents=True)
    assert local_folder_note("runs/rloo") == " (If you meant a path: the folder 'runs' is here, but holds no 'rloo'.)"
    assert local_folder_note("runs/rloo-policy") == ""  # there: a path, nothing to note
    assert local_folder_note("EleutherAI/pythia-14m") == "" and local_folder_note("gpt2") == ""  # no such folder here
