"""The reward server's JSON schema, shared by the client (HTTPReward) and the server (lit_rlhf.serve).

POST /score   {"prompts": [N str], "completions": [N str], "columns": {name: [N values]}}  ->  {"scores": [N float]}
GET  /health  ->  {"status": "ok", "reward": str, "columns": [names of the dataset columns the reward reads]}

A server answers every request with exactly one finite score per completion, in order.
"""

from __future__ import annotations

import math
from typing import Any

from lit_rlhf.errors import UnavailableError
from lit_rlhf.terminal import printable


class RewardServiceError(UnavailableError):
    """A reward service that cannot be reached, or whose answer is not one finite score per completion."""


def shown(text: Any, limit: int = 120) -> str:
    """Server text as a one-line excerpt safe for a terminal (control characters escaped)."""
    text = printable(text, one_line=True)
    return text if len(text) <= limit else text[:limit] + "..."


def parse_scores(body: Any, expected: int, where: str) -> list[float]:
    """The scores of a /score answer, or RewardServiceError naming `where` (the server and the batch)."""
    scores = body.get("scores") if isinstance(body, dict) else None
    if not isinstance(scores, list):
        raise RewardServiceError(f"{where} answered {shown(body)} without a \"scores\" list; a reward server answers "
                                 f"{{\"scores\": [one number per completion]}} (docs/rewards.md).")
    if len(scores) != expected:
        raise RewardServiceError(f"{where} answered {len(scores)} scores for {expected} completions; it must answer "
                                 f"one score per completion, in order.")
    for i, score in enumerate(scores):
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise RewardServiceError(f"{where} answered {shown(score)} for completion {i}; every score must be a "
                                     f"finite number.")
    return [float(s) for s in scores]
