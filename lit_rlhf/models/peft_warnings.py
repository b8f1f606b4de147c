"""Warnings peft raises about its own code rather than the user's settings, kept off the user's terminal; every other
warning of peft's passes through unchanged."""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from peft import PeftConfig, PeftModel, get_peft_model
from peft.tuners.lora import ParamWrapper

# peft's warning about pattern keys no targeted module's name matches (rank_pattern, alpha_pattern), as peft before
# 0.22 words it
UNMATCHED_PATTERN_KEYS = re.compile(r"The following (\w+) keys did not match any targeted module and were ignored: "
                                    r"(\[.*\])\.$", re.DOTALL)


@contextmanager
def peft_reads_deprecated_alias() -> Iterator[None]:
    """peft reads transformers' deprecated `is_gradient_checkpointing` when it wraps a model; that one
    FutureWarning (about peft's code, not the user's) is silenced around the wrap."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def get_peft_model_checked(model: torch.nn.Module, config: PeftConfig) -> PeftModel:
    """peft's get_peft_model, without its false alarm on a mixture of experts. For transformers' stacked experts peft
    turns all-linear into adapters on the expert parameters and gives the fused `gate_up_proj` twice the rank and
    alpha through rank_pattern and alpha_pattern; those patterns apply to the parameter's name, while peft's check
    for unmatched keys reads module names only and warns that they were ignored (before peft 0.22, whose check reads
    parameter names too). A key that names a wrapped parameter is left out of that warning; any other unmatched key
    (a typo of the user's) still warns, in the words of the installed peft."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with peft_reads_deprecated_alias():
            adapted = get_peft_model(model, config)
    wrapped = [f"{name}.{module.parameter_name}" for name, module in adapted.named_modules()
               if isinstance(module, ParamWrapper)]
    for warning in caught:
        message = str(warning.message)
        if match := UNMATCHED_PATTERN_KEYS.match(message):
            unmatched = [key for key in ast.literal_eval(match[2])
                         if not any(re.match(rf"(.*\.)?({key})$", name) for name in wrapped)]
            if not unmatched:
                continue
            message = message.replace(match[2], repr(unmatched))
        warnings.warn_explicit(message, warning.category, warning.filename, warning.lineno)
    return adapted
