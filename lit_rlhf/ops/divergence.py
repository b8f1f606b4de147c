"""Per-token divergences between a student's and a teacher's next-token distributions over the whole vocabulary, as
TRL's GKDTrainer computes them (`generalized_jsd_loss`, Agarwal et al. 2024, eq. 1):

    beta = 0    forward KL    KL(p_teacher || p_student)
    beta = 1    reverse KL    KL(p_student || p_teacher)
    otherwise   generalized JSD    beta KL(p_teacher || m) + (1 - beta) KL(p_student || m),  m = beta p_teacher +
                (1 - beta) p_student

both distributions the softmax of logits / temperature. A teacher that gives only its K most likely tokens (a
served one: vLLM's `logprobs: K`) is compared over K + 1 outcomes, its K tokens and "any other token", each side's
mass outside them lumped into the last (`top_k_generalized_jsd`): the divergence of the two coarsened distributions,
never more than the full one's, and equal to it when the K tokens hold all of the teacher's mass.
Shapes: M positions, V vocabulary, H hidden, K teacher tokens.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def generalized_jsd(student_log_probs: torch.Tensor, teacher_log_probs: torch.Tensor, beta: float) -> torch.Tensor:
    """The divergence of each position from normalized log-probabilities. (..., V), (..., V) -> (...)"""
    if beta == 0:
        return F.kl_div(student_log_probs, teacher_log_probs, reduction="none", log_target=True).sum(-1)
    if beta == 1:
        return F.kl_div(teacher_log_probs, student_log_probs, reduction="none", log_target=True).sum(-1)
    mixture = torch.logaddexp(student_log_probs + math.log1p(-beta), teacher_log_probs + math.log(beta))
    to_teacher = F.kl_div(mixture, teacher_log_probs, reduction="none", log_target=True).sum(-1)
    to_student = F.kl_div(mixture, student_log_probs, reduction="none", log_target=True).sum(-1)
    return beta * to_teacher + (1 - beta) * to_student


def top_k_generalized_jsd(student_log_probs: torch.Tensor, teacher_ids: torch.Tensor,
                          teacher_log_probs: torch.Tensor, beta: float) -> torch.Tensor:
    """generalized_jsd over the teacher's K tokens and the rest. student_log_probs: (..., V) normalized;
    teacher_ids, teacher_log_probs: (..., K), an entry with a log-probability of -inf is padding. -> (...)"""
    valid = torch.isfinite(teacher_log_probs)  # ..., K
    student = student_log_probs.gather(-1, teacher_ids)  # ..., K
    # padding: the same value on both sides, where every term of the divergence is exactly 0
    student, teacher = student.masked_fill(~valid, 0.0), teacher_log_probs.masked_fill(~valid, 0.0)
    sides = [torch.cat([side, rest_log_mass(side, valid)], dim=-1) for side in (student, teacher)]  # ..., K+1
    return generalized_jsd(*sides, beta)


def rest_log_mass(log_probs: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """log(1 - the probability of the valid entries), at least log(1e-30) (rounding can make the mass 1 or above).
    (..., K) -> (..., 1)"""
    mass = (log_probs.exp() * valid).sum(-1, keepdim=True)
    return torch.log((1 - mass).clamp(min=1e-30))


def _chunk_divergence(student_hidden: torch.Tensor, student_head: torch.nn.Module, divergence,
                      teacher: tuple[torch.Tensor, ...], tokens: torch.Tensor,
                      temperature: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logits = student_head(student_hidden).float()  # C,V
    student = torch.log_softmax(logits / temperature, dim=-1)  # C,V
    token_logprobs = student.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # C
    with torch.no_grad():
        entropy = -(student.exp() * student).sum(-1)  # C
    return divergence(student, *teacher), token_logprobs, entropy


def full_teacher(beta: float, temperature: float):
    """The divergence of a chunk from the teacher's logits there (C,V'): softmax(logits / temperature) over the
    student's V entries (a teacher's extra, padding rows carry no token the student samples)."""
    def divergence(student: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
        teacher = torch.log_softmax(teacher_logits[:, :student.shape[-1]].float() / temperature, dim=-1)  # C,V
        return generalized_jsd(student, teacher, beta)  # C
    return divergence


def chunked_generalized_jsd(student_hidden: torch.Tensor, student_head: torch.nn.Module, teacher_of,
                            tokens: torch.Tensor, beta: float, temperature: float, chunk_size: int,
                            top_k: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """generalized_jsd at M positions from the student's last hidden states (M,H, with gradient) and its output layer;
    `teacher_of(positions)` gives the teacher at a slice of them (called without gradient): its logits (C,V), or
    with top_k its (ids, log-probabilities) of its K tokens (C,K each; top_k_generalized_jsd).
    chunk_size positions at a time, each chunk's (C,V) tensors recomputed in the backward pass rather than kept: no
    (M,V) tensor is ever held. -> divergence (M), the sampled tokens' logprobs (M; both with gradient) and the
    student's entropy (M)"""
    divergence = ((lambda student, ids, log_probs: top_k_generalized_jsd(student, ids, log_probs, beta)) if top_k
                  else full_teacher(beta, temperature))
    parts = []
    for start in range(0, student_hidden.shape[0], chunk_size):
        where = slice(start, start + chunk_size)
        with torch.no_grad():
            teacher = teacher_of(where)
        teacher = teacher if isinstance(teacher, tuple) else (teacher,)
        parts.append(checkpoint(_chunk_divergence, student_hidden[where], student_head, divergence, teacher,
                                tokens[where], temperature, use_reentrant=False))
    if not parts:
        empty = student_hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty, empty
    return tuple(torch.cat(values) for values in zip(*parts, strict=True))
