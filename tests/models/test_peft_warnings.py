"""LoRA on a mixture of experts (model.lora.target_modules=all-linear): peft's rank and alpha patterns for the fused
experts apply, and its warning that they were ignored is not shown, nor its reading of a deprecated transformers
attribute; a key that matches nothing still warns."""

import re
import warnings

import pytest
from peft.tuners.lora import ParamWrapper

from lit_rlhf.models.policy import with_lora
from tests.models.test_router_load import tiny

R, ALPHA = 4, 8


def wrapped_with_warnings(kind: str, **lora):
    model = tiny(kind)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        adapted = with_lora(model, dict(r=R, lora_alpha=ALPHA, target_modules="all-linear", **lora), "CAUSAL_LM", kind)
    return adapted, [str(w.message) for w in caught]


@pytest.mark.parametrize("kind", ["qwen3_moe", "mixtral"])
def test_the_fused_experts_patterns_apply_and_their_false_alarm_is_not_shown(kind):
    adapted, unmatched = wrapped_with_warnings(kind)
    assert unmatched == []
    ranks = {module.parameter_name: (module.r["default"], module.scaling["default"])
             for module in adapted.modules() if isinstance(module, ParamWrapper)}
    # gate and up projections fused into one parameter: twice the rank and alpha, the same scale; the router's weight
    assert ranks == {"gate_up_proj": (2 * R, ALPHA / R), "down_proj": (R, ALPHA / R), "weight": (R, ALPHA / R)}


def test_a_pattern_key_that_matches_nothing_still_warns_alone():
    _, unmatched = wrapped_with_warnings("qwen3_moe", rank_pattern={"q_projx": 2})
    assert len(unmatched) == 1, unmatched  # peft 0.22 says "module or parameter", 0.21 "module"
    assert re.fullmatch(r"The following rank_pattern keys did not match any targeted module( or parameter)? and were "
                        r"ignored: \['q_projx'\]\.", unmatched[0]), unmatched
