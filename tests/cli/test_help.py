"""Each app's --help: its usage and the config groups it reads, each with all its options, and no other group."""

import os
import re
import signal
import subprocess
import sys

import pytest
import yaml

from tests.apps import BASE_ENV, ROOT, run_app

APPS = {"train": "python train.py", "evaluate": "python evaluate.py", "train_sft": "python train_sft.py",
        "train_dpo": "python train_dpo.py", "train_kto": "python train_kto.py",
        "train_reward_model": "python train_reward_model.py",
        "serve": "python -m lit_rlhf.serve"}  # config name: the command
# groups of an app's defaults list its help leaves out: evaluate.py's teacher group is there only so that algo=distill
# composes and is refused in one line (evaluate.py never loads a teacher)
NOT_LISTED = {"evaluate": {"teacher"}}


def chosen_groups(app: str) -> list[str]:
    """The groups of the app's defaults list that the command line chooses (`model: tiny`); not those set by
    package (`pairs@data`), chosen by another group (`optional sft_tuning: ${model}`) or of Hydra's own."""
    defaults = yaml.safe_load((ROOT / "conf" / f"{app}.yaml").read_text())["defaults"]
    return [key for entry in defaults if isinstance(entry, dict)
            for key in entry if "@" not in key and not key.startswith(("optional ", "override "))]


def listed_groups(help_text: str) -> dict[str, str]:
    """{group: its options' text, continuation lines joined} of the help's `Groups` block."""
    block = help_text.split("Groups (group=option):\n", 1)[1].split("\n\n", 1)[0]
    groups: dict[str, str] = {}
    for line in block.splitlines():
        if match := re.match(r"  (\S+) +(.*)", line):
            name, text = match.groups()
            groups[name] = text
        else:  # a continuation, indented to the options' column
            groups[name] += " " + line.strip()
    return groups


def options_of(group: str) -> list[str]:
    options = sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml") if not p.stem.endswith("_schema"))
    if group == "callbacks":
        return ["default"]  # the others are entries of `default`
    if group == "model":  # pythia-14m ... pythia-12b
        return [o for o in options if not o.startswith("pythia-") or o in ("pythia-14m", "pythia-12b")]
    return options


@pytest.mark.integration
@pytest.mark.parametrize("app", APPS)
def test_help_lists_the_groups_the_app_reads_with_every_option_and_no_other(app, tmp_path):
    command = APPS[app]
    module = command.startswith("python -m ")
    result = run_app(command.split()[-1] if module else f"{app}.py", "--help", cwd=tmp_path, module=module)
    assert result.returncode == 0, result.stderr[-2000:]
    help_text = result.stdout
    assert help_text.startswith(f"{command} ")
    assert "powered by Hydra" not in help_text and "algo/common" not in help_text
    groups = listed_groups(help_text)
    block = help_text.split("Groups (group=option):\n", 1)[1].split("\n\n", 1)[0].splitlines()
    column = 2 + max(map(len, groups)) + 1  # the options, continuations included, start in one column
    assert all(line[column - 1] == " " != line[column] for line in block), block
    assert sorted(groups) == sorted(set(chosen_groups(app)) - NOT_LISTED.get(app, set()))
    for group, text in groups.items():
        missing = [option for option in options_of(group) if not re.search(rf"\b{re.escape(option)}\b", text)]
        assert not missing, (app, group, missing)
    assert f"`{command} --cfg job`" in help_text and "\ntask_name: " in help_text  # and the composed config


@pytest.mark.integration
def test_info_whose_reader_has_gone_ends_quietly(tmp_path):
    """`python train.py --info | head -1`: Hydra logs --info, and each line written after the reader closed the pipe
    was a logging error's traceback on stderr. A command that only prints ends as cat does (SIGPIPE)."""
    env = {**os.environ, **BASE_ENV, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "--info"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # the reader goes before the first line (head -1 after it: the same for the later lines)
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == -signal.SIGPIPE and stderr == "", stderr[-2000:]
