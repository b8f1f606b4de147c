"""bench/phase_profile.py: the profiler's ops and kernels land in the phase whose range holds their start (the
backward's, on another thread, too), and the tool profiles a floor step end to end on the CPU."""

import importlib.util
import json

import pytest
from torch.autograd.profiler_util import FunctionEvent

from tests.apps import ROOT, run_app


def phase_profile():
    spec = importlib.util.spec_from_file_location("phase_profile", ROOT / "bench" / "phase_profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def event(name: str, start: float, end: float, thread: int = 1, parent: FunctionEvent | None = None,
          kernels_us: tuple[float, ...] = (), kernel_names: tuple[str, ...] = ()) -> FunctionEvent:
    e = FunctionEvent(id=id(name) + int(start), name=name, thread=thread, start_us=start, end_us=end)
    if parent is not None:
        e.set_cpu_parent(parent)
    for i, duration in enumerate(kernels_us):
        e.append_kernel(kernel_names[i] if kernel_names else f"{name}_kernel", 0, duration)
    return e


def test_ops_and_kernels_count_to_the_innermost_phase_open_when_they_started():
    linear, mul = event("aten::linear", 10, 20), event("aten::mul", 150, 160, thread=2)  # mul: the autograd thread's
    events = [
        event("phase:generation", 0, 100), event("phase:policy forward/backward", 100, 200),
        event("phase:optimizer", 180, 190),  # nested in the policy phase's range: the innermost counts
        linear, event("aten::mm", 11, 19, parent=linear, kernels_us=(7.0, 3.0)),  # an op inside an op: not counted
        mul, event("cudaLaunchKernel", 152, 153, thread=2, parent=mul, kernels_us=(40.0,)),  # a kernel's launch
        event("aten::add", 185, 186, kernels_us=(5.0,)),
        event("aten::sum", 250, 251, kernels_us=(1.0,)), event("aten::stack", 260, 261),  # outside every phase
    ]
    phases = phase_profile().attribute(events)
    assert phases["generation"]["ops"] == 1 and phases["generation"]["kernels"] == 2
    assert phases["generation"]["device_ms"] == pytest.approx(0.010)
    assert phases["generation"]["top"] == [["aten::linear", 0.01]]  # on a GPU: an op costs its kernels' time
    policy = phases["policy forward/backward"]
    assert policy["ops"] == 1 and policy["kernels"] == 1 and policy["device_ms"] == pytest.approx(0.040)
    assert policy["top"] == [["aten::mul", 0.04]]  # the op that launched it, not the launch
    assert phases["optimizer"]["ops"] == 1 and phases["optimizer"]["device_ms"] == pytest.approx(0.005)
    assert phases["other"]["ops"] == 2 and phases["other"]["kernels"] == 1


def test_on_a_cpu_an_outermost_op_costs_its_own_time_with_its_children():
    linear = event("aten::linear", 10, 30)
    events = [event("phase:reward", 0, 100), linear, event("aten::mm", 12, 28, parent=linear)]
    phases = phase_profile().attribute(events)  # no kernels anywhere: a CPU run
    assert phases["reward"]["top"] == [["aten::linear", 0.02]]
    assert phases["reward"]["kernels"] == 0 and phases["reward"]["device_ms"] == 0


def test_host_waits_are_the_ops_that_read_the_device_back_on_a_cpu_and_the_copies_to_the_host_on_a_gpu():
    item, index = event("aten::item", 10, 20), event("aten::index", 30, 40)
    cpu = [event("phase:update", 0, 100), item, event("aten::_local_scalar_dense", 11, 19, parent=item),
           index, event("aten::nonzero", 31, 35, parent=index), event("aten::mul", 50, 60)]
    assert phase_profile().attribute(cpu)["update"]["waits"] == 2  # x.item() and x[mask]: one each
    item, to = event("aten::item", 10, 20), event("aten::to", 30, 40)
    gpu = [event("phase:update", 0, 100), item,
           event("aten::_local_scalar_dense", 11, 19, parent=item, kernels_us=(1.0,),
                 kernel_names=("Memcpy DtoH (Device -> Pageable)",)),
           to, event("aten::copy_", 31, 39, parent=to, kernels_us=(2.0,),
                     kernel_names=("Memcpy DtoH (Device -> Pinned)",)),
           event("aten::copy_", 50, 60, kernels_us=(1.0,), kernel_names=("Memcpy HtoD (Pageable -> Device)",)),
           event("aten::_local_scalar_dense", 70, 71)]  # an optimizer's step counter: a host tensor, no copy
    assert phase_profile().attribute(gpu)["update"]["waits"] == 2  # x.item() and x.tolist(): a copy back each


def test_a_device_table_names_its_gpu_and_versions_and_a_cpu_table_its_device():
    phases = {"generation": {"wall_ms": 2.0, "ops": 3, "kernels": 1, "device_ms": 0.5, "waits": 1,
                             "python_calls": 9, "top": [["aten::mm", 0.25]], "callers": [["bench/floor.py:sample", 9]]}}
    run = {"impl": "floor", "algo": "rloo", "model": "pythia-160m", "dtype": "bfloat16", "new_tokens": 32,
           "device": "cuda", "steps": 3, "phases": phases}
    gpu = "NVIDIA H200, torch 2.11.0, transformers 5.17.0, peft 0.21.2, lightning 2.6.6"
    table = phase_profile().table([{**run, "gpu": gpu}], "python bench/phase_profile.py").splitlines()
    assert table[0].startswith(f"pythia-160m, rloo, 32 new tokens, bfloat16 on {gpu}; ")
    assert table[-1] == ("| floor | generation | 2.0 | 3 | 1 | 0.5 | 1 | 9 | aten::mm 0.25 | "
                         "`bench/floor.py:sample` 9 |")
    cpu = phase_profile().table([{**run, "device": "cpu"}], "python bench/phase_profile.py").splitlines()
    assert cpu[0].startswith("pythia-160m, rloo, 32 new tokens, bfloat16 on cpu; ")


@pytest.mark.integration
def test_a_floor_step_is_profiled_phase_by_phase_and_tabled(tmp_path):
    done = run_app("bench/phase_profile.py", "--impls", "floor", "--warmup", "0", "--steps", "2", "--new-tokens", "4",
                   "--out", str(tmp_path), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    [result] = json.loads((tmp_path / "phase_profile_cpu.json").read_text())["runs"]
    assert result["impl"] == "floor" and result["steps"] == 2
    phases = result["phases"]
    assert phases["generation"]["waits"] > 0  # generate() reads the device back each token (its stop check)
    for phase in ("generation", "policy forward/backward", "reference forward", "optimizer"):
        assert phases[phase]["wall_ms"] > 0 and phases[phase]["ops"] > 0 and phases[phase]["python_calls"] > 0
    assert phases["generation"]["ops"] > phases["reference forward"]["ops"]  # 4 decoding forwards against one
    assert "| floor | generation |" in (tmp_path / "phase_profile_cpu.md").read_text()


@pytest.mark.integration
def test_an_unknown_implementation_is_one_line(tmp_path):
    done = run_app("bench/phase_profile.py", "--impls", "floor", "lit_rlhf eagre", "--out", str(tmp_path), cwd=ROOT)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: --impls 'lit_rlhf eagre' is not an implementation of rloo")
    assert "'lit_rlhf eager'" in lines[0]  # the names to pick from
    assert not list(tmp_path.iterdir())  # nothing measured, nothing written
