"""evaluate.py ckpt_path=... evaluates what was trained: the run's data, reward and task metrics, the
checkpoint's algorithm settings (but for response_length and temperature), and bad settings in one line."""

import json

import pytest
import torch

from tests.apps import run_app
from tests.helpers import FAST, one_line_error

pytestmark = pytest.mark.integration  # runs a Trainer or an app


@pytest.fixture(scope="module")
def arithmetic_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("arithmetic")
    result = run_app("train.py", "experiment=arithmetic_rloo", "hydra.run.dir=run", *FAST, cwd=directory)
    assert result.returncode == 0, result.stderr[-3000:]
    return directory


def evaluation_of(directory):
    (run,) = (directory / "logs" / "evaluate" / "runs").iterdir()
    generations = [json.loads(line) for line in (run / "generations.jsonl").read_text().splitlines()]
    return json.loads((run / "evaluation.json").read_text()), generations


def test_an_arithmetic_checkpoint_is_evaluated_on_its_own_data_reward_and_task_metric(arithmetic_run, tmp_path):
    ckpt = arithmetic_run / "run" / "checkpoints" / "last.ckpt"
    result = run_app("evaluate.py", f"ckpt_path={ckpt}", "samples_per_prompt=1", "num_bootstraps=50",
                     "algo.response_length=3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary, generations = evaluation_of(tmp_path)
    assert "exact_match" in summary["task_metrics"]
    assert summary["num_prompts"] == 4  # the run's held-out prompts (data.num_eval_prompts=4), not evaluate.yaml's
    assert all(g["prompt"].startswith("What is") for g in generations)
    assert summary["policy"]["length_mean"] <= 3  # algo.response_length is honoured


def test_algorithm_settings_other_than_length_and_temperature_are_refused_with_a_checkpoint(arithmetic_run, tmp_path):
    ckpt = arithmetic_run / "run" / "checkpoints" / "last.ckpt"
    line = one_line_error(run_app("evaluate.py", f"ckpt_path={ckpt}", "algo.kl_coef=0.1", cwd=tmp_path))
    assert line.startswith("error: algo.kl_coef does not apply to evaluate.py ckpt_path=...")


@pytest.mark.parametrize("group, target", [
    ("reward", "os.system"),
    ("reward", "lit_rlhf.models.export.shutil.copyfile"),  # a prefix inside lit_rlhf, an attribute path out of it
    ("task_metrics", "lit_rlhf.models.export.os.makedirs"),
    ("env", "lit_rlhf.models.export.export_model"),  # lit_rlhf's own, but not an environment
])
def test_a_checkpoint_cannot_choose_the_code_it_runs(group, target, arithmetic_run, tmp_path):
    checkpoint = torch.load(arithmetic_run / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    victim, made = tmp_path / "victim.txt", tmp_path / "made_by_checkpoint"
    victim.write_text("the user's data")
    arguments = {"os.system": [f"touch {made}"], "lit_rlhf.models.export.shutil.copyfile": ["/dev/null", str(victim)],
                 "lit_rlhf.models.export.os.makedirs": [str(made)],
                 "lit_rlhf.models.export.export_model": [None, None, str(made)]}
    crafted = {"_target_": target, "_args_": arguments[target]}
    checkpoint["rlhf_state"]["run_config"][group] = {"name": crafted} if group == "task_metrics" else crafted
    torch.save(checkpoint, tmp_path / "crafted.ckpt")
    line = one_line_error(run_app("evaluate.py", "ckpt_path=crafted.ckpt", cwd=tmp_path))
    assert f"the checkpoint's {group} names {target!r}, which is not one of lit_rlhf's {group} classes" in line
    assert victim.read_text() == "the user's data" and not made.exists()


@pytest.mark.parametrize("algo", ["lit_rlhf.lazy_exports.importlib.import_module", "os.PathLike",
                                  "lit_rlhf.algos.base.torch.nn.Module"])
def test_a_checkpoint_names_only_an_rlhf_module_as_its_algorithm(algo, arithmetic_run, tmp_path):
    checkpoint = torch.load(arithmetic_run / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["rlhf_state"]["algo"] = algo
    torch.save(checkpoint, tmp_path / "crafted.ckpt")
    line = one_line_error(run_app("evaluate.py", "ckpt_path=crafted.ckpt", cwd=tmp_path))
    assert f"the checkpoint names algo {algo!r}, which is not an RLHFModule class" in line


@pytest.mark.parametrize("setting, expected", [
    ("samples_per_prompt=0", "samples_per_prompt=0 must be a whole number >= 1"),
    ("num_bootstraps=0", "num_bootstraps=0 must be a whole number >= 1"),
    ("num_bootstraps=39", "num_bootstraps=39 is too few resamples for a 95% interval (its bounds are quantiles of the "
                          "resampled means); give num_bootstraps >= 40 (default 1000)."),
    ("confidence=1.5", "confidence=1.5 must be a number between 0 and 1"),
    ("confidence=0", "confidence=0 must be a number between 0 and 1"),
    ("device=gpu", "device='gpu' is not a device"),
    ("trust_checkpoint_io=yes", "trust_checkpoint_io='yes' must be true or false"),
    ("algo=distill", "algo=distill is for training (evaluate.py never loads its teacher); remove it"),
])
def test_bad_evaluation_settings_are_one_line(setting, expected, tmp_path):
    assert one_line_error(run_app("evaluate.py", setting, cwd=tmp_path)).startswith(f"error: {expected}")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda_is_one_line(tmp_path):
    line = one_line_error(run_app("evaluate.py", "device=cuda", cwd=tmp_path))
    assert line.startswith("error: device='cuda', but this machine has no CUDA device")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_device_cuda_without_cuda_is_refused_by_the_checks_before_the_imports(device):
    from hydra import compose, initialize_config_dir

    from lit_rlhf.cli.evaluation_checks import check_evaluation
    from lit_rlhf.errors import ConfigError
    from tests.helpers import ROOT

    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("evaluate", overrides=[f"device={device}"])
    with pytest.raises(ConfigError, match=f"device='{device}', but this machine has no CUDA device"):
        check_evaluation(cfg)


class RecordingServer:
    """An HTTP server in a thread that records the requests it gets (path and Authorization header) and answers 500."""

    def __init__(self):
        import http.server
        import threading

        requests = self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                requests.append((self.path, self.headers.get("Authorization")))
                self.send_response(500)
                self.end_headers()

            do_GET = do_POST

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("group, remote", [
    ("reward", {"_target_": "lit_rlhf.rewards.HTTPReward", "url": "URL", "auth_env": "USERS_SECRET", "retries": 0}),
    ("gold", {"_target_": "lit_rlhf.rewards.HTTPReward", "url": "URL", "auth_env": "USERS_SECRET", "retries": 0}),
    ("gold", {"_target_": "lit_rlhf.rewards.LLMJudge", "model": "m", "base_url": "URL/v1",
              "api_key_env": "USERS_SECRET", "retries": 0}),
    ("reward", {"_target_": "lit_rlhf.rewards.WeightedSum", "weights": {"a": 1.0}, "rewards": {"a": {
        "_target_": "lit_rlhf.rewards.HTTPReward", "url": "URL", "auth_env": "USERS_SECRET", "retries": 0}}}),
], ids=["reward-server", "gold-server", "gold-judge-endpoint", "a-server-inside-a-weighted-sum"])
def test_a_checkpoint_does_not_choose_where_texts_and_secrets_are_sent(group, remote, arithmetic_run, tmp_path):
    """A checkpoint naming a reward server or judge endpoint, with one of the user's environment variables as its
    token: refused in one line, nothing sent; the command line's trust_checkpoint_io=true confirms it."""
    server = RecordingServer()
    try:
        checkpoint = torch.load(arithmetic_run / "run" / "checkpoints" / "last.ckpt", weights_only=True)
        crafted = json.loads(json.dumps(remote).replace("URL", server.url))
        checkpoint["rlhf_state"]["run_config"][group] = crafted
        torch.save(checkpoint, tmp_path / "crafted.ckpt")
        env = {"USERS_SECRET": "s3cret"}
        line = one_line_error(run_app("evaluate.py", "ckpt_path=crafted.ckpt", cwd=tmp_path, env=env))
        assert line.startswith(f"error: the checkpoint's {group} sends completions to '{server.url}"), line
        assert "with the value of $USERS_SECRET as its token" in line and "trust_checkpoint_io=true" in line
        assert server.requests == [] and not (tmp_path / "logs" / "evaluate").exists()

        trusted = run_app("evaluate.py", "ckpt_path=crafted.ckpt", "trust_checkpoint_io=true", "samples_per_prompt=1",
                          "num_bootstraps=50", "algo.response_length=3", cwd=tmp_path, env=env)
        assert trusted.returncode != 0  # the recording server answers 500
        assert server.requests and server.requests[0][1] == "Bearer s3cret"
    finally:
        server.close()


def test_a_checkpoint_does_not_choose_which_local_file_is_read(arithmetic_run, tmp_path):
    """A checkpoint whose data.dataset names a local file: refused in one line, the file unread; naming the same file
    on the command line evaluates the run's held-out split of it."""
    private = tmp_path / "private.jsonl"
    private.write_text("".join(json.dumps({"prompt": f"PRIVATE {i}+1?", "answer": str(i + 1)}) + "\n"
                               for i in range(10)))
    checkpoint = torch.load(arithmetic_run / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["datamodule_hyper_parameters"]["dataset"] = str(private)
    torch.save(checkpoint, tmp_path / "crafted.ckpt")
    refused = run_app("evaluate.py", "ckpt_path=crafted.ckpt", cwd=tmp_path)
    line = one_line_error(refused)
    assert line.startswith(f"error: the checkpoint's data.dataset='{private}' is a local file"), line
    assert f"confirm it with data.dataset={private} on the command line" in line
    assert "PRIVATE" not in refused.stdout + refused.stderr

    confirmed = run_app("evaluate.py", "ckpt_path=crafted.ckpt", f"data.dataset={private}", "samples_per_prompt=1",
                        "num_bootstraps=50", "algo.response_length=3", cwd=tmp_path)
    assert confirmed.returncode == 0, confirmed.stderr[-3000:]
    summary, generations = evaluation_of(tmp_path)
    assert summary["num_prompts"] == 4  # the run's held-out split (data.num_eval_prompts=4) of the named file
    assert all(g["prompt"].startswith("PRIVATE") for g in generations)
