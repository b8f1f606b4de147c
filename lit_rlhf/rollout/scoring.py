"""Calling the rewards on drawn completions: every reward call is checked (shape, finiteness), and a reward that
raises or lacks a dataset column is a one-line error that names it.

Shapes: N sequences.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch

from lit_rlhf.errors import ConfigError, UnavailableError
from lit_rlhf.interrupts import abandonable
from lit_rlhf.rewards import call_reward
from lit_rlhf.rewards.protocol import missing_columns, signature_of
from lit_rlhf.rewards.weighted_sum import named_parts, reward_models
from lit_rlhf.rollout.trajectory import ROLLOUT_COLUMNS
from lit_rlhf.terminal import clipped_first_line


def sequence_columns(batch: dict[str, Any], prompt_index: torch.Tensor) -> dict[str, list]:
    """The dataset columns of each sequence's prompt (batch["columns"] holds them per prompt). -> {name: N values}"""
    index = prompt_index.tolist()
    return {name: [values[i] for i in index] for name, values in (batch.get("columns") or {}).items()}


def sequence_prompt_messages(batch: dict[str, Any], prompt_index: torch.Tensor) -> list[list] | None:
    """Each sequence's prompt as chat messages, where the dataset gave every prompt of the batch so. -> N lists"""
    messages = batch.get("prompt_messages")
    return None if messages is None else [messages[i] for i in prompt_index.tolist()]


def failing_prompt(reward, prompts: list[str], completions: list[str], columns: dict[str, list],
                   prompt_messages: list[list] | None = None) -> str | None:
    """The first prompt on which the reward raises when called on that completion alone."""
    for i, prompt in enumerate(prompts):
        try:
            call_reward(reward, [prompt], [completions[i]], {k: [v[i]] for k, v in columns.items()},
                        None if prompt_messages is None else [prompt_messages[i]])
        except Exception:
            return prompt
    return None


def checked_scores(name: str, returned: Any, prompts: list[str], completions: list[str],
                   allow_none: bool = False) -> torch.Tensor:
    """What a reward returned as finite float32 scores of shape (N,), or a one-line error naming the reward. With
    allow_none, a None in a returned list (TRL's "this reward does not apply to this completion") is NaN."""
    not_applicable = torch.tensor([value is None for value in returned]) if allow_none and isinstance(
        returned, (list, tuple)) else None
    if not_applicable is not None and not_applicable.any():
        returned = [math.nan if value is None else value for value in returned]
    try:
        scores = torch.as_tensor(returned).to(torch.float32)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ConfigError(f"the reward {name} returned {type(returned).__name__} that is not numbers ({err}); it "
                          f"must return one float per completion.") from err
    if scores.shape != (len(completions),):
        raise ConfigError(f"the reward {name} returned shape {tuple(scores.shape)}; it must return one score per "
                          f"completion, shape ({len(completions)},).")
    finite_or_none = torch.isfinite(scores) | (not_applicable if not_applicable is not None else False)
    bad = (~finite_or_none).nonzero().flatten().tolist()
    if bad:
        raise ConfigError(f"the reward {name} returned {scores[bad[0]].item()} for {len(bad)} of {len(scores)} "
                          f"completions (e.g. prompt {prompts[bad[0]][:60]!r}); it must return finite scores.")
    return scores


def check_not_trainer_state(who: str, column: str) -> None:
    """trainer_state, which TRL passes its reward functions beside the columns, is not a column to look for."""
    if column == "trainer_state":
        raise ConfigError(f"{who} reads trainer_state, TRL's TrainerState, which is not passed here; give it a default "
                          f"(trainer_state=None) or remove it.")


def call_checked(name: str, reward, prompts: list[str], completions: list[str],
                 columns: dict[str, list] | None, allow_none: bool = False,
                 prompt_messages: list[list] | None = None) -> torch.Tensor:
    """reward's scores, checked; a reward that raises is a one-line error naming it and the prompt it failed on.
    allow_none: see checked_scores; prompt_messages: see call_reward."""
    missing = [column for part in named_parts(reward).values() for column in missing_columns(part, columns)]
    if missing:
        check_not_trainer_state(f"the reward {name}", missing[0])
        have = sorted(set(columns or {}) - set(ROLLOUT_COLUMNS))
        raise ConfigError(f"the reward {name} needs the dataset column {missing[0]!r}, which the prompts' rows do not "
                          f"have (they have {have or 'no column but the prompt'}); use data with that column (e.g. "
                          f"data=arithmetic) or another reward.")
    # the ranks' agreement at the block's end (several ranks) is not the reward's: outside the try
    with abandonable(f"the reward {name}", runs_collectives=bool(reward_models(reward))):  # sharded under fsdp2
        try:
            returned = call_reward(reward, prompts, completions, columns, prompt_messages)
        except (ConfigError, UnavailableError):  # already one line (a remote reward's, after its retries)
            raise
        except Exception as err:
            prompt = failing_prompt(reward, prompts, completions, columns or {}, prompt_messages)
            where = (f" on prompt {prompt[:80]!r}" if prompt is not None else
                     f" on a batch of {len(prompts)} completions")
            message = clipped_first_line(err)
            raise ConfigError(f"the reward {name} raised {type(err).__name__}: {message}{where}; fix the reward "
                              f"(the traceback: HYDRA_FULL_ERROR=1).") from err
    return checked_scores(name, returned, prompts, completions, allow_none)


def reads_column(reward, column: str) -> bool:
    """Whether a reward (or one of a WeightedSum's) may read `column`: it names it, or takes **kwargs."""
    for part in named_parts(reward).values():
        parameters = signature_of(part) or {}  # a builtin without a signature reads no column
        if column in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            return True
    return False


def reward_waits(reward) -> bool:
    """Whether a reward (or one of a WeightedSum's) waits on something outside the process (`waits = True`)."""
    return any(getattr(part, "waits", False) is True for part in named_parts(reward).values())


def reward_counts(reward) -> dict[str, float]:
    """{rewards/<name>/<what>: count} that rewards report with pop_stats() (e.g. a judge's unparsable answers)."""
    return {f"rewards/{name}/{key}": value for name, part in named_parts(reward).items()
            if callable(getattr(part, "pop_stats", None)) for key, value in part.pop_stats().items()}


def column_needs(reward, task_metrics, gold=None) -> list[tuple[str, str]]:
    """(what needs it, column) for every dataset column a reward component, the gold reward's or a task metric
    requires."""
    needs = reward_column_needs(reward, "the reward") + reward_column_needs(gold, "the gold reward")
    needs += [(f"task metric {metric.name}", metric.answer_column) for metric in task_metrics
              if getattr(metric, "answer_column", None)]
    return needs


def reward_column_needs(reward, who: str) -> list[tuple[str, str]]:
    if reward is None:
        return []
    rewards = named_parts(reward)
    needs = [(f"{who} {name}", column) for name, component in rewards.items()
             for column in missing_columns(component, {})]
    needs += [(f"{who} {name}", component.answer_column) for name, component in rewards.items()
              if isinstance(getattr(component, "answer_column", None), str)]
    needs += [(f"{who} {name}", column) for name, component in rewards.items()
              for column in getattr(component, "required_columns", None) or []]  # e.g. a reward server's
    return needs
