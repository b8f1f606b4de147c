import functools
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no test touches the network
os.environ.setdefault("WANDB_MODE", "offline")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # parallel workers share the cores: one thread each (and in the processes they start), where torch's default
    # of one thread per core in every worker oversubscribes them many times over
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

from lit_rlhf.assets import TINY_PYTHIA  # noqa: E402
from tests.tiers import pytest_fixture_setup, pytest_runtest_makereport, pytest_runtest_protocol  # noqa: E402, F401


def pytest_configure(config):
    """Lightning, imported before any logging handler exists, keeps its own console handlers and does not propagate;
    first imported inside a test, it would find pytest's handlers and send its lines into the run's train.log. (A
    user's `python train.py` imports it once Hydra has set up logging: there run_hydra_app stops its lines at its
    package logger's console handler.) pytest-xdist's controller runs no test, and skips the import's seconds."""
    if not config.getvalue("numprocesses") or os.environ.get("PYTEST_XDIST_WORKER"):
        import lightning  # noqa: F401

LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": "all-linear"}


# what Lightning's strategies write into os.environ when they set up a process group
DISTRIBUTED_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE",
                   "GROUP_RANK", "ROLE_RANK")


@pytest.fixture(autouse=True)
def no_process_group_outlives_its_test():
    """A process group a test leaves in its worker (a strategy that set one up before its fit was refused, a
    multi-rank app run in-process) is destroyed after it, and the variables that named it are restored. Left, a later
    in-process multi-rank run on that worker trained on the stale group (Lightning reuses an initialized one: the
    figures were rank zero's alone) while its other rank waited for rank zero; with only the group destroyed, the
    stale MASTER_PORT sent the new group to the old one's port and it waited there until the test timed out."""
    before = {name: os.environ.get(name) for name in DISTRIBUTED_ENV}
    yield
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        from lit_rlhf.distributed.process_group_exit import destroy_process_groups

        destroy_process_groups()
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def make_rloo(**overrides):
    from lit_rlhf import RLOOModule
    from lit_rlhf.rewards import VaderSentiment

    kwargs = dict(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, reward=VaderSentiment(),
                  optimizer=functools.partial(torch.optim.AdamW, lr=1e-3), rloo_k=4, response_length=16,
                  missing_eos_penalty=1.0)
    kwargs.update(overrides)
    return RLOOModule(**kwargs)


def make_datamodule(**overrides):
    from lit_rlhf import PromptDataModule

    return PromptDataModule(**{"tokenizer": TINY_PYTHIA, "batch_size": 4, "num_eval_prompts": 8, **overrides})


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """A multi_rank test (2 processes) runs on the worker that runs every other one: two of them at once would put 4
    processes on the cores, and gloo's waiting ranks spin."""
    for item in items:
        if item.get_closest_marker("multi_rank") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("multi_rank"))


def pytest_runtest_setup(item):
    """On a worker, pytest-xdist puts each test's group into its id. Grouping that fails (some pytest and pytest-xdist
    versions together) is silent: the tests still pass, but two multi_rank tests share the cores and module fixtures
    are built once per worker. A grouped test fails instead."""
    if (os.environ.get("PYTEST_XDIST_WORKER") and item.config.getvalue("loadgroup")
            and item.get_closest_marker("xdist_group") and "@" not in item.nodeid):
        pytest.fail(f"pytest-xdist did not group this test by its xdist_group mark under pytest {pytest.__version__}; "
                    "install the dev extra's pytest range: pip install -e '.[dev]'", pytrace=False)


@pytest.fixture
def tiny_path():
    return TINY_PYTHIA


def make_ppo(**overrides):
    from lit_rlhf import PPOModule
    from lit_rlhf.rewards import VaderSentiment

    kwargs = dict(model={"name_or_path": TINY_PYTHIA, "lora": LORA}, reward=VaderSentiment(),
                  optimizer=functools.partial(torch.optim.AdamW, lr=1e-3), samples_per_prompt=4,
                  response_length=16, missing_eos_penalty=1.0)
    kwargs.update(overrides)
    return PPOModule(**kwargs)


@pytest.fixture(autouse=True)
def run_in_tmp_path(tmp_path, monkeypatch):
    """Tests write logs, samples and checkpoints into their own directory, never into the repo."""
    monkeypatch.chdir(tmp_path)


# the learning tests' optimizer: 3x the default learning rate shows the score rising in 12-15 RL steps instead of 30-40
FAST_LEARNING = functools.partial(torch.optim.AdamW, lr=3e-3)


def assert_learns_positivity(module, rl_steps: int) -> None:
    """A short seeded run on the embedded default: the held-out score rises clearly (same sampling seed
    before and after) while the KL to the reference stays within the FAQ's [0, 10]."""
    import lightning as L

    from lit_rlhf.callbacks import TrainingSummary

    L.seed_everything(0)
    summary = TrainingSummary(seed=0)
    updates = module.hparams.num_ppo_epochs * module.hparams.num_mini_batches
    trainer = L.Trainer(max_steps=rl_steps * updates, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        accelerator="cpu", callbacks=[summary])
    trainer.fit(module, make_datamodule(batch_size=8, num_eval_prompts=16))
    gain = summary.after["mean_score"] - summary.before["mean_score"]
    assert gain > 0.3, (summary.before["mean_score"], summary.after["mean_score"])
    assert 0 <= summary.after["mean_kl"] <= 10
    assert 0 <= module.last_stats["objective/kl"] <= 10
