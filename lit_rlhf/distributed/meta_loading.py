"""Loading for trainer=fsdp2 without a whole copy of the weights on any rank.

A model is built from its config with placeholder parameters: each a single zero broadcast to the parameter's
shape (a stride-0 view of one element), so the model costs no memory while peft wraps it, and is a CPU model to
peft (adapters initialise as on a loaded model, drawing the same random numbers; on the meta device peft would
move them there and lose their values). Before `fully_shard` the placeholders become meta-device parameters;
after it, `materialize` gives each rank storage for its shards only (`to_empty`) and fills them with just those
rows of the model's safetensors files (safetensors reads a slice without reading the rest). Buffers are real
from the start; tensors added after loading (LoRA adapters, a value head) keep their values.

FSDP2 shards each parameter along dim 0 as `torch.chunk` does: rank r holds rows [r * c, (r + 1) * c) with
c = ceil(rows / ranks), fewer (or none) at the end.

A mixture of experts whose files hold one tensor per expert (Qwen3-MoE's and Mixtral's checkpoints) while the model
holds them stacked, experts along dim 0 (transformers merges them while loading, fusing gate and up projections
along dim 1), is read the same way: a rank's rows are its experts, each read whole from the files and fused.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import init_empty_weights
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, GenerationConfig
from transformers.utils import cached_file

from lit_rlhf.errors import ConfigError
from lit_rlhf.models.loading import from_pretrained, unreadable_weights, weight_map

WEIGHT_KEYS = "_lit_rlhf_weight_keys"  # set on each module of an empty model: (WeightFiles, {name: file key})
INDEX, SINGLE = "model.safetensors.index.json", "model.safetensors"


@dataclass(frozen=True)
class StackedExperts:
    """A parameter the files hold one tensor per expert of: its row e is expert e's tensor of each part (the source
    patterns of transformers' converter, in order) concatenated along their dim 0."""

    parts: tuple[tuple[str, ...], ...]  # per part, the file key of each expert

    def rows(self, files: WeightFiles, start: int, stop: int) -> torch.Tensor:
        experts = [torch.cat([files.rows(part[e], 0, None) for part in self.parts]) for e in range(start, stop)]
        if experts:
            return torch.stack(experts)
        empty = files.rows(self.parts[0][0], 0, 0)  # a rank with no expert: 0 rows in the files' dtype
        return empty.new_empty((0, sum(files.shape(part[0])[0] for part in self.parts), *empty.shape[1:]))

    def keys(self) -> list[str]:
        return [key for part in self.parts for key in part]


class WeightFiles:
    """A model's safetensors files, read by key and rows (files opened once, lazily)."""

    def __init__(self, name_or_path: str, key: str, files: dict[str, Path]):
        self.name_or_path, self.key, self.files = name_or_path, key, files  # file key -> its file
        self._open: dict[Path, object] = {}

    @classmethod
    def find(cls, name_or_path: str, key: str) -> WeightFiles:
        """The files of a local directory or a cached hub model; a model without safetensors is one line."""
        def locate(filename: str) -> str | None:
            return cached_file(name_or_path, filename, _raise_exceptions_for_missing_entries=False)

        index = locate(INDEX)
        if index is not None:
            files = weight_map(Path(index), name_or_path, key)
            paths = {name: locate(name) for name in set(files.values())}
            missing = sorted(name for name, path in paths.items() if path is None)
            if missing:
                raise ConfigError(f"{key}={name_or_path!r}: its {INDEX} names {missing[0]!r}, which is not there; "
                                  f"download the model again, or set trainer.strategy.sharded_loading=false.")
            for path in set(paths.values()):
                cls.keys_of(Path(path), name_or_path, key)  # each file readable before any rank reads rows
            return cls(name_or_path, key, {k: Path(paths[name]) for k, name in files.items()})
        single = locate(SINGLE)
        if single is None:
            raise ConfigError(f"{key}={name_or_path!r} has no safetensors weights, which sharded loading reads by "
                              f"slices; save it with save_pretrained (safetensors), or set "
                              f"trainer.strategy.sharded_loading=false to load it whole on every rank.")
        return cls(name_or_path, key, {k: Path(single) for k in cls.keys_of(Path(single), name_or_path, key)})

    @staticmethod
    def keys_of(path: Path, name_or_path: str, key: str) -> list[str]:
        """The tensor names of a safetensors file; a truncated or foreign file is one line."""
        try:
            with safe_open(path, framework="pt") as f:
                return list(f.keys())
        except SafetensorError as err:
            raise unreadable_weights(name_or_path, key, err) from err

    def __deepcopy__(self, memo):  # a model's copy (a full fine-tune's reference) reads the same files
        return self

    def holds(self, key: str | StackedExperts) -> bool:
        return all(k in self.files for k in key.keys()) if isinstance(key, StackedExperts) else key in self.files

    def view(self, key: str):
        path = self.files[key]
        if path not in self._open:
            self._open[path] = safe_open(path, framework="pt")
        return self._open[path].get_slice(key)

    def shape(self, key: str) -> list[int]:
        return self.view(key).get_shape()

    def rows(self, key: str | StackedExperts, start: int, stop: int | None) -> torch.Tensor:
        if isinstance(key, StackedExperts):
            return key.rows(self, start, stop)
        view = self.view(key)
        return view[start:stop] if view.get_shape() else view[:]

    def close(self) -> None:
        self._open.clear()


def empty_model(auto_class, name_or_path: str, key: str, dtype: torch.dtype | None, trust_remote_code: bool = False,
                **config_kwargs) -> torch.nn.Module:
    """auto_class's model of name_or_path with placeholder parameters (buffers real), in eval mode as
    from_pretrained gives it, with its generation config; its modules tagged with the file keys of their
    parameters."""
    config = from_pretrained(AutoConfig.from_pretrained, name_or_path, "model config", key=key, weights=False,
                             trust_remote_code=trust_remote_code, **config_kwargs)  # a missing model: one line
    files = WeightFiles.find(name_or_path, key)
    with init_empty_weights(include_buffers=False):
        model = auto_class.from_config(config, dtype=dtype, trust_remote_code=trust_remote_code)
    # the model's ties (config.tie_word_embeddings: the output layer is the input embeddings), which the context above
    # undid (it registers every parameter anew on the meta device): the files hold a tied weight once
    model.tie_weights()
    try:
        model.generation_config = GenerationConfig.from_pretrained(name_or_path)
    except OSError:  # no generation_config.json: the one from_config made
        pass
    model_keys = checkpoint_keys(model, files)
    placeholders = {}
    for module_name, module in model.named_modules():
        keys = {}
        for name, param in module._parameters.items():
            if param is None:
                continue
            if id(param) not in placeholders:  # tied weights stay one parameter
                zero = torch.zeros((), dtype=param.dtype).expand(param.shape)
                placeholders[id(param)] = torch.nn.Parameter(zero, requires_grad=param.requires_grad)
            module._parameters[name] = placeholders[id(param)]
            full = f"{module_name}.{name}" if module_name else name
            keys[name] = model_keys.get(full, full)
        setattr(module, WEIGHT_KEYS, (files, keys))
    return model.eval()


def checkpoint_keys(model: torch.nn.Module, files: WeightFiles) -> dict[str, str]:
    """{parameter name: its key in the files}, through the renamings transformers applies while loading (e.g.
    pythia's embed_out is lm_head) and the base-model prefix. A weight transformers converts (fused, split) is
    not stored as the model holds it, so its rows cannot be read: one line."""
    try:  # transformers >= 5
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    except ImportError:  # transformers 4 names parameters as it saves them, with or without the base-model prefix
        names, prefix = dict.fromkeys(model.state_dict()), f"{model.base_model_prefix}."
        return {next((n for n in (k, k.removeprefix(prefix), prefix + k) if n in names), k): k for k in files.files}
    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    converter_of = {pattern: converter for converter in converters for pattern in converter.source_patterns}
    names = dict.fromkeys(model.state_dict())
    keys, experts = {}, {}  # experts: {name: {source pattern: {expert: file key}}}
    for file_key in files.files:
        name, pattern = rename_source_key(file_key, renamings, converters, model.base_model_prefix, names)
        if pattern in converter_of and name in names:
            expert = stacked_expert(converter_of[pattern], pattern, file_key)
            if expert is None:
                raise ConfigError(f"{files.key}={files.name_or_path!r} stores {file_key!r} in another layout than "
                                  f"the model's (transformers converts it while loading), which sharded loading "
                                  f"cannot read by slices; set trainer.strategy.sharded_loading=false to load it "
                                  f"whole on every rank.")
            experts.setdefault(name, {}).setdefault(pattern, {})[expert] = file_key
            continue
        keys[name] = file_key
    for name, parts in experts.items():
        patterns = converter_of[next(iter(parts))].source_patterns
        counts = {len(parts.get(pattern, {})) for pattern in patterns}
        if len(counts) != 1 or any(sorted(parts[p]) != list(range(len(parts[p]))) for p in patterns):
            raise ConfigError(f"{files.key}={files.name_or_path!r}: its files hold the experts of {name!r} "
                              f"incompletely; download the model again, or set trainer.strategy.sharded_loading="
                              f"false.")
        keys[name] = StackedExperts(tuple(tuple(parts[p][e] for e in range(len(parts[p]))) for p in patterns))
    return keys


def stacked_expert(converter, pattern: str, file_key: str) -> int | None:
    """The expert a file key holds when transformers' converter only stacks the experts along dim 0 (MergeModulelist),
    then, for several parts, concatenates them along dim 1 (Concatenate); None for any other conversion."""
    operations = [(type(op).__name__, getattr(op, "dim", None)) for op in converter.operations]
    stacks = [("MergeModulelist", 0)] + ([("Concatenate", 1)] if len(converter.source_patterns) > 1 else [])
    found = re.search(re.escape(pattern).replace(r"\*", r"(\d+)"), file_key) if pattern.count("*") == 1 else None
    return int(found.group(1)) if operations == stacks and found else None


def unsaved_keys(model: torch.nn.Module) -> list[str]:
    """The file keys of an empty model's parameters that its files do not hold (from_pretrained's missing keys)."""
    missing = []
    for module in model.modules():
        files, keys = vars(module).get(WEIGHT_KEYS, (None, {}))
        missing += [key for key in keys.values() if not files.holds(key)]
    return missing


def initialise_unsaved(model: torch.nn.Module, module: torch.nn.Module) -> None:
    """Real, freshly initialised parameters (the model's own `_init_weights`) for those of module that the files do
    not hold, as from_pretrained initialises them: a classifier's score head on a causal LM's folder. A module with
    some of its parameters saved is left as it is (materialize names what is missing)."""
    files, keys = vars(module).get(WEIGHT_KEYS, (None, {}))
    unsaved = [name for name, key in keys.items() if not files.holds(key)]
    if not unsaved or len(unsaved) < len(keys):
        return
    for name in unsaved:
        placeholder = module._parameters[name]
        module._parameters[name] = torch.nn.Parameter(torch.empty(placeholder.shape, dtype=placeholder.dtype),
                                                      requires_grad=placeholder.requires_grad)
        del keys[name]
    with torch.no_grad():
        model._init_weights(module)
    if not keys:
        del vars(module)[WEIGHT_KEYS]


def is_empty(model: torch.nn.Module) -> bool:
    """Whether model holds placeholders not yet filled from its files."""
    return any(WEIGHT_KEYS in vars(module) for module in model.modules())


def shard_rows(param: torch.Tensor) -> tuple[int, int]:
    """The rows of the whole tensor that this rank's shard holds (all of them for a plain tensor)."""
    rows = param.shape[0] if param.dim() else 0
    if not hasattr(param, "to_local"):
        return 0, rows
    local_rows = param.to_local().shape[0] if param.dim() else 0
    mesh = param.device_mesh
    chunk = math.ceil(rows / mesh.size()) if rows else 0
    start = min(mesh.get_local_rank() * chunk, rows)
    return start, start + local_rows


def local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def placeholders_to_meta(model: torch.nn.Module) -> None:
    """The placeholders as meta-device parameters, which fully_shard takes (it refuses stride-0 tensors)."""
    meta: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        for name in vars(module).get(WEIGHT_KEYS, (None, {}))[1]:
            param = module._parameters[name]
            if param.is_meta:  # already (sharded, possibly)
                continue
            if id(param) not in meta:
                empty = torch.empty(param.shape, dtype=param.dtype, device="meta")
                meta[id(param)] = torch.nn.Parameter(empty, requires_grad=param.requires_grad)
            module._parameters[name] = meta[id(param)]


def materialize(model: torch.nn.Module, device: torch.device) -> None:
    """Storage on device for the placeholders of model (this rank's shards, once sharded), filled from the model's
    files; the real tensors (adapters, a value head, buffers) keep their values. Nothing happens to a model without
    placeholders."""
    if not is_empty(model):
        return
    placeholders_to_meta(model)
    places: dict[int, list] = {}  # per parameter (tied weights are one): where it is registered, and its key
    kept = []
    for module in model.modules():
        files, keys = vars(module).get(WEIGHT_KEYS, (None, {}))  # vars: peft's wrappers forward getattr
        for name, key in keys.items():
            places.setdefault(id(module._parameters[name]), []).append((module, name, files, key))
        for name, tensor in [*module._parameters.items(), *module._buffers.items()]:
            if tensor is not None and not tensor.is_meta:
                kept.append((module, name, local(tensor).detach().clone()))
    model.to_empty(device=device)  # FSDP2's shards get storage of their own size
    for (module, name, _, _), *others in places.values():  # a tied weight, which to_empty split: one again
        for other, other_name, _, _ in others:
            if not hasattr(module._parameters[name], "to_local"):  # (FSDP2 ties its shards itself)
                other._parameters[other_name] = module._parameters[name]
    with torch.no_grad():
        for module, name, value in kept:
            local(getattr(module, name)).copy_(value)
        for found in places.values():
            module, name, files, key = next((place for place in found if place[2].holds(place[3])), found[0])
            if not files.holds(key):
                raise ConfigError(f"{files.key}={files.name_or_path!r}: its safetensors files hold no {key!r}, "
                                  f"which the model needs; set trainer.strategy.sharded_loading=false to load it "
                                  f"as from_pretrained does, on every rank.")
            for module, name, _, _ in found:  # a tied weight: the same rows wherever it is registered
                param = getattr(module, name)
                local(param).copy_(files.rows(key, *shard_rows(param)).to(param.dtype))
    forget_weight_files(model)


def forget_weight_files(model: torch.nn.Module) -> None:
    """Closes the model files an empty model's modules hold and forgets them (its tensors were filled)."""
    for module in model.modules():
        if WEIGHT_KEYS in vars(module):
            vars(module).pop(WEIGHT_KEYS)[0].close()
