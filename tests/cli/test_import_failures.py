"""A `_target_` that cannot be imported: the line says whether the module is not on the path, lacks the name, or
fails as it imports (a syntax error, a dependency not installed, an exception of its own)."""

import os
import sys

import pytest
from hydra.utils import get_object

from lit_rlhf.cli.import_failures import import_failure_line
from tests.apps import run_process
from tests.helpers import FAST, ROOT

MODULES = {
    "fine_module": "def score(prompts, completions):\n    return [0.0] * len(completions)\n",
    "unclosed": "def score(\n",
    "needs_a_dependency": "import no_such_dependency_xyz\n",
    "raises_on_import": "raise RuntimeError('set MY_TOKEN first')\n",
}
PATH_HINT = ("check its spelling and that its module is importable (on PYTHONPATH, e.g. PYTHONPATH=. python train.py "
             "...).")


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    for name, text in MODULES.items():
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in MODULES:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("target, line", [
    ("no_such_module_xyz.score", f"k='no_such_module_xyz.score' cannot be imported; {PATH_HINT}"),
    ("fine_module.scor", "k='fine_module.scor' cannot be imported: module 'fine_module' has no 'scor' (did you mean "
                         "'score'?)."),
    ("torch.optim.AdamWW", "k='torch.optim.AdamWW' cannot be imported: module 'torch.optim' has no 'AdamWW' (did "
                           "you mean 'AdamW'?)."),
    ("fine_module.score.x", "k='fine_module.score.x' cannot be imported: 'function' object has no attribute 'x'; "
                            "check its spelling."),
    ("unclosed.score", "k='unclosed.score' cannot be imported: unclosed.py, line 1: '(' was never closed "
                       "(SyntaxError); fix that file."),
    ("needs_a_dependency.score", "k='needs_a_dependency.score' cannot be imported: importing it needs the module "
                                 "'no_such_dependency_xyz', which is not installed here; install it, or fix the "
                                 "import in 'needs_a_dependency'."),
    ("raises_on_import.score", "k='raises_on_import.score' cannot be imported: importing 'raises_on_import' raised "
                               "RuntimeError: set MY_TOKEN first; fix that module (HYDRA_FULL_ERROR=1 prints its "
                               "traceback)."),
])
def test_the_line_says_why_the_target_cannot_be_imported(target, line, on_path):
    with pytest.raises(Exception) as err:
        get_object(target)
    assert import_failure_line("k", target, err.value) == line


@pytest.mark.integration
def test_the_apps_own_modules_failing_to_import_is_their_traceback_not_a_mistake_in_the_settings(tmp_path):
    """Once the config is composed the app imports torch and Lightning: a broken install there (a library's shared
    object missing) was `error: <its message> (check the command line's overrides)`, exit 2, a mistake in the settings,
    with an empty run directory left behind. Now it is the import's traceback, exit 1, and no run directory."""
    broken = tmp_path / "broken" / "lightning"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("libcudnn.so.9: cannot open shared object file")\n')
    result = run_process("train.py", *FAST, cwd=tmp_path, env={"PYTHONPATH": f"{broken.parent}{os.pathsep}{ROOT}"})
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == "ImportError: libcudnn.so.9: cannot open shared object file"
    assert "Traceback" in result.stderr and "overrides)" not in result.stderr
    assert not (tmp_path / "logs").exists()


@pytest.mark.integration
@pytest.mark.parametrize("signame, line", [
    ("SIGINT", "stopped by Ctrl-C as the run started: nothing was trained or written; run the same command again to "
               "start it."),
    ("SIGTERM", "stopped by SIGTERM as the run started: nothing was trained or written; run the same command again to "
                "start it.")])
def test_an_import_that_failed_after_a_stop_interrupted_it_is_said_as_the_stop(signame, line, tmp_path):
    """A Ctrl-C or SIGTERM in the middle of an import can leave a module half made, and the next import of it fails
    with an error of its own (numpy's RecursionError, pybind11's `type ... is already registered!`): that was a
    traceback, exit 1, which reads as a broken install. The error follows the stop: it is said as the stop."""
    broken = tmp_path / "broken" / "lightning"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        "import os, signal, time\n"
        "try:\n"
        f"    os.kill(os.getpid(), signal.{signame})\n"
        "    time.sleep(30)\n"
        "except BaseException:  # the stop, lost by the import it interrupted, which left its module half made\n"
        "    pass\n"
        "raise RecursionError('maximum recursion depth exceeded')\n")
    result = run_process("train.py", *FAST, cwd=tmp_path, env={"PYTHONPATH": f"{broken.parent}{os.pathsep}{ROOT}"})
    assert result.returncode == (130 if signame == "SIGINT" else 143), result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == line
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "logs").exists()
