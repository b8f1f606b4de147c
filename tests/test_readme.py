"""The README's plain-Lightning example runs as written (fewer steps)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


@pytest.mark.integration
def test_use_without_hydra_example_trains(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = README.read_text()
    section = text[text.index("**Inside your own Lightning project.**"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "rl_steps=20" in code
    namespace: dict = {}
    exec(compile(code.replace("rl_steps=20", "rl_steps=4"), "README.md", "exec"), namespace)
    assert namespace["module"].episode == 4 * 8 * 4
    assert "Sample completions before and after training" in capsys.readouterr().out
    run = tmp_path / "runs" / "rloo" / "version_0"  # the logger's version folder, beside its metrics.csv
    assert (run / "samples.jsonl").exists() and (run / "curves.png").exists() and (run / "metrics.csv").exists()
    assert (tmp_path / "runs" / "rloo-policy" / "model.safetensors").exists()
    assert "RLOOModule for 4 RL steps" in (tmp_path / "runs" / "rloo-policy" / "README.md").read_text()


def test_readme_opens_with_the_two_make_commands():
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), re.S).group(1)
    assert first_block.splitlines()[0].startswith("make train") and first_block.splitlines()[1].startswith("make test")


def installed_wheel(target: Path) -> Path:
    """lit_rlhf built as a wheel (from a copy of the checkout: nothing is written into it) and installed into
    `target`, without its dependencies (this environment has them); the folder to put on PYTHONPATH."""
    import shutil
    import subprocess
    import sys

    source = target.parent / "source"
    shutil.copytree(ROOT / "lit_rlhf", source / "lit_rlhf", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                            str(target.parent / "wheel"), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (target.parent / "wheel").glob("lit_rlhf-*.whl")
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                                str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return target


@pytest.mark.integration
def test_the_plain_lightning_example_and_the_reward_server_run_from_an_installed_wheel(tmp_path):
    """From a wheel installed outside the checkout, as a user runs them: the README's Lightning script, with none
    of Lightning's tips and warnings that a lit_rlhf user cannot act on (the CLI silences the same ones), and
    `python -m lit_rlhf.serve`, whose configs ship in the package."""
    import os
    import subprocess
    import sys

    site = installed_wheel(tmp_path / "site")
    work = tmp_path / "work"
    work.mkdir()
    text = README.read_text()
    section = text[text.index("**Inside your own Lightning project.**"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1).replace("rl_steps=20", "rl_steps=2")
    (work / "example.py").write_text("import lit_rlhf\nprint('lit_rlhf from', lit_rlhf.__file__)\n" + code)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(site)}
    result = subprocess.run([sys.executable, "example.py"], cwd=work, capture_output=True, text=True, timeout=600,
                            env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"lit_rlhf from {site}" in result.stdout
    output = result.stdout + result.stderr
    # "will override existing callbacks passed to Trainer": the example passes no bar or summary the module replaces
    for noise in ("litlogger", "`max_epochs` was not set", "LeafSpec", "weights_only", "will override existing"):
        assert noise not in output, noise
    served = subprocess.run([sys.executable, "-m", "lit_rlhf.serve", "reward=vader", "--cfg", "job"], cwd=work,
                            capture_output=True, text=True, timeout=300, env=env)
    assert served.returncode == 0, served.stderr[-3000:]
    assert "lit_rlhf.rewards.VaderSentiment" in served.stdout
