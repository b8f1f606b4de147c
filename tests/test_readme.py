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
