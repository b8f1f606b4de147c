"""Figures the docs quote from a benchmark are the benchmark's results file, never retyped: every
`<!-- results:NAME -->` block of README.md and docs/*.md holds bench/results/NAME.md as the benchmark wrote it."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_results_block_in_the_docs_is_its_results_file():
    block = re.compile(r"<!-- results:(\w+) -->\n(.*?)\n?<!-- /results -->", re.S)
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    blocks = [(page, name, text) for page in pages for name, text in block.findall(page.read_text())]
    assert {name for _, name, _ in blocks} >= {"algorithms", "calculator"}
    for page, name, text in blocks:
        results = (ROOT / "bench" / "results" / f"{name}.md").read_text().strip()
        assert text.strip() == results, f"{page.name}: the {name} block differs from bench/results/{name}.md"


def load_fingerprint_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_fingerprint", ROOT / "bench" / "fingerprint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCHMARK = '''"""Rows.

    python bench.py   # ~30 min on 2 CPU cores"""
STEPS = 150  # RL steps


def rows():
    """The rows."""
    return {"title": "a table", "steps": STEPS}
'''


def test_a_fingerprint_moves_with_the_recorded_digits_not_with_a_rounding_step():
    fingerprint = load_fingerprint_module()
    recorded = {"0/objective/kl": 0.0, "1/objective/kl": 0.00802536, "1/objective/entropy": 6.35521}
    assert fingerprint.moved(recorded, dict(recorded)) == []
    # one step of the sixth significant digit: a float32 sum that rounds the other way
    assert fingerprint.moved(recorded, {**recorded, "1/objective/kl": 0.00802537, "1/objective/entropy": 6.35520}) == []
    assert fingerprint.moved(recorded, {**recorded, "1/objective/kl": 0.00802587}) == ["1/objective/kl"]
    assert fingerprint.moved(recorded, {**recorded, "1/objective/entropy": 6.35519}) == ["1/objective/entropy"]
    assert fingerprint.moved({"x": 0.0861188}, {"x": 0.0861189}) == []  # 1e-7 apart, as floats a hair over
    assert fingerprint.moved({"x": 0.0861188}, {"x": 0.0861190}) == ["x"]
    assert fingerprint.moved(recorded, {**recorded, "0/objective/kl": 1e-9}) == ["0/objective/kl"]
    assert fingerprint.moved(recorded, {k: v for k, v in recorded.items() if k != "0/objective/kl"}) == [
        "0/objective/kl"]


def test_a_machine_whose_kernels_round_otherwise_is_checked_against_its_own_fingerprint(tmp_path, monkeypatch):
    """--also-here adds this machine's fingerprint to every record made on other kernels (not to one made here), and
    the test compares a run with the record's fingerprint for the kernels it runs on."""
    fingerprint = load_fingerprint_module()
    there, here = {"1/objective/kl": 0.00802587}, {"1/objective/kl": 0.00802536}
    registry = {"made_there": {"script": "bench/a.py", "training": there},
                "made_here": {"script": "bench/b.py", "kernels": "AVX2, AuthenticAMD", "training": here}}
    monkeypatch.setattr(fingerprint, "REGISTRY", tmp_path / "fingerprints.json")
    fingerprint.REGISTRY.write_text(json.dumps(registry))
    monkeypatch.setattr(fingerprint, "kernels", lambda: "AVX2, AuthenticAMD")
    monkeypatch.setattr(fingerprint, "measure", lambda: dict(here))
    assert fingerprint.record_here() == here
    written = json.loads(fingerprint.REGISTRY.read_text())
    assert written["made_there"] == {**registry["made_there"], "training_on": {"AVX2, AuthenticAMD": here}}
    assert written["made_here"] == registry["made_here"]
    assert fingerprint.expected_training(written["made_there"], "AVX2, AuthenticAMD") == here
    assert fingerprint.expected_training(written["made_there"], "AVX512, GenuineIntel") == there  # its own
    # a results file made here by the same code holds the other kernels' fingerprint too, and is checked with it there
    fingerprint.record("made_later", script=ROOT / "bench" / "fingerprint.py")
    later = json.loads(fingerprint.REGISTRY.read_text())["made_later"]
    assert later["kernels"] == "AVX2, AuthenticAMD" and later["training"] == here
    assert fingerprint.expected_training(later, "AVX512, GenuineIntel") == there
    assert fingerprint.expected_training(later, "AVX2, AuthenticAMD") == here


def test_the_code_hash_moves_with_what_a_benchmark_runs_not_with_its_docstrings_comments_or_layout(tmp_path):
    fingerprint = load_fingerprint_module()

    def code_sha256(text):
        (tmp_path / "bench.py").write_text(text)
        return fingerprint.code_sha256(tmp_path / "bench.py")

    written = code_sha256(BENCHMARK)
    reworded = (BENCHMARK.replace("~30 min", "~70 min").replace('"""The rows."""', '"""The table\'s rows."""')
                .replace("  # RL steps", "").replace('"title": "a table", ', '"title": "a table",\n            '))
    assert reworded != BENCHMARK and code_sha256(reworded) == written
    assert code_sha256(BENCHMARK.replace("STEPS = 150", "STEPS = 300")) != written
    assert code_sha256(BENCHMARK.replace('"a table"', '"the table"')) != written  # a string it writes
    # the check that it takes no options computes nothing; another call in its place does
    checked = BENCHMARK + 'if __name__ == "__main__":\n    takes_no_options(__doc__)\n    rows()\n'
    assert code_sha256(checked) == code_sha256(BENCHMARK + 'if __name__ == "__main__":\n    rows()\n')
    assert code_sha256(BENCHMARK.replace("STEPS =", "from command_line import takes_no_options\nSTEPS =")) == written
    assert code_sha256(checked.replace("takes_no_options(", "print(")) != code_sha256(checked)


def test_every_script_of_bench_and_scripts_reads_its_command_line():
    """Every script of bench/ and scripts/ that runs from the command line parses its arguments (argparse) or refuses
    any (bench/command_line.py): `--help` printed the usage of none of them and started a run of many minutes that
    rewrote its results files (or the embedded assets, the settings tables)."""
    import ast

    for script in sorted([*(ROOT / "bench").glob("*.py"), *(ROOT / "scripts").glob("*.py")]):
        text = script.read_text()
        if 'if __name__ == "__main__":' not in text:
            continue
        nodes = list(ast.walk(ast.parse(text)))
        calls = {node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                 for node in nodes if isinstance(node, ast.Call)}
        assert calls & {"parse_args", "takes_no_options"}, (
            f"{script.name} reads no arguments: parse them with argparse (in bench/, where it takes none: "
            f"command_line.takes_no_options(__doc__))")


# results written before their benchmarks recorded what the code trained: rerunning one stamps it (and then it
# must leave this set)
NOT_YET_FINGERPRINTED: set[str] = set()
# results made by code whose logprobs differed from today's in their last bits (step 1's KL in the fifth digit): their
# figures are the earlier code's until their benchmark runs again (then it must leave this set); their scripts may
# change meanwhile
RERUN_PENDING: set[str] = set()
# measured on the device; the test suite's own timings; operations counted per decoding step; a step's live memory
# counted on a CPU; a loss beside TRL's on fixed logits and the embedded model's output-layer geometry (no training
# run of lit_rlhf's behind them)
NO_FINGERPRINT = {"gpu_check", "gpu_extended", "phase_profile_cuda", "test_suite", "gkd_loss_vs_trl",
                  "tool_name_ceiling", "decode_ops", "server_sync", "step_memory"}


@pytest.mark.integration
def test_every_results_file_was_made_by_the_code_and_the_benchmark_script_of_today(tmp_path):
    """A change that moves what training computes (or edits a benchmark) leaves the figures it made behind: the
    short embedded run of bench/fingerprint.py, run here as a user runs train.py, must give the numbers each results
    file recorded, and each benchmark script must be the one that wrote them; otherwise the failure names the
    benchmark to rerun."""
    from tests.apps import run_app

    fingerprint = load_fingerprint_module()
    registry = json.loads(fingerprint.REGISTRY.read_text())
    results = {p.stem for p in (ROOT / "bench" / "results").glob("*.md")}
    assert set(registry) | NOT_YET_FINGERPRINTED | NO_FINGERPRINT == results
    assert not set(registry) & NOT_YET_FINGERPRINTED, "fingerprinted now: remove from NOT_YET_FINGERPRINTED"
    assert {"algorithms", "sweep", "evaluation", "preferences"} <= set(registry)  # the README's and first docs' figures
    run = run_app("train.py", *fingerprint.ARGS, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    today = fingerprint.training_metrics(tmp_path / "run")
    assert len(today) == 10
    here = fingerprint.kernels()
    for name, made in sorted(registry.items()):
        expected = fingerprint.expected_training(made, here)
        script = ROOT / made["script"]
        rerun = f"rerun `python {made['script']}`"
        script_moved = not script.is_file() or fingerprint.code_sha256(script) != made["code_sha256"]
        if name in RERUN_PENDING:  # known to be stale, its script may change before it runs again
            assert script_moved or fingerprint.moved(expected, today), (
                f"{name} is current: remove it from RERUN_PENDING")
            continue
        assert not script_moved, f"bench/results/{name} was made by another version of {made['script']}: {rerun}"
        assert not fingerprint.moved(expected, today), (
            f"bench/results/{name} was made by code that trained differently: {rerun}")


@pytest.fixture
def build_large_teacher(monkeypatch):
    """scripts/build_large_teacher.py as a module (it imports its sibling build scripts)."""
    import sys

    monkeypatch.setattr(sys, "path", [str(ROOT / "scripts"), *sys.path])
    import build_large_teacher

    return build_large_teacher


def test_the_large_teacher_results_name_the_command_that_rebuilds_the_embedded_teacher(build_large_teacher):
    """scripts/build_large_teacher.py's defaults are the embedded teacher's settings, and its results line names the
    command as typed: the settings that differ from them, never a folder."""
    import argparse

    build = build_large_teacher
    defaults = argparse.Namespace(**build.DEFAULTS, out=Path("/elsewhere"), base_dir=Path("/kept"))
    assert build.command_line(defaults) == "python scripts/build_large_teacher.py"
    other = argparse.Namespace(**{**vars(defaults), "steps": 1500, "rl_lr": 1e-3})
    assert build.command_line(other) == "python scripts/build_large_teacher.py --steps 1500 --rl-lr 0.001"
    config = json.loads((ROOT / "lit_rlhf" / "assets" / "tiny-calculator-teacher-large" / "config.json").read_text())
    assert config["hidden_size"] == build.DEFAULTS["hidden"] and config["num_hidden_layers"] == build.DEFAULTS["layers"]


def test_the_large_teacher_results_say_when_the_pretraining_was_an_earlier_runs(build_large_teacher):
    """A rebuild that reuses the kept pre-trained base takes minutes where a full one takes much longer: the results
    line says which it was, and the pre-training's own time where it was recorded."""
    build = build_large_teacher
    fresh = {"pretraining_seconds": 1210.0, "pretraining_reused": False, "rl_seconds": 150.0}
    assert build.time_taken(fresh) == "pre-training 20 min, RL 2 min"
    kept = {**fresh, "pretraining_reused": True}
    assert build.time_taken(kept) == "pre-training 20 min (an earlier run's, kept), RL 2 min"
    unrecorded = {**kept, "pretraining_seconds": None}
    assert build.time_taken(unrecorded) == "pre-training of unrecorded length (an earlier run's, kept), RL 2 min"
