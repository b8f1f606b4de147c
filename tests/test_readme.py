"""The README's plain-Lightning example runs as written (fewer steps)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


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
    assert (tmp_path / "runs" / "samples.jsonl").exists() and (tmp_path / "runs" / "curves.png").exists()


def test_readme_opens_with_the_two_make_commands():
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), re.S).group(1)
    assert first_block.splitlines()[0].startswith("make train") and first_block.splitlines()[1].startswith("make test")


def test_the_plain_lightning_example_prints_no_noise_the_user_cannot_act_on(tmp_path):
    """Run as a script, as a user runs theirs: none of Lightning's tips and warnings that a lit_rlhf user cannot
    act on (the CLI silences the same ones)."""
    import subprocess
    import sys

    text = README.read_text()
    section = text[text.index("**Inside your own Lightning project.**"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1).replace("rl_steps=20", "rl_steps=2")
    (tmp_path / "example.py").write_text(code)
    result = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    for noise in ("litlogger", "`max_epochs` was not set", "LeafSpec", "weights_only"):
        assert noise not in output, noise
