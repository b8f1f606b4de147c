"""from_pretrained with one clear line, within seconds, when a model is not available (e.g. offline)."""

from __future__ import annotations

import json
import logging
import pickle
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, TypeVar

import torch
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError

from lit_rlhf.config.locations import check_model_location, local_folder_note
from lit_rlhf.config.validation import check_choice
from lit_rlhf.errors import ConfigError, UnavailableError
from lit_rlhf.hub import hub_endpoint, hub_offline, hub_reachable
from lit_rlhf.terminal import clipped, printable

T = TypeVar("T")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
# from_pretrained's keywords for every model lit_rlhf trains, samples from or scores with. From transformers 5.25 a
# model swaps some layers for kernels it downloads from the Hub, at load and again at every train()/eval() on the
# device it then sits on, some of them for inference only: the rollouts would run other code than the update that
# scores them (and code fetched unasked). Transformers' own PyTorch layers are kept, as before 5.25.
TORCH_LAYERS = {"use_kernels": False}
# what transformers' errors about an attention implementation say (unknown, its package missing, a Hub kernel offline)
ATTENTION_ERROR = re.compile(r"attn_implementation|attention implementation|FlashAttention|flash[_-]attn|the kernel\b"
                             r"|kernels-community|`kernels`")


def resolve_dtype(dtype: str | torch.dtype | None, key: str = "model.dtype"):
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    check_choice(key, dtype, tuple(DTYPES), prefix="")
    return DTYPES[dtype]


def unavailable(what: str, name_or_path: str, reason: str, key: str) -> UnavailableError:
    return UnavailableError(
        f"{what} {name_or_path!r} is not available here ({reason}). Download it on a machine with internet "
        f"(`hf download {name_or_path}`) into the Hugging Face cache (then HF_HUB_OFFLINE=1 uses only the cache), "
        f"or point {key} at a local directory.{local_folder_note(name_or_path)}"
    )


def from_pretrained(loader: Callable[..., T], name_or_path: str, what: str = "model", cache_first: bool = True,
                    errors: tuple[type[BaseException], ...] = (OSError,), key: str = "name_or_path",
                    weights: bool = True, **kwargs) -> T:
    """`loader(name_or_path, **kwargs)`, turning 'not found / no connection' into UnavailableError.

    A hub name is looked up in the local cache first; when it is not there and the Hub cannot be reached,
    the error comes at once instead of after the Hub client's retries. A loader of weights (weights=True) reads a
    local folder's weight index only when it names the folder's own files."""
    if weights and Path(str(name_or_path)).is_dir():
        for index in WEIGHT_INDEXES:
            if (Path(name_or_path) / index).is_file():
                weight_map(Path(name_or_path) / index, str(name_or_path), key)
    whole_model = weights and not key.endswith(("adapter_path", "policy_path"))  # those hold adapters by design
    check_model_location(key, str(name_or_path), whole_model)
    remote = not Path(str(name_or_path)).exists() and not hub_offline()
    if remote and cache_first:
        # transformers' model loaders look for a peft adapter on the Hub without local_files_only (half a minute of
        # retries where the Hub cannot be reached): it is passed to that lookup too
        adapter = {"adapter_kwargs": {"local_files_only": True}} if weights and "adapter_kwargs" not in kwargs else {}
        try:
            return loader(name_or_path, local_files_only=True, **adapter, **kwargs)
        except OSError:
            pass
        if not hub_reachable():
            raise unavailable(what, name_or_path, f"not in the cache, and {hub_endpoint()} cannot be reached", key)
    try:
        return loader(name_or_path, **kwargs)
    except pickle.UnpicklingError as err:  # torch.load(weights_only=True) refused a pickle that asks for code
        found = re.search(r"GLOBAL (\S+)", str(err))
        asks = f" (it references {found.group(1)})" if found else ""
        raise ConfigError(f"{key}={str(name_or_path)!r} holds a pickled weights file (.bin) that is not plain "
                          f"tensors{asks}; it was refused without running it. Use weights saved as "
                          f"safetensors.") from err
    except SafetensorError as err:
        raise unreadable_weights(str(name_or_path), key, err) from err
    except RuntimeError as err:  # weights whose shapes do not fit the config (e.g. a head of another size)
        if "negative dimension" in str(err) and Path(str(name_or_path)).exists():  # a size below 0 in config.json
            raise unloadable_folder(what, str(name_or_path), key, err) from err
        if "size mismatch" not in str(err) and "mismatched_sizes" not in str(err):
            raise
        first = clipped(err)
        raise ConfigError(f"{key}={str(name_or_path)!r}: its weights do not fit its config ({first}); give a folder "
                          f"whose config.json matches its weights (save_pretrained writes both).") from err
    except errors as err:  # transformers and huggingface_hub raise OSError subclasses for both cases
        if Path(str(name_or_path)).exists():  # nothing to download: the folder's own files are missing or damaged
            raise unloadable_folder(what, str(name_or_path), key, err) from err
        raise unavailable(what, name_or_path, type(err).__name__, key) from err
    except ImportError as err:  # transformers' requires_backends: the model's class needs a package not installed
        if ATTENTION_ERROR.search(str(err)):  # the package of the attention implementation asked for (flash-attn)
            raise attention_error(kwargs.get("attn_implementation"), key, str(name_or_path), err) from err
        if (command := re.search(r"`(pip install [^`]+)`", str(err))) is None:
            raise
        needs = printable(" ".join(str(err).split()).split(". ")[0], one_line=True)  # "X requires the timm library..."
        raise ConfigError(f"{key}={str(name_or_path)!r} cannot be loaded in this environment: {needs}; install it "
                          f"(`{printable(command.group(1), one_line=True)}`) and run again.") from err
    except (StrictDataclassError, KeyError, TypeError, AttributeError, ZeroDivisionError) as err:  # a config file
        if not Path(str(name_or_path)).exists():  # whose values build nothing: a field of the wrong type, an unknown
            raise  # activation, no heads, added tokens that are not a mapping
        raise unloadable_folder(what, str(name_or_path), key, err) from err
    except ValueError as err:  # e.g. a config.json without model_type; a refusal to run a model's code passes
        if ATTENTION_ERROR.search(str(err)):  # unknown, or a Hub kernel not in the cache offline
            raise attention_error(kwargs.get("attn_implementation"), key, str(name_or_path), err) from err
        if not Path(str(name_or_path)).exists() or "trust_remote_code" in str(err):
            raise
        raise unloadable_folder(what, str(name_or_path), key, err) from err


@contextmanager
def attention_checked(attn_implementation: str | None, key: str, name_or_path: str) -> Iterator[dict]:
    """Around the load of name_or_path (its setting `key`): the keywords that ask from_pretrained (or AutoConfig) for
    the command line's model.attn_implementation (none for None: the model's default, or what its config.json
    names). An implementation that cannot run here is one line (from_pretrained says it itself; this catches
    from_config's, under sharded loading)."""
    try:
        yield {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    except (ValueError, ImportError) as err:
        if isinstance(err, ConfigError) or not ATTENTION_ERROR.search(str(err)):
            raise
        raise attention_error(attn_implementation, key, name_or_path, err) from err


def attention_error(attn_implementation: str | None, key: str, name_or_path: str, err: BaseException) -> ConfigError:
    """The line for an attention implementation transformers cannot run here: the command line's, or (None) the one
    the folder's config.json names."""
    reason = printable(clipped(err), one_line=True)
    if attn_implementation is not None:
        return ConfigError(f"model.attn_implementation={attn_implementation!r} cannot be used here ({reason}); set "
                           f"model.attn_implementation=sdpa, or null for the model's own default.")
    fix = ("set model.attn_implementation=sdpa to override it" if key.startswith("model.")
           else "remove attn_implementation from its config.json")
    return ConfigError(f"{key}={name_or_path!r}: the attention implementation its config.json names cannot be used "
                       f"here ({reason}); {fix}.")


def unloadable_folder(what: str, name_or_path: str, key: str, err: BaseException) -> ConfigError:
    """A local folder from_pretrained cannot read: empty, without weights, or with a config that is not one."""
    message = printable(clipped(err), one_line=True)
    return ConfigError(f"{key}={name_or_path!r} is a local folder that cannot be loaded as a {what} "
                       f"({type(err).__name__}: {message}); give a folder save_pretrained wrote (config.json and the "
                       f"weights).")


def weight_map(index: Path, name_or_path: str, key: str) -> dict[str, str]:
    """A weight index's {tensor name: file}: JSON whose files are the model folder's own (a name, or a path below
    the folder); an index naming an absolute path or one through `..` would read files elsewhere and is one line."""
    try:
        mapping: Any = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        if not (isinstance(mapping, dict) and all(isinstance(v, str) for v in mapping.values())):
            raise TypeError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{key}={name_or_path!r}: its {index.name} is not a weight index (JSON with a weight_map "
                          f"of tensor names to file names); download or save the model again.") from err
    for file in sorted(set(mapping.values())):
        posix = PurePosixPath(file.replace("\\", "/"))
        if posix.is_absolute() or PureWindowsPath(file).is_absolute() or ".." in posix.parts or not posix.parts:
            raise ConfigError(f"{key}={name_or_path!r}: its {index.name} names {file[:200]!r}, outside the model's "
                              f"folder, which a model folder may not point to; download or save the model again.")
    return mapping


def unreadable_weights(name_or_path: str, key: str, err: BaseException) -> ConfigError:
    """A safetensors file that is truncated or not safetensors at all."""
    message = clipped(err)
    return ConfigError(f"{key}={name_or_path!r} holds a safetensors file that cannot be read ({message}): it is "
                       f"truncated or not safetensors; download or save the model again.")


@contextmanager
def own_code_refused(key: str, name_or_path: str) -> Iterator[None]:
    """transformers' refusal to run a model's own code (no trust_remote_code) as one line, for models that have no
    setting to allow it (a reward model folder)."""
    try:
        yield
    except ValueError as err:
        if "trust_remote_code" not in str(err):
            raise
        raise ConfigError(f"{key}={str(name_or_path)!r} needs to run its own Python code (its config names classes "
                          f"transformers does not ship), which a {key.split('.')[0]} never runs; give a model of an "
                          f"architecture transformers ships.") from err


class _LoadReportHeld(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "LOAD REPORT" not in record.getMessage()


@contextmanager
def load_report_held() -> Iterator[None]:
    """transformers' load report (a table of the weights a model's files lack or hold beyond it, logged as a warning
    with terminal colour codes) held back, for a caller that reads from_pretrained's loading info itself and says
    what matters in its own words."""
    log, held = logging.getLogger("transformers.modeling_utils"), _LoadReportHeld()
    log.addFilter(held)
    try:
        yield
    finally:
        log.removeFilter(held)


def lacking_backbone_weights(model: torch.nn.Module, missing: list[str], key: str, name_or_path: str) -> str | None:
    """The warning for weights of a classifier's backbone (beyond its score head, which a causal LM's folder does not
    hold) that the folder lacks, which from_pretrained started at random; None when there are none."""
    prefix = f"{model.base_model_prefix}."
    lacking = [name for name in missing if name.startswith(prefix)]
    if not lacking:
        return None
    return (f"{key}={str(name_or_path)!r} lacks {len(lacking)} of the backbone's weights (e.g. {lacking[0]!r}), which "
            f"start from random values; give a folder saved whole by save_pretrained.")


def weights_started_at_random(model: torch.nn.Module, missing: list[str], key: str, name_or_path: str) -> str | None:
    """The line for a causal LM folder that lacks some of the model's weights, which from_pretrained started at random
    (a reward model's folder read as a policy: its output layer; a base model's saved without its head); None when
    it lacks none. Its architecture, where it is not a causal LM's, says what the folder holds."""
    if not missing:
        return None
    held = (getattr(model.config, "architectures", None) or [""])[0]
    holds = f" (its config.json names {held}, not a causal LM)" if held and not held.endswith("ForCausalLM") else ""
    return (f"{key}={str(name_or_path)!r} has no weights for {sorted(missing)[0]!r} (of {len(missing)} missing), which "
            f"would start at random{holds}; give a causal LM folder saved whole by save_pretrained (a policy that "
            f"train_sft.py, train_dpo.py or python -m lit_rlhf.export wrote).")
