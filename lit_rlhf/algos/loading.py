"""The RLHF module of a lit_rlhf checkpoint, built safely: the checkpoint is untrusted input, so it is read
weights-only, names its algorithm only among classes already defined, and never enables the model's own code."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lit_rlhf.checkpoints.loading import load_checkpoint_file, require_rl_checkpoint
from lit_rlhf.checkpoints.targets import all_subclasses, rlhf_module_class
from lit_rlhf.errors import ConfigError


def load_rl_module(ckpt_path: str | Path, base: type, reward=None, rollout_engine=None, trust_remote_code: bool = False,
                   remote_code_flag: str = "trust_remote_code=true", checkpoint: dict | None = None,
                   settings: dict | None = None):
    """The module (a subclass of `base`) of a lit_rlhf checkpoint (`checkpoint`: its contents, already loaded),
    weights loaded, on the CPU; `settings` override the checkpoint's algorithm settings (e.g. response_length to
    evaluate with).

    The checkpoint's settings never enable remote code: model.trust_remote_code is the caller's
    `trust_remote_code` (the user's command line, `remote_code_flag`), whatever the checkpoint says."""
    if checkpoint is None:
        checkpoint = load_checkpoint_file(ckpt_path)  # weights-only, local path or URL
    require_rl_checkpoint(checkpoint, ckpt_path)
    cls = rlhf_module_class(checkpoint["rlhf_state"]["algo"], base)
    overrides, settings = settings or {}, checkpoint_settings(checkpoint, ckpt_path)
    settings.update(overrides, model={**settings["model"], "trust_remote_code": trust_remote_code})
    if checkpoint["hyper_parameters"]["model"].get("trust_remote_code") and not trust_remote_code:
        print(f"note: {ckpt_path} was trained with model.trust_remote_code=true; a checkpoint cannot enable remote "
              f"code, only your command line can ({remote_code_flag}, if you trust the model's code).",
              file=sys.stderr, flush=True)
    with remote_code_refused(settings["model"]["name_or_path"], remote_code_flag):
        module = cls(reward=reward, rollout_engine=rollout_engine, **settings)
        module.configure_model()
    module.on_load_checkpoint(checkpoint)
    module.load_state_dict(checkpoint["state_dict"], strict=False)
    return module.eval()


def checkpoint_settings(checkpoint: dict, ckpt_path) -> dict:
    """The module settings a checkpoint holds, refused in one line when malformed."""
    settings = checkpoint.get("hyper_parameters")
    if not isinstance(settings, dict) or not isinstance(settings.get("model"), dict):
        raise ConfigError(f"{ckpt_path} holds no model settings (hyper_parameters.model); give a checkpoint written "
                          f"by train.py.")
    for key in ("reward", "optimizer", "rollout_engine", "lr_scheduler", "kl_controller", "score_transforms",
                "teacher"):
        if key in settings:  # objects the caller passes, never settings a file may supply
            raise ConfigError(f"{ckpt_path} holds a {key!r} setting, which lit_rlhf never writes; give a checkpoint "
                              f"written by train.py.")
    return dict(settings)


@contextmanager
def remote_code_refused(name_or_path: str, flag: str):
    """transformers' refusal to run a model's own code without trust_remote_code, as one line."""
    try:
        yield
    except ValueError as err:
        if "trust_remote_code" not in str(err):
            raise
        raise ConfigError(f"the checkpoint's model {name_or_path!r} needs to run its own Python code, which stays off "
                          f"unless you pass {flag} (only if you trust that code).") from err


class BuildsModelsToLoadState:
    """The modules build their models in configure_model, which Lightning's ddp_spawn calls only in its workers; it
    hands rank zero's trained state_dict back to the main process's module with strict=False, where every key would
    be dropped without a word. A state_dict loaded into a module whose models are not built builds them first, so the
    module the user fitted holds the trained weights, as Lightning's ddp_spawn promises (only the weights: counters
    and optimizer state stay in the workers' checkpoints)."""

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        if state_dict and next(self.parameters(), None) is None:
            self.configure_model()
        return super().load_state_dict(state_dict, strict=strict, assign=assign)


class LoadsRLCheckpoints:
    """Lightning's `load_from_checkpoint`, for RLHFModule and its algorithms."""

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path, map_location=None, hparams_file=None, strict=None,
                             weights_only=None, *, reward=None, rollout_engine=None, trust_remote_code: bool = False,
                             **settings: Any):
        """The module of a lit_rlhf checkpoint (a local path or URL), in train mode as Lightning's: frozen weights from
        model.name_or_path, the trained tensors, RL counters and KL controller from the file (read weights-only).
        `settings` override the checkpoint's algorithm settings; `reward` (and `rollout_engine`) are objects no
        checkpoint holds, needed only to train on; the model's own Python code runs only with
        trust_remote_code=True here, whatever the checkpoint says. `map_location`: a device to move it to."""
        base = next(c for c in cls.__mro__ if LoadsRLCheckpoints in c.__bases__)  # RLHFModule
        return load_from_checkpoint_as(cls, base, checkpoint_path, map_location, hparams_file, strict, weights_only,
                                       reward, rollout_engine, trust_remote_code, **settings)


def load_from_checkpoint_as(cls: type, base: type, checkpoint_path, map_location=None, hparams_file=None,
                            strict: bool | None = None, weights_only: bool | None = None, reward=None,
                            rollout_engine=None, trust_remote_code: bool = False, **settings):
    """`cls.load_from_checkpoint(...)` (Lightning's call) for a lit_rlhf checkpoint: loaded by `load_rl_module`
    rather than Lightning's loader, which would need the reward from the caller, warn about every frozen weight the
    file leaves out, and build the model with the checkpoint's trust_remote_code. A checkpoint of another algorithm,
    and Lightning's options that cannot hold for lit_rlhf's checkpoints, are one line."""
    refuse_lightning_options(cls, hparams_file, weights_only)
    if strict:
        raise ConfigError(f"{cls.__name__}.load_from_checkpoint(strict=True): a lit_rlhf checkpoint holds the trained "
                          f"tensors only (the frozen weights reload from model.name_or_path); leave strict unset.")
    checkpoint = load_checkpoint_file(checkpoint_path)
    require_rl_checkpoint(checkpoint, checkpoint_path)
    algo = rlhf_module_class(checkpoint["rlhf_state"]["algo"], base)
    if not issubclass(algo, cls):
        raise ConfigError(f"{checkpoint_path} is a checkpoint of {algo.__name__}, not {cls.__name__}; load it with "
                          f"{algo.__name__}.load_from_checkpoint (or lit_rlhf.export.load_from_checkpoint).")
    module = load_rl_module(checkpoint_path, base, reward, rollout_engine, trust_remote_code, "trust_remote_code=True",
                            checkpoint, settings).train()  # as Lightning's loader returns it (a fit warns otherwise)
    return module if map_location is None else module.to(map_location)


def load_pair_module_as(cls: type, checkpoint_path, map_location=None, hparams_file=None, strict: bool | None = None,
                        weights_only: bool | None = None, trust_remote_code: bool = False, **settings):
    """`cls.load_from_checkpoint(...)` for a checkpoint of train_dpo.py, train_kto.py, train_sft.py or
    train_reward_model.py: built from the checkpoint's settings (`settings` override them) as Lightning's loader
    builds it, but read weights-only and with the model's own code enabled by the caller's trust_remote_code alone."""
    refuse_lightning_options(cls, hparams_file, weights_only)
    checkpoint = load_checkpoint_file(checkpoint_path)
    written_by = (checkpoint.get("pairs_identity") or {}).get("module")
    if isinstance(checkpoint.get("rlhf_state"), dict):
        written_by = f"{str(checkpoint['rlhf_state'].get('algo')).rpartition('.')[2]} of train.py"
    if written_by not in {c.__name__ for c in (cls, *all_subclasses(cls))}:
        raise ConfigError(f"{checkpoint_path} is not a checkpoint of {cls.__name__} (it was written by "
                          f"{str(written_by or 'another program')[:100]}); load it with the class that "
                          f"wrote it.")
    saved = checkpoint.get("hyper_parameters")
    if not isinstance(saved, dict) or not isinstance(saved.get("model"), dict):
        raise ConfigError(f"{checkpoint_path} holds no model settings (hyper_parameters.model); give a checkpoint "
                          f"its script wrote.")
    model = {**saved["model"], **settings.pop("model", {}), "trust_remote_code": trust_remote_code}
    with remote_code_refused(model.get("name_or_path"), "trust_remote_code=True"):
        module = cls(**{**saved, **settings, "model": model})
        module.configure_model()
    module.restore_counters(checkpoint)  # not on_load_checkpoint: its resume check refuses the `settings` changed
    module.load_state_dict(checkpoint["state_dict"], strict=module.strict_loading if strict is None else strict)
    return module if map_location is None else module.to(map_location)


def refuse_lightning_options(cls: type, hparams_file, weights_only: bool | None) -> None:
    """One line for Lightning's load_from_checkpoint options that would let a file choose the settings or run code."""
    if hparams_file is not None:
        raise ConfigError(f"{cls.__name__}.load_from_checkpoint(hparams_file={hparams_file!r}): the settings are the "
                          f"checkpoint's; pass the ones to change as keywords instead.")
    if weights_only is False:
        raise ConfigError(f"{cls.__name__}.load_from_checkpoint(weights_only=False): a checkpoint is read "
                          f"weights-only, since a pickle may run code; leave weights_only unset.")
