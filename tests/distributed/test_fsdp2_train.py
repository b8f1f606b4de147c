"""`python train.py trainer=fsdp2` on 2 CPU processes (gloo), as a user runs it: sampling on gathered weights,
sharded checkpoints that resume exactly, export from a sharded checkpoint, and the one-line refusals."""

import csv
import os
import re
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from lit_rlhf.assets import TINY_PYTHIA
from lit_rlhf.export import load_from_checkpoint
from tests.apps import run_app, run_process
from tests.helpers import ROOT, save_reward_model

pytestmark = [pytest.mark.multi_rank, pytest.mark.integration]  # each test starts 2 ranks

FSDP2 = ["trainer=fsdp2", "trainer.accelerator=cpu", "trainer.devices=2"]
SHORT = ["algo.response_length=12", "data.batch_size=8", "callbacks.generation_samples=null",
         "callbacks.training_summary=null", "callbacks.evaluation=null", "callbacks.curves=null",
         "callbacks.histograms=null", "trainer.val_check_interval=2", "data.num_eval_prompts=8"]


def train(run_dir, *overrides, env=None):
    """train.py on the ranks the overrides ask for: rank zero in this process (run_app), the others started by
    Lightning's launcher; with `env` (variables a process reads at start) that this process lacks, rank zero in a
    process of its own too."""
    args = [f"hydra.run.dir={run_dir}", *SHORT, "+callbacks.dump._target_=tests.helpers.DumpTrainable",
            f"+callbacks.dump.path={run_dir}/dump", *overrides]
    if env is None or all(os.environ.get(name) == value for name, value in env.items()):
        result = run_app("train.py", *args, cwd=ROOT)
    else:
        result = run_process("train.py", *args, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    return torch.load(f"{run_dir}/dump/rank0.pt", weights_only=True)


def metric_rows(run_dir):
    """The logged training metrics per RL step, without wall-clock figures."""
    with open(f"{run_dir}/csv/metrics.csv") as f:
        rows = [row for row in csv.DictReader(f) if row.get("objective/scores")]
    return {int(r["step"]): {k: v for k, v in r.items() if v and k != "eps" and not k.startswith("time/")}
            for r in rows}


DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]
# AdamW's eps at 1e-6 where DDP's and FSDP2's weights are compared: a coordinate whose gradient is float32 noise (about
# 1e-9) would otherwise step by up to the learning rate in either direction (m / sqrt(v) is its sign), whichever order
# of sums a CPU's kernels take
STEADY_ADAMW = "+algo.optimizer.eps=1e-6"
# RLOO with the adaptive KL controller, which steers on the KL of the whole batch: the same on every rank
RLOO = ["algo.kl_controller.kind=adaptive", "algo.kl_controller.target=0.05", "algo.kl_controller.horizon=50",
        "algo.optimizer.lr=0.01", STEADY_ADAMW]
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # every launcher then runs each rank's matmuls alike, to the last bit


@pytest.fixture(scope="module")
def rloo_runs(tmp_path_factory):
    """3 RL steps of RLOO on 2 ranks under DDP and under FSDP2, shared by the tests that compare against them."""
    out = tmp_path_factory.mktemp("rloo")
    return {name: (out / name, train(out / name, "steps=3", *strategy, *RLOO, env=ONE_THREAD))
            for name, strategy in (("ddp", DDP), ("fsdp2", FSDP2))}


def assert_fsdp2_trains_as_ddp_does(ddp_dir, ddp, fsdp2_dir, fsdp2, atol=1e-4):
    """Same seeds, same prompts per rank: sampling on gathered weights draws the tokens DDP's replicas draw, and 3 RL
    steps end on the same weights (float32: the two sum the ranks' gradients in another order)."""
    assert ddp["trained"].keys() == fsdp2["trained"].keys() and ddp["trained"]
    for name, tensor in ddp["trained"].items():
        torch.testing.assert_close(fsdp2["trained"][name], tensor, atol=atol, rtol=0,
                                   msg=lambda message, name=name: f"{name}: {message}")
    ddp_rows, fsdp2_rows = metric_rows(ddp_dir), metric_rows(fsdp2_dir)
    assert len(ddp_rows) == 3 and ddp_rows.keys() == fsdp2_rows.keys()
    for step, row in ddp_rows.items():  # what was sampled and how it scored
        assert float(fsdp2_rows[step]["objective/scores"]) == pytest.approx(float(row["objective/scores"]), abs=1e-6)


def test_rloo_under_fsdp2_samples_and_trains_as_under_ddp_whose_ranks_stay_identical(rloo_runs):
    """DDP keeps its two replicas identical, each rank gets its own half of every global batch, the episodes count
    the global batch and rank zero logs one row per step; FSDP2 samples and trains what DDP does."""
    (ddp_dir, ddp), (fsdp2_dir, fsdp2) = rloo_runs["ddp"], rloo_runs["fsdp2"]
    ranks = [ddp, torch.load(ddp_dir / "dump" / "rank1.pt", weights_only=True)]
    assert ranks[0]["world_size"] == 2
    assert ranks[0]["trained"] and all("lora_" in k for k in ranks[0]["trained"])
    for key, tensor in ranks[0]["trained"].items():
        assert torch.equal(tensor, ranks[1]["trained"][key]), key
    assert ranks[0]["episode"] == ranks[1]["episode"] == 3 * 8 * 4  # steps x global prompts x rloo_k
    assert ranks[0]["kl_coef"] == ranks[1]["kl_coef"] != 0.05
    for step in range(3):
        zero, one = ranks[0]["prompts"][step], ranks[1]["prompts"][step]
        assert len(zero) == len(one) == 4 and not set(zero) & set(one)
    with open(ddp_dir / "csv" / "metrics.csv") as f:
        assert len([row for row in csv.DictReader(f) if row.get("objective/scores")]) == 3
    assert_fsdp2_trains_as_ddp_does(ddp_dir, ddp, fsdp2_dir, fsdp2)


def test_a_checkpoint_resumes_exactly_and_exports(tmp_path):
    """Checkpoints are directories of shards. A 4-step PPO run (its value head sharded beside the policy), resumed in
    a new directory from its step-2 checkpoint on the same 2 ranks, logs and trains what the uninterrupted run did,
    to the last digit: the ranks' responses stop at different lengths, so each rank must get its own random state
    back. (PPO's updates equal one process's in tests/distributed/test_fsdp2_equivalence.py, on a fixed rollout;
    sampling on gathered weights equals DDP's in the RLOO test above.) Export makes a Hugging Face model of the
    trained policy, from the sharded checkpoint and at the end of the run (export_dir=). (A checkpoint written as one
    full file resumes in the sharded loading test below.)"""
    longer = [a for a in SHORT if not a.startswith("algo.response_length")] + ["algo.response_length=32"]
    every_two = ["callbacks.model_checkpoint.every_n_train_steps=2", "callbacks.model_checkpoint.save_top_k=-1"]

    def run(run_dir, *extra):
        result = run_app("train.py", f"hydra.run.dir={run_dir}", "algo=ppo", "steps=4", *FSDP2, *longer, *every_two,
                         *extra, "+callbacks.dump._target_=tests.helpers.DumpTrainable",
                         f"+callbacks.dump.path={run_dir}/dump", cwd=ROOT)
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    whole_run = run(tmp_path / "whole", f"export_dir={tmp_path / 'at_end'}")
    console = whole_run.stdout
    assert "each rank read only its shards from the model files" in console + whole_run.stderr  # said at start
    step2 = tmp_path / "whole" / "checkpoints" / "step2.ckpt"
    assert step2.is_dir() and (step2 / "meta.pt").is_file() and len(list(step2.glob("*.distcp"))) == 2
    per_rank = torch.load(step2 / "meta.pt", weights_only=True)["rlhf_state"]["rng_per_rank"]
    assert len(per_rank) == 2 and not torch.equal(per_rank[0]["torch"], per_rank[1]["torch"])
    run(tmp_path / "resumed", f"ckpt_path={step2}")
    assert not list((tmp_path / "whole" / "checkpoints").glob(".*"))  # no partial or replaced checkpoint left behind

    whole_rows, resumed_rows = metric_rows(tmp_path / "whole"), metric_rows(tmp_path / "resumed")
    assert len(whole_rows) == 4 and sorted(resumed_rows) == sorted(whole_rows)[2:]
    for step in sorted(whole_rows)[2:]:  # RL steps 3 and 4, every metric
        assert resumed_rows[step] == whole_rows[step]
    # the console's score is the logged one (the mean over ranks), not rank zero's own
    printed = [float(line.split("| score ")[1].split()[0]) for line in console.splitlines() if "| score " in line]
    assert printed == [round(float(whole_rows[step]["objective/scores"]), 3) for step in sorted(whole_rows)]

    whole = torch.load(tmp_path / "whole" / "dump" / "rank0.pt", weights_only=True)["trained"]
    resumed = torch.load(tmp_path / "resumed" / "dump" / "rank0.pt", weights_only=True)["trained"]
    for name, tensor in whole.items():
        assert torch.equal(resumed[name], tensor), name
    last = tmp_path / "whole" / "checkpoints" / "last.ckpt"
    module = load_from_checkpoint(last)  # one process reads the shards whole
    for name, tensor in whole.items():
        assert torch.equal(module.state_dict()[name], tensor), name
    out = tmp_path / "exported"
    result = run_app("lit_rlhf.export", str(last), str(out), cwd=tmp_path, module=True)
    assert result.returncode == 0, result.stderr[-3000:]
    exported = AutoModelForCausalLM.from_pretrained(out).state_dict()
    at_end = AutoModelForCausalLM.from_pretrained(tmp_path / "at_end").state_dict()  # export_dir= of the run
    for name, tensor in module.policy.merge_and_unload().state_dict().items():
        torch.testing.assert_close(exported[name], tensor, atol=1e-6, rtol=0, msg=name)
        assert torch.equal(at_end[name], exported[name]), name


def test_sharded_loading_sampling_and_offload_train_what_whole_loading_trains(tmp_path):
    """Full fine-tuning, scored by a reward model. Every rank loading the whole models and sampling on gathered
    weights, against each rank reading its shards (the policy's, the reference's and the reward model's), sampling
    and scoring on the sharded models (blocks gathered as the forward reaches them) and keeping its shards and AdamW
    state CPU-offloaded, with a 1 MiB mmap threshold: the same samples, scores, metrics and weights, to the last bit.
    The latter writes its checkpoints as full files: a run resumed from its step-2 file continues exactly, and one
    process reads the final file whole. Either way each rank holds half of the reward model."""
    save_reward_model(tmp_path / "reward_model")
    full = ["model.lora=null", "steps=3", "callbacks.model_checkpoint.every_n_train_steps=2",
            "callbacks.model_checkpoint.save_top_k=-1", "reward=reward_model",
            f"reward.name_or_path={tmp_path / 'reward_model'}", f"reward.tokenizer_name_or_path={TINY_PYTHIA}",
            "reward.dtype=float32"]
    whole = train(tmp_path / "whole", *FSDP2, *full, "trainer.strategy.sharded_loading=false")
    sharded_settings = ["trainer.strategy.sharded_sampling=true", "trainer.strategy.cpu_offload=true",
                        "trainer.strategy.host_mmap_threshold_mib=1",
                        "trainer.strategy.save_distributed_checkpoint=false"]
    sharded = train(tmp_path / "sharded", *FSDP2, *full, *sharded_settings)
    resumed = train(tmp_path / "resumed", *FSDP2, *full, *sharded_settings,
                    f"ckpt_path={tmp_path / 'sharded' / 'checkpoints' / 'step2.ckpt'}")
    assert whole["trained"].keys() == sharded["trained"].keys() == resumed["trained"].keys()
    for name, tensor in whole["trained"].items():
        assert torch.equal(sharded["trained"][name], tensor), name
        assert torch.equal(resumed["trained"][name], tensor), name
    assert (tmp_path / "sharded" / "checkpoints" / "step2.ckpt").is_file()
    module = load_from_checkpoint(tmp_path / "sharded" / "checkpoints" / "last.ckpt")  # the full file, whole
    for name, tensor in whole["trained"].items():
        assert torch.equal(module.state_dict()[name], tensor), name
    whole_rows, sharded_rows = metric_rows(tmp_path / "whole"), metric_rows(tmp_path / "sharded")
    assert len(whole_rows) == 3
    for step, row in whole_rows.items():
        assert sharded_rows[step] == row
    for run, gathers in (("whole", True), ("sharded", False)):  # sharded sampling gathers no whole copy
        with open(tmp_path / run / "csv" / "metrics.csv") as f:
            assert any(r.get("time/gather_weights_s") for r in csv.DictReader(f)) == gathers, run
    for step, row in metric_rows(tmp_path / "resumed").items():
        assert row == sharded_rows[step]
    for run in (whole, sharded, resumed):
        local, total = run["reward_model_numel"]
        assert total > 0 and local <= total // 2 + 64  # rank 0's shard: half of every tensor's rows, rounded up


def test_distillation_under_fsdp2_shards_the_teacher_and_trains_as_under_ddp(tmp_path):
    """algo=distill on 2 ranks: under FSDP2 the teacher is sharded with the policy (each rank holds half of it, read
    by shards from its files) and scored on the rollout's gathered weights; samples, reverse KL and trained weights
    are DDP's (where each rank holds the whole teacher)."""
    from transformers import AutoTokenizer

    teacher = AutoModelForCausalLM.from_pretrained(TINY_PYTHIA)  # the student's weights, perturbed
    with torch.no_grad():
        head = teacher.get_output_embeddings().weight
        head.add_(0.5 * torch.randn(head.shape, generator=torch.Generator().manual_seed(0)))
    teacher.save_pretrained(tmp_path / "teacher")
    AutoTokenizer.from_pretrained(TINY_PYTHIA).save_pretrained(tmp_path / "teacher")
    distill = ["algo=distill", f"teacher.name_or_path={tmp_path / 'teacher'}", "steps=3", "algo.optimizer.lr=0.01",
               STEADY_ADAMW]
    ddp_dir, fsdp2_dir = tmp_path / "ddp", tmp_path / "fsdp2"
    ddp = train(ddp_dir, *DDP, *distill, env=ONE_THREAD)
    fsdp2 = train(fsdp2_dir, *FSDP2, *distill, env=ONE_THREAD)
    # 2e-4: the teacher's sharded forward adds its own float32 order to the gradients' (the scores of what was
    # sampled are compared within 1e-6)
    assert_fsdp2_trains_as_ddp_does(ddp_dir, ddp, fsdp2_dir, fsdp2, atol=2e-4)
    ddp_rows, fsdp2_rows = metric_rows(ddp_dir), metric_rows(fsdp2_dir)
    for step, row in ddp_rows.items():
        assert abs(float(row["distill/reverse_kl"])) > 0.01  # the teacher is not the student
        assert float(fsdp2_rows[step]["distill/reverse_kl"]) == pytest.approx(float(row["distill/reverse_kl"]),
                                                                              abs=1e-4)
    local, total = fsdp2["teacher_model_numel"]
    assert total > 0 and local < 0.51 * total and ddp["teacher_model_numel"] is None  # half, rows rounded up


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_two_torchrun_nodes(run_dir, env_overrides, cwd, timeout=400) -> tuple[list[int | None], list[str]]:
    """torchrun on 2 "nodes" of 1 CPU process each, on loopback and a fresh port; their exit codes and outputs (a
    launch that outlives `timeout` is killed and reported with code None)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(ROOT / "train.py"), "trainer=fsdp2",
               "trainer.accelerator=cpu", "trainer.devices=1", "trainer.num_nodes=2", f"hydra.run.dir={run_dir}",
               "steps=3", *SHORT, *RLOO, "+callbacks.dump._target_=tests.helpers.DumpTrainable",
               f"+callbacks.dump.path={run_dir}/dump"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), **env_overrides}
    nodes = [subprocess.Popen([*command[:3], f"--node_rank={rank}", *command[3:]], cwd=cwd, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for rank in (0, 1)]
    outputs = []
    for node in nodes:
        try:
            outputs.append(node.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for other in nodes:
                if other.poll() is None:
                    os.killpg(other.pid, 9)
            outputs.append(node.communicate()[0] + "\n(killed: timeout)")
    codes = [None if "(killed: timeout)" in out else node.returncode for node, out in zip(nodes, outputs, strict=True)]
    return codes, outputs


def test_two_nodes_launched_by_torchrun_train_what_two_local_ranks_train(tmp_path, rloo_runs):
    """The cluster path: torchrun on each of 2 "nodes" (1 CPU process each, on loopback), Lightning's
    TorchElasticEnvironment ranks them; the result is the single-node 2-process run's, bit for bit. Both nodes share
    hydra.run.dir, and whichever starts first writes Hydra's start files there: rank zero's run-directory guard
    must not take them for another run's (on a loaded machine the other node often comes first)."""
    for attempt in range(3):  # the free port may be taken between choosing it and binding it: choose again
        run_dir = tmp_path / f"nodes{attempt}"
        codes, outputs = launch_two_torchrun_nodes(run_dir, ONE_THREAD, tmp_path)
        if not any("address already in use" in out.lower() for out in outputs):
            break
    assert codes == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    two_nodes = [torch.load(run_dir / "dump" / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert two_nodes[0]["world_size"] == 2
    one_node = rloo_runs["fsdp2"][1]
    for name, tensor in one_node["trained"].items():
        assert torch.equal(two_nodes[0]["trained"][name], tensor), name
        assert torch.equal(two_nodes[1]["trained"][name], tensor), name
    assert (run_dir / "checkpoints" / "last.ckpt" / "meta.pt").is_file()


def test_a_lost_rank_or_kill_9_while_checkpointing_leaves_whole_checkpoints_that_resume(tmp_path):
    """A run writing a sharded checkpoint at every RL step. First SIGKILL of rank 1 only: rank 0's next collective
    fails with gloo's "connection closed by peer"; it stops with one line naming the lost rank and the command that
    resumes in the run's own directory (no trace). Then, resumed with `ckpt_path=last`, it loses every process to
    SIGKILL at a random moment. Each time every checkpoint left reads whole, and the next resume goes on to the end
    (what the dead writers left is ignored and cleared)."""
    import random
    import signal
    import time

    from lit_rlhf.checkpoints.sharded import read_sharded_checkpoint

    run_dir, rng = tmp_path / "run", random.Random(0)
    every_step = ["callbacks.model_checkpoint.every_n_train_steps=1", "callbacks.model_checkpoint.save_top_k=-1"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    for attempt in range(2):
        resume = ["ckpt_path=last"] if attempt else []
        run = subprocess.Popen([sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", "steps=200",
                                *SHORT, *FSDP2, *every_step, *resume], cwd=ROOT, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        while not (run_dir / "checkpoints" / "last.ckpt").exists() or (
                attempt and len(list((run_dir / "checkpoints").glob("step*.ckpt"))) <= attempt * 2):
            assert run.poll() is None and time.time() < deadline
            time.sleep(0.05)
        if attempt == 0:
            ranks = subprocess.run(["pgrep", "-f", f"hydra.run.dir={run_dir}"], capture_output=True, text=True)
            children = [int(pid) for pid in ranks.stdout.split() if int(pid) != run.pid]
            assert children, ranks.stdout
            os.kill(children[-1], signal.SIGKILL)  # Lightning's launcher started rank 1 as rank 0's child
            _, stderr = run.communicate(timeout=300)
            assert run.returncode == 2 and "Traceback" not in stderr, stderr[-3000:]
            line = stderr.strip().splitlines()[-1]
            # said by rank 0's failed collective, or by the launcher's observer if rank 0 was busy for its grace
            assert re.match(r"error: rank 0 lost rank 1( \(exit code -9, SIGKILL\))? of this 2-rank run \(it was "
                            r"killed or crashed", line), line
            assert "resume from the last checkpoint: python " in line and f"hydra.run.dir={run_dir} " in line
        else:
            time.sleep(rng.uniform(0.0, 1.5))
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
        checkpoints = [p for p in (run_dir / "checkpoints").iterdir() if not p.name.startswith(".")]
        assert checkpoints
        for path in checkpoints:
            assert read_sharded_checkpoint(path)["state_dict"], path
    done = read_sharded_checkpoint(run_dir / "checkpoints" / "last.ckpt")["rlhf_state"]["rl_step"]
    resumed = run_app("train.py", f"hydra.run.dir={run_dir}", f"steps={done + 1}", *SHORT, *FSDP2, *every_step,
                      "ckpt_path=last", cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert read_sharded_checkpoint(run_dir / "checkpoints" / "last.ckpt")["rlhf_state"]["rl_step"] == done + 1
    assert not [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]
