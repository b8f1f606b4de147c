"""Names that moved keep working at their old paths for one release, with a FutureWarning that names the new path;
the packages' own names load on first use, and a name that is in neither is an AttributeError."""

import importlib
import warnings

import pytest

from lit_rlhf.lazy_exports import MOVED, current_path

OLD_NAMES = [(module, name) for module, moved in MOVED.items() for name in moved]


@pytest.mark.parametrize(("module", "name"), OLD_NAMES, ids=[f"{m}.{n}" for m, n in OLD_NAMES])
def test_an_old_path_gives_the_moved_object_with_a_warning_naming_its_new_path(module, name):
    old = importlib.import_module(module)
    vars(old).pop(name, None)  # as in a fresh process: the first use warns
    new_path = current_path(f"{module}.{name}")
    assert new_path != f"{module}.{name}"
    new_module, _, _ = new_path.rpartition(".")
    with pytest.warns(FutureWarning, match=rf"{module}\.{name} moved to {new_path}; import it from there"):
        found = getattr(old, name)
    assert found is getattr(importlib.import_module(new_module), name)
    assert name in dir(old)


def test_hydra_builds_a_saved_config_that_names_an_old_path():
    """A run directory of the previous release keeps `_target_: lit_rlhf.models.VaderSentiment` in its config."""
    from hydra.utils import instantiate

    from lit_rlhf.rewards import VaderSentiment

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        reward = instantiate({"_target_": "lit_rlhf.models.VaderSentiment"})
    assert isinstance(reward, VaderSentiment)


def test_a_name_that_never_was_there_is_an_attribute_error_and_current_paths_are_left_alone():
    import lit_rlhf.models

    with pytest.raises(AttributeError, match="has no attribute 'WeightedSumm'"):
        lit_rlhf.models.WeightedSumm  # noqa: B018
    assert current_path("lit_rlhf.rewards.WeightedSum") == "lit_rlhf.rewards.WeightedSum"
    assert current_path("lit_rlhf.models.load_policy") == "lit_rlhf.models.load_policy"
    assert current_path("lit_rlhf.models.teacher.CausalLMTeacher") == "lit_rlhf.teachers.CausalLMTeacher"


def test_the_extending_guide_lists_every_moved_name():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    table = text.split("**Moved in this release.**", 1)[1]
    for module, moved in MOVED.items():
        assert f"`{module}." in table, module
        for name in moved:
            assert name in table, (module, name)
