"""A loaded teacher's settings, checked when it is built (before any weights load): one line naming teacher.<key>."""

import pytest

from lit_rlhf.errors import ConfigError
from lit_rlhf.teachers.causal_lm import CausalLMTeacher


@pytest.mark.parametrize("settings, line", [
    ({"trust_remote_code": "flase"}, "teacher.trust_remote_code='flase' must be true or false."),
    ({"padding_free": "x"}, "teacher.padding_free='x' must be true or false."),
    ({"forward_batch_size": 0}, "teacher.forward_batch_size=0 must be a whole number >= 1 (or null)."),
    ({"logits_chunk_size": 2.5}, "teacher.logits_chunk_size=2.5 must be a whole number >= 1 (or null)."),
    ({"dtype": "float33"}, "teacher.dtype='float33' is not one of float32, bfloat16, float16, auto (did you mean "
                           "'float32'?)."),
])
def test_a_teacher_setting_that_cannot_be_used_is_one_line(settings, line):
    """trust_remote_code=flase (a typo) read as true and would have run the teacher folder's code; the dtype's line
    said to set model.dtype."""
    with pytest.raises(ConfigError) as err:
        CausalLMTeacher("a-teacher", **settings)
    assert str(err.value) == line
    CausalLMTeacher("a-teacher", dtype=None, forward_batch_size=None, logits_chunk_size=None)  # null: the defaults
