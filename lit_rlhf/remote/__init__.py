"""Talking to servers: HTTPService (lit_rlhf.remote.http), the transport every client shares (timeouts, retries,
auth), and the reward server's schema (lit_rlhf.remote.schema, served by `python -m lit_rlhf.serve`). The clients
live with what they are: HTTPReward and the LLM judges in lit_rlhf.rewards, ServedTeacher in lit_rlhf.teachers
(their old names here warn for one release)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_rlhf.lazy_exports import lazy_exports

_EXPORTS = {"HTTPService": "lit_rlhf.remote.http", "RewardServiceError": "lit_rlhf.remote.schema"}
__all__ = ["HTTPService", "RewardServiceError"]  # = _EXPORTS

if TYPE_CHECKING:
    from lit_rlhf.remote.http import HTTPService
    from lit_rlhf.remote.schema import RewardServiceError

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
