"""LLM judges: a generative model (lit_rlhf.rewards.judge_model: an endpoint or a local model) reads a prompt
template and writes a judgement, which a strict parser reads.

- LLMJudge (reward=llm_judge): pointwise, a score in [min_score, max_score] per completion. The judgement's first
  non-empty line must be the number, optionally written `Score: 7` or `7/10`.
- LLMPairwiseJudge (evaluate.py's judge): which of the policy's and the reference's completions is better; the first
  line must be `A`, `B` or `tie` (optionally `Winner: A`). The policy's completion is A in even pairs and B in odd
  ones, so a judge's preference for a position cancels out.

Anything else is unparsable: scored by a documented rule (min_score; a tie) and counted, never a crash.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import torch
from lightning.pytorch.utilities import rank_zero_warn

from lit_rlhf.errors import ConfigError
from lit_rlhf.rewards.judge_model import JudgeModel

DEFAULT_TEMPLATE = (
    "Rate how good the response is as a continuation of the prompt, from {min_score} (bad) to {max_score} "
    "(excellent). Answer with the number only.\n\nPrompt: {prompt}\nResponse: {completion}\n\nScore:"
)
PAIRWISE_TEMPLATE = (
    "Which response is the better continuation of the prompt? Answer A, B or tie, and nothing else.\n\n"
    "Prompt: {prompt}\n\nResponse A: {a}\n\nResponse B: {b}\n\nBetter:"
)
UNPARSABLE_WARNING_SHARE = 0.5  # a batch with at least this share of judgements without a score warns (once)
SCORE = re.compile(r"^(?:score\s*[:=]?\s*)?([-+]?\d+(?:\.\d+)?)(?:\s*/\s*\d+(?:\.\d+)?)?\s*\.?$", re.I)
VERDICT = re.compile(r"^(?:(?:winner|better)\s*[:=]?\s*)?(?:response\s+)?(a|b|tie)\s*\.?$", re.I)


def first_line(text: str) -> str:
    return next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")


def parse_judgement(text: str, min_score: float, max_score: float) -> float | None:
    """The score a judgement states, or None when it states none (strictly: see the module's docstring)."""
    found = SCORE.match(first_line(text))
    if found is None:
        return None
    score = float(found.group(1))
    return score if min_score <= score <= max_score else None


def parse_verdict(text: str) -> str | None:
    """'a', 'b' or 'tie', or None when the judgement names none."""
    found = VERDICT.match(first_line(text))
    return found.group(1).lower() if found else None


def check_template(template: str, fields: tuple[str, ...], key: str, optional: tuple[str, ...] = ()) -> None:
    """The template names every field and formats with the judge's fields alone (no unknown `{field}`, literal braces
    doubled), else one line naming reward.template (or judge.template) before anything runs."""
    if not isinstance(template, str):
        raise ConfigError(f"{key}.template={template!r} is not text; give a template with {{prompt}} and friends.")
    missing = [f for f in fields if f not in set(re.findall(r"{(\w+)}", template))]
    if missing:
        shown = ", ".join("{" + f + "}" for f in fields)
        raise ConfigError(f"{key}.template has no {{{missing[0]}}}; a judge template shows the judge {shown}.")
    known = ", ".join("{" + f + "}" for f in (*fields, *optional))
    try:
        template.format(**{name: "" for name in (*fields, *optional)})
    except (KeyError, IndexError) as err:
        raise ConfigError(f"{key}.template names {{{str(err).strip(chr(39))}}}, which the judge does not fill (it "
                          f"fills {known}); write literal braces as {{{{ and }}}}.") from None
    except ValueError as err:
        raise ConfigError(f"{key}.template cannot be formatted ({err}); write literal braces (e.g. JSON) as {{{{ and "
                          f"}}}}.") from None


class LLMJudge(JudgeModel):
    """A pointwise LLM judge as a reward: template.format(prompt=, completion=, min_score=, max_score=) -> a
    judgement -> a score. base_url: an OpenAI-compatible endpoint serving `model`; without it, `model` is a local
    Hugging Face causal LM."""

    def __init__(self, model: str, base_url: str | None = None, template: str = DEFAULT_TEMPLATE,
                 min_score: float = 0.0, max_score: float = 10.0, unparsable_score: float | None = None,
                 **backend):
        if not min_score < max_score:
            raise ConfigError(f"reward.min_score={min_score} must be below reward.max_score={max_score}.")
        check_template(template, ("prompt", "completion"), "reward", optional=("min_score", "max_score"))
        if unparsable_score is not None and not (isinstance(unparsable_score, (int, float))
                                                 and math.isfinite(unparsable_score)):
            raise ConfigError(f"reward.unparsable_score={unparsable_score!r} must be a finite number (the score of a "
                              f"judgement without one), or null for min_score.")
        super().__init__(model, base_url, **backend)
        self.__name__ = "llm_judge"  # logged as rewards/llm_judge/*
        self.template, self.min_score, self.max_score = template, float(min_score), float(max_score)
        self.unparsable_score = self.min_score if unparsable_score is None else float(unparsable_score)
        self.unparsable = 0  # judgements without a score since the module last read them
        self.warned_unparsable = False

    def __call__(self, prompts: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        bounds = {"min_score": f"{self.min_score:g}", "max_score": f"{self.max_score:g}"}
        texts = [self.template.format(prompt=p, completion=c, **bounds)
                 for p, c in zip(prompts, completions, strict=True)]
        scores = [parse_judgement(j, self.min_score, self.max_score) for j in self.judgements(texts)]
        unparsable = sum(s is None for s in scores)
        self.unparsable += unparsable
        if scores and unparsable >= UNPARSABLE_WARNING_SHARE * len(scores) and not self.warned_unparsable:
            self.warned_unparsable = True
            rank_zero_warn(f"the judge {self.model!r} stated no score in [{self.min_score:g}, {self.max_score:g}] for "
                           f"{unparsable} of {len(scores)} completions, which then score reward.unparsable_score="
                           f"{self.unparsable_score:g}: a constant teaches nothing. Check reward.template, "
                           f"reward.max_tokens and the judge model (rewards/llm_judge/unparsable counts them every "
                           f"step). Said once per run.")
        return torch.tensor([self.unparsable_score if s is None else s for s in scores], dtype=torch.float32)

    def pop_stats(self) -> dict[str, float]:
        """What the module logs beside the scores (rewards/llm_judge/unparsable), since the last call."""
        stats, self.unparsable = {"unparsable": float(self.unparsable)}, 0
        return stats


class LLMPairwiseJudge(JudgeModel):
    """evaluate.py's judge (the PairwiseJudge signature): 1.0 where the policy's completion wins, 0.0 where the
    reference's does, 0.5 for a tie or an unparsable verdict (counted in `unparsable`)."""

    def __init__(self, model: str, base_url: str | None = None, template: str = PAIRWISE_TEMPLATE, **backend):
        check_template(template, ("prompt", "a", "b"), "judge")
        super().__init__(model, base_url, key="judge", **backend)
        self.template, self.unparsable = template, 0

    def __call__(self, prompts, policy_completions, reference_completions, policy_scores=None,
                 reference_scores=None) -> torch.Tensor:
        pairs = list(zip(prompts, policy_completions, reference_completions, strict=True))
        texts = [self.template.format(prompt=p, a=mine, b=theirs) if i % 2 == 0 else
                 self.template.format(prompt=p, a=theirs, b=mine) for i, (p, mine, theirs) in enumerate(pairs)]
        outcomes = []
        for i, verdict in enumerate(parse_verdict(j) for j in self.judgements(texts)):
            self.unparsable += verdict is None
            policy_is = "a" if i % 2 == 0 else "b"
            outcomes.append(0.5 if verdict in (None, "tie") else float(verdict == policy_is))
        return torch.tensor(outcomes, dtype=torch.float32)
