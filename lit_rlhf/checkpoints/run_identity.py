"""What a run is beyond its settings: the algorithm class, the rewards and their weights, the score
transforms, the KL controller's kind, the lr scheduler, digests of the model directory and prompts
file it read, a distillation run's teacher (its kind, weights or address, adapter and routing), and a
multi-turn run's environment (its class, tools and episode limits).
Saved in every checkpoint (`rlhf_state["identity"]`) and compared on resume, so a resume that would
silently train something else is refused in one line that names what changed."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from lit_rlhf.errors import ConfigError

WHOLE_FILE_BYTES = 64 * 2**20  # files up to this size are hashed whole; larger ones by sampled blocks
SAMPLED_BLOCKS, BLOCK_BYTES = 64, 2**16


def qualified_name(obj: Any) -> str:
    target = getattr(obj, "func", obj)  # functools.partial: what it calls
    kind = target if isinstance(target, type) or callable(target) and hasattr(target, "__qualname__") else type(target)
    return f"{getattr(kind, '__module__', '')}.{getattr(kind, '__qualname__', type(kind).__name__)}"


def file_digest(path: Path, digest) -> None:
    size = path.stat().st_size
    digest.update(f"{path.name}|{size}|".encode())
    with open(path, "rb") as f:
        if size <= WHOLE_FILE_BYTES:
            digest.update(f.read())
            return
        for i in range(SAMPLED_BLOCKS):  # evenly spaced blocks: other weights of the same shapes differ in them
            f.seek((size - BLOCK_BYTES) * i // (SAMPLED_BLOCKS - 1))
            digest.update(f.read(BLOCK_BYTES))


def path_digest(name_or_path: Any) -> str | None:
    """A BLAKE2 digest of a local file, or of a directory's files; None for a hub name."""
    path = Path(str(name_or_path)) if name_or_path else None
    if path is None or not path.exists():
        return None
    digest = hashlib.blake2b(digest_size=16)
    for file in sorted(p for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file()):
        file_digest(file, digest)
    return digest.hexdigest()


def reward_identity(reward: Any) -> dict[str, Any]:
    """{'reward.<name>': its class or function (and model), 'reward.weights.<name>': its weight}."""
    from lit_rlhf.rewards.weighted_sum import WeightedSum, named_parts

    rewards = named_parts(reward)
    weights = reward.weights if isinstance(reward, WeightedSum) else {}
    identity = {}
    for name, component in rewards.items():
        model = getattr(component, "name_or_path", None)
        identity[f"reward.{name}"] = qualified_name(component) + (f" ({model})" if model else "")
        identity[f"reward.weights.{name}"] = float(weights.get(name, 1.0))
    return identity


def location_identity(name_or_path: Any) -> Any:
    """A local folder or file by the digest of its files (a copy elsewhere is the same), a hub name by its name."""
    digest = path_digest(name_or_path)
    return {"digest": digest} if digest is not None else name_or_path


def dataset_identity(dataset: Any) -> dict[str, str | None]:
    """A local prompts file or dataset folder by the digest of its files; a hub or bundled name by none."""
    return {"digest": path_digest(dataset) if dataset and Path(str(dataset)).exists() else None}


def teacher_identity(teacher: Any, key: str = "teacher") -> dict[str, Any]:
    """{'teacher': its kind, 'teacher.<setting>': what it scores with}: a loaded teacher's weights and adapter, a
    served teacher's address (its password masked) and model, routed teachers' column and each one's identity."""
    identity: dict[str, Any] = {key: qualified_name(teacher)}
    if isinstance(getattr(teacher, "teachers", None), dict):  # RoutedTeachers
        identity[f"{key}.column"] = teacher.column
        identity[f"{key}.teachers"] = sorted(teacher.teachers)
        for name, part in teacher.teachers.items():
            identity.update(teacher_identity(part, f"{key}.teachers.{name}"))
    elif hasattr(teacher, "shown_url"):  # ServedTeacher
        identity[f"{key}.url"] = teacher.shown_url
        identity[f"{key}.model"] = teacher.model
    elif hasattr(teacher, "name_or_path"):  # CausalLMTeacher
        identity[f"{key}.name_or_path"] = location_identity(teacher.name_or_path)
        adapter = getattr(teacher, "adapter_path", None)
        identity[f"{key}.adapter_path"] = location_identity(adapter) if adapter else None
    return identity


def environment_identity(spec: Any) -> dict[str, Any]:
    """{'env': the environment's class (None without one), 'env.<setting>': what shapes its episodes}: the tools the
    model may call, how calls are written, and the turns, tokens and calls an episode may take. Timeouts and
    concurrency are left out: they change when a slow tool's answer arrives, not what the episodes are."""
    if spec is None:
        return {"env": None}
    return {"env": qualified_name(spec.factory), "env.tools": spec.tool_names, "env.tool_format": spec.tool_format,
            "env.max_turns": spec.max_turns, "env.max_tokens": spec.max_tokens,
            "env.max_tool_calls": spec.max_tool_calls}


def run_identity(module, dataset: Any = None) -> dict[str, Any]:
    """The flat {key: plain value} identity of a module's run (see module doc)."""
    rewards = reward_identity(module.reward) if module.reward is not None else {}
    return {
        "algo": f"{type(module).__module__}.{type(module).__qualname__}",
        "reward": sorted(key.partition(".")[2] for key in rewards if not key.startswith("reward.weights.")),
        **rewards,
        "score_transforms": [qualified_name(t) for t in module.score_transforms],
        "algo.kl_controller.kind": module.kl_controller.kind,
        "algo.lr_scheduler": qualified_name(module.lr_scheduler_factory) if module.lr_scheduler_factory else None,
        "model.name_or_path": {"digest": path_digest(module.hparams.model["name_or_path"])},
        "data.dataset": dataset_identity(dataset),
        **(teacher_identity(teacher) if (teacher := module.sampler.teacher) is not None else {}),
        **environment_identity(module.sampler.environment),
    }


# Where the classes an identity names were defined before they moved (lit_rlhf.lazy_exports.MOVED): a checkpoint of
# the previous release names them there, and resumes.
DEFINED_BEFORE = {
    **{f"lit_rlhf.models.rewards.{name}": f"lit_rlhf.rewards.{module}.{name}"
       for name, module in (("VaderSentiment", "vader"), ("SequenceClassifierReward", "reward_model"))},
    "lit_rlhf.models.reward_set.WeightedSum": "lit_rlhf.rewards.weighted_sum.WeightedSum",
    "lit_rlhf.remote.client.HTTPReward": "lit_rlhf.rewards.http.HTTPReward",
    "lit_rlhf.remote.judge.LLMJudge": "lit_rlhf.rewards.judge.LLMJudge",
    "lit_rlhf.models.teacher.CausalLMTeacher": "lit_rlhf.teachers.causal_lm.CausalLMTeacher",
    "lit_rlhf.models.teacher.RoutedTeachers": "lit_rlhf.teachers.routed.RoutedTeachers",
    "lit_rlhf.remote.teacher.ServedTeacher": "lit_rlhf.teachers.served.ServedTeacher",
    "lit_rlhf.algos.score_transforms.RewardNormalizer": "lit_rlhf.step.score_transforms.RewardNormalizer",
}


def defined_now(value: Any) -> Any:
    """A saved identity value with a moved class's old name ("<name>" or "<name> (<model>)", or a list of them)
    renamed."""
    if isinstance(value, list):
        return [defined_now(item) for item in value]
    if not isinstance(value, str):
        return value
    name, space, rest = value.partition(" ")
    return DEFINED_BEFORE.get(name, name) + space + rest


def check_same_run(saved: dict[str, Any] | None, current: dict[str, Any],
                   typed: tuple[dict[str, Any], dict[str, Any]] = ({}, {})) -> None:
    """Refuses, in one line naming the first changed key, a resume whose identity differs from the checkpoint's.
    typed: the paths as the checkpoint's run and this one were given ({key: value} of the keys identified by their
    files' digest), so that the line says which path changed, or that the files of the same path did."""
    if not saved:
        return  # a checkpoint written before identities were saved
    saved = {key: defined_now(value) for key, value in saved.items()}
    if "env" not in saved:  # written before the environment was part of a run's identity: not compared
        current = {key: value for key, value in current.items() if key != "env" and not key.startswith("env.")}
    if saved.get("algo") != current["algo"]:
        old, new = (str(name).rpartition(".")[2] for name in (saved.get("algo"), current["algo"]))
        raise ConfigError(f"resume changes the algorithm ({old} -> {new}): the checkpoint was trained by {old}; "
                          f"resume with that algo, or start a new run (e.g. from an exported policy).")
    changed = [key for key in saved.keys() | current.keys() if saved.get(key) != current.get(key)]
    if changed:
        key = sorted(changed)[0]
        old, new = saved.get(key), current.get(key)
        what = files_changed(typed[0].get(key), typed[1].get(key)) if isinstance(old, dict) else f"{old!r} -> {new!r}"
        group = key.partition(".")[0]
        others = sorted({k.partition(".")[0] for k in changed} - {group})  # named by group, not every key
        also = (f" and more of {group}" if sum(k.partition(".")[0] == group for k in changed) > 1 else "") + (
            f", and {' and '.join(others)} too" if others else "")
        raise ConfigError(f"resume changes {key} ({what}){also}; an exact resume needs the checkpoint's: restore "
                          f"{'them' if also else 'it'}, or start a new run (e.g. from an exported policy).")


def files_changed(old_path: Any, new_path: Any) -> str:
    """What changed of a key identified by its files: the path given, or the files at the same path (changed, or
    another folder's where the path is relative)."""
    if old_path is None or new_path is None:  # a checkpoint written before the paths were passed here
        return "its files differ from the checkpoint's run"
    if str(old_path) != str(new_path):
        return f"{old_path!r} -> {new_path!r}"
    return f"the files at {new_path!r} differ from those the checkpoint's run read"


def typed_paths(hyper_parameters: Any, datamodule_hyper_parameters: Any) -> dict[str, Any]:
    """The paths a run was given for the keys its identity holds as their files' digest."""
    model = (hyper_parameters or {}).get("model")
    return {"model.name_or_path": model.get("name_or_path") if isinstance(model, dict) else None,
            "data.dataset": (datamodule_hyper_parameters or {}).get("dataset")}
