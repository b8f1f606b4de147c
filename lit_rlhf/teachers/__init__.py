"""Teachers for on-policy distillation: anything that gives the logprob of each token the student sampled
(lit_rlhf.teachers.protocol).

- CausalLMTeacher: a frozen causal LM folder or hub name (a full model, or a peft adapter on a base).
- ServedTeacher: a teacher behind an OpenAI-compatible completions server (`vllm serve <teacher>`).
- RoutedTeachers: several teachers, each row of the data scored by the one its column names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_rlhf.lazy_exports import lazy_exports

_EXPORTS = {"Teacher": "lit_rlhf.teachers.protocol", "CausalLMTeacher": "lit_rlhf.teachers.causal_lm",
            "RoutedTeachers": "lit_rlhf.teachers.routed", "ServedTeacher": "lit_rlhf.teachers.served",
            "TeacherServiceError": "lit_rlhf.teachers.served"}
__all__ = ["CausalLMTeacher", "RoutedTeachers", "ServedTeacher", "Teacher", "TeacherServiceError"]  # = _EXPORTS

if TYPE_CHECKING:
    from lit_rlhf.teachers.causal_lm import CausalLMTeacher
    from lit_rlhf.teachers.protocol import Teacher
    from lit_rlhf.teachers.routed import RoutedTeachers
    from lit_rlhf.teachers.served import ServedTeacher, TeacherServiceError

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
