"""bench/gpu.py's CPU path: every implementation runs the stated work on the embedded model and lands in the table;
without a CUDA device the GPU run is one line."""

import importlib.util
import json

import pytest
import torch

from tests.apps import ROOT, run_app


@pytest.mark.integration
def test_the_cpu_path_measures_in_a_fork_of_its_server_and_writes_the_table(tmp_path):
    """gpu.py runs each measurement in a process of its own, here forked from a server that imported the libraries
    (the default on a GPU), and tables it; one implementation here (--impls), the commands of all of them run in this
    process in the next test."""
    done = run_app("bench/gpu.py", "--device", "cpu", "--shapes", "tiny", "--algos", "grpo", "--impls", "floor",
                   "--steps", "1", "--warmup", "0", "--new-tokens", "8", "--skip-checks", "--processes", "forked",
                   "--out", str(tmp_path), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    measured = {(run["algo"], run["impl"]): run["result"] for run in data["runs"]}
    assert measured.keys() == {("grpo", "floor")}
    assert ("grpo", "lit_rlhf eager") not in gpu_module().implementations("grpo", "cpu")  # on a CPU: the default
    for (algo, impl), result in measured.items():
        assert "error" not in result, (algo, impl, result)
        assert result["device"] == "cpu" and result["algo"] == algo and result["wall_s"] > 0
        assert result["tokens_per_s"] * result["step_s"] == pytest.approx(8 * 4 * 8)  # 32 responses x 8 tokens
    table = (tmp_path / "gpu_check.md").read_text()
    assert table.count("| tiny |") == len(measured) and "1.00x" in table  # each floor against itself


@pytest.mark.integration
@pytest.mark.parametrize(("algo", "impl"), [("rloo", "lit_rlhf"), ("rloo", "floor"), ("ppo", "lit_rlhf"),
                                           ("ppo", "floor"), ("grpo", "lit_rlhf"), ("grpo", "floor")])
def test_each_implementation_does_the_stated_work(algo, impl):
    """The commands gpu.py runs, run in this process."""
    command = gpu_module().implementations(algo, "cpu")[impl]
    done = run_app(f"bench/{command[1]}", *command[2:], "--model", "tiny", "--steps", "1", "--warmup", "0",
                   "--new-tokens", "8", cwd=ROOT / "bench")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["algo"] == algo and result["tokens_per_s"] * result["step_s"] == pytest.approx(8 * 4 * 8)


@pytest.mark.integration
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_an_unknown_implementation_is_one_line(tmp_path):
    done = run_app("bench/gpu.py", "--device", "cpu", "--shapes", "tiny", "--algos", "rloo", "--impls", "vllm",
                   "--out", str(tmp_path), cwd=ROOT)
    assert done.returncode == 1 and done.stderr.strip().startswith(
        "error: --impls 'vllm' is not an implementation measured for --algos rloo on cpu; choose from: floor,")


@pytest.mark.integration
def test_the_gpu_run_without_a_gpu_is_one_line():
    done = run_app("bench/gpu.py", cwd=ROOT)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().startswith("error: --device cuda, but torch sees no CUDA device")


def gpu_module():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "bench" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_data(rows, checks=None, **settings):
    return {"device_name": "GPU", "dtype": "bfloat16", "steps": 5, "warmup": 2, "new_tokens": 32, "minutes": 1.0,
            "runs": [{"shape": s, "algo": a, "impl": i, "result": {"eps": eps}} for s, a, i, eps in rows],
            "correctness": checks or {"summary": "not run (--skip-checks)", "exit_code": None}, **settings}


def test_merge_replaces_the_rows_measured_again_in_place_and_keeps_the_rest():
    gpu = gpu_module()
    earlier = run_data([("160m", "rloo", "lit_rlhf", 1.0), ("160m", "rloo", "floor", 2.0), ("1b", "grpo", "trl", 3.0)],
                       checks={"summary": "6 passed", "exit_code": 0})
    now = run_data([("1b", "grpo", "trl", 4.0), ("160m", "rloo", "lit_rlhf", 5.0), ("1b", "rloo", "floor", 6.0)])
    joined = gpu.merged(earlier, now)
    assert [(r["shape"], r["impl"], r["result"]["eps"]) for r in joined["runs"]] == [
        ("160m", "lit_rlhf", 5.0), ("160m", "floor", 2.0), ("1b", "trl", 4.0), ("1b", "floor", 6.0)]
    assert joined["correctness"]["summary"] == "6 passed"  # this run skipped the checks: the earlier pass stays
    assert joined["minutes"] == 2.0 and joined["joined_runs"] == 2
    failed = {"summary": "1 failed", "exit_code": 1, "failed": ["FAILED tests/device/x.py::test_y"]}
    assert gpu.merged(earlier, run_data([], checks=failed))["correctness"] == failed
    with pytest.raises(SystemExit, match="steps was 5 and is 3 now; rerun with the earlier one"):
        gpu.merged(earlier, run_data([], steps=3))


@pytest.mark.integration
def test_no_measurement_starts_past_max_minutes_and_merge_needs_earlier_results(tmp_path):
    command = ["bench/gpu.py", "--device", "cpu", "--shapes", "tiny", "--algos", "rloo", "--skip-checks", "--out",
               str(tmp_path)]
    done = run_app(*command, "--merge", cwd=ROOT)
    assert done.returncode == 1 and done.stderr.strip().startswith("error: --merge, but there are no earlier results")
    done = run_app(*command, "--algos", "distill", cwd=ROOT)
    assert done.returncode == 1 and done.stderr.strip().startswith("error: --algos distill is a row of --suite ext")
    done = run_app(*command, "--max-minutes", "0", cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = json.loads((tmp_path / "gpu_check.json").read_text())["runs"]
    expected = len(gpu_module().implementations("rloo", "cpu"))  # the floor, lit_rlhf, and TRL where it is installed
    assert [run["result"] for run in runs] == [{"error": "not run: past --max-minutes 0"}] * expected


@pytest.mark.integration
def test_the_extended_suite_measures_distillation_with_the_teachers_share(tmp_path):
    """One row of --suite extended (the full-vocabulary distillation row) through gpu.py: the teacher's time and
    weights, and the sampling phase beside its bound."""
    done = run_app("bench/gpu.py", "--device", "cpu", "--suite", "extended", "--shapes", "tiny", "tiny",
                   "--long-tokens", "8", "--new-tokens", "8", "--impls", "lit_rlhf generalized_jsd", "--skip-checks",
                   "--out", str(tmp_path), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "gpu_extended.json").read_text())
    [row] = data["runs"]
    result = row["result"]
    assert "error" not in result, result
    assert row["algo"] == "distill" and row["teacher"] == "tiny" and result["divergence"] == "generalized_jsd"
    assert 0 < result["teacher_s"] < result["step_s"] and result["teacher_weights_mib"] > 0
    assert row["bound_tokens_per_s"] > 0 and data["bandwidth_gbs"] > 0
    assert "of the step" in (tmp_path / "gpu_extended.md").read_text()


@pytest.mark.integration
def test_the_extended_suite_measures_the_long_responses_first(tmp_path):
    command = ["bench/gpu.py", "--device", "cpu", "--suite", "extended", "--shapes", "tiny", "tiny", "--long-tokens",
               "16", "8", "--new-tokens", "4", "--max-minutes", "0", "--skip-checks", "--out", str(tmp_path)]
    done = run_app(*command, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads((tmp_path / "gpu_extended.json").read_text())["runs"]
    assert [(r["algo"], r["impl"], r["new_tokens"]) for r in runs[:4]] == [
        ("grpo", "floor", 16), ("grpo", "lit_rlhf", 16), ("grpo", "floor", 8), ("grpo", "lit_rlhf", 8)]
    assert {"ppo", "distill"} <= {r["algo"] for r in runs}
    assert {r["result"]["error"] for r in runs} == {"not run: past --max-minutes 0"}
    # --algos keeps those rows alone; an --impls name that is no row of the suite is an error, not an empty run
    done = run_app(*command, "--algos", "rloo", "--impls", "floor", "lit_rlhf eager", cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads((tmp_path / "gpu_extended.json").read_text())["runs"]
    assert [(r["algo"], r["impl"], r["new_tokens"]) for r in runs] == [
        ("rloo", "floor", 4), ("rloo", "lit_rlhf eager", 4), ("rloo", "floor", 8)]
    # --tokens keeps the rows of those new tokens alone
    done = run_app(*command, "--algos", "rloo", "grpo", "--impls", "floor", "--tokens", "8", cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads((tmp_path / "gpu_extended.json").read_text())["runs"]
    assert [(r["algo"], r["impl"], r["new_tokens"]) for r in runs] == [("grpo", "floor", 8), ("rloo", "floor", 8)]
    done = run_app(*command, "--impls", "floor,lit_rlhf eager", cwd=ROOT)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: --impls 'floor,lit_rlhf eager' is not a row of --suite extended")
    done = run_app(*command, "--tokens", "12", cwd=ROOT)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: --tokens 12 is the new tokens of no row of --suite extended")


def test_the_sampling_bound_is_the_bytes_a_decoding_step_reads_over_the_bandwidth():
    extended = extended_module()
    # 1 GB of weights, 1 kB of keys and values per cached token; 11 new tokens: a mean context of 5 + 5 tokens
    sizes = {"weight_bytes": 1e9, "kv_bytes_per_token": 1e3}
    assert extended.decoding_bound(sizes, 11, 100.0) == pytest.approx(32 / ((1e9 + 32 * 10 * 1e3) / 100e9))
    tiny = extended.model_bytes(str(ROOT / "lit_rlhf" / "assets" / "tiny-pythia"), 2)
    assert tiny["kv_bytes_per_token"] == 2 * 4 * 128 * 2  # keys and values x 4 layers x 128 wide x bf16


def extended_module():
    spec = importlib.util.spec_from_file_location("bench_gpu_extended", ROOT / "bench" / "gpu_extended.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_row_is_set_against_the_floor_measured_on_its_own_day():
    """Merged results join rows of several days; an eager step is bound by the host's kernel launches, which differ
    between machines, so "vs floor" compares rows of the same day only and each row names its day."""
    def row(impl, eps, day):
        return {"shape": "s", "algo": "rloo", "impl": impl, "new_tokens": 32, "bound_tokens_per_s": 1000.0,
                "result": {"steps": 3, "eps": eps, "step_s": 1.0, "tokens_per_s": 100.0, "peak_gpu_mib": 1.0,
                           "phases_s": {"generation": 0.5}, "peak_phase": "other", "measured": day}}

    data = {"device": "cuda", "device_name": "GPU", "versions": {}, "dtype": "bfloat16", "bandwidth_gbs": 1.0,
            "minutes": 1.0, "correctness": {"summary": "not run"},
            "runs": [row("floor", 10.0, "2026-01-02"), row("lit_rlhf", 30.0, "2026-01-02"),
                     row("lit_rlhf eager", 12.0, "2026-01-01")]}
    lines = extended_module().table(data)
    by_impl = {line.split(" | ")[2]: line.split(" | ") for line in lines if line.startswith("| s |")}
    assert by_impl["lit_rlhf"][6] == "3.00x" and by_impl["lit_rlhf"][-1] == "2026-01-02 |"
    assert by_impl["lit_rlhf eager"][6] == "" and by_impl["lit_rlhf eager"][-1] == "2026-01-01 |"


def test_the_cuda_graphs_a_step_records_are_counted_and_tabled(monkeypatch):
    """A compiled step that records a CUDA graph again (a static input at a new address, a new shape) pays a warm-up
    and a capture; lit_step.py counts the recordings of torch's CUDA graph trees per measured step."""
    from torch._inductor import cudagraph_trees

    recorded = []
    monkeypatch.setattr(cudagraph_trees.CUDAGraphTreeManager, "record_function",
                        lambda manager, inputs, function_id: recorded.append(function_id) or "outputs")
    spec = importlib.util.spec_from_file_location("bench_lit_step", ROOT / "bench" / "lit_step.py")
    lit_step = importlib.util.module_from_spec(spec)
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    spec.loader.exec_module(lit_step)
    counter = lit_step.GraphRecordings.install()
    assert lit_step.GraphRecordings.install() is counter  # wrapped once, however many timers install it
    manager = object()
    assert cudagraph_trees.CUDAGraphTreeManager.record_function(manager, [], 7) == "outputs"
    cudagraph_trees.CUDAGraphTreeManager.record_function(manager, [], 8)
    assert counter.count == 2 and recorded == [7, 8]

    data = {"device": "cuda", "device_name": "GPU", "versions": {}, "dtype": "bfloat16", "bandwidth_gbs": 1.0,
            "minutes": 1.0, "correctness": {"summary": "not run"}, "runs": [
                {"shape": "s", "algo": "rloo", "impl": impl, "new_tokens": 32, "bound_tokens_per_s": None,
                 "result": {"steps": 3, "eps": 1.0, "step_s": 1.0, "tokens_per_s": 1.0, "peak_gpu_mib": 1.0,
                            "phases_s": {}, "measured": "2026-01-01", **extra}}
                for impl, extra in [("floor", {}), ("lit_rlhf", {"cuda_graph_recordings_per_step": 2 / 3})]]}
    rows = {line.split(" | ")[2]: line.split(" | ") for line in extended_module().table(data) if "| s |" in line}
    assert rows["lit_rlhf"][-2] == "0.7" and rows["floor"][-2] == ""
