"""Per-token divergences between a student's and a teacher's next-token distributions over the whole vocabulary, as
TRL's GKDTrainer computes them (`generalized_jsd_loss`, Agarwal et al. 2024, eq. 1):

    beta = 0    forward KL    KL(p_teacher || p_student)
    beta = 1    reverse KL    KL(p_student || p_teacher)
    otherwise   generalized JSD    beta KL(p_teacher || m) + (1 - beta) KL(p_student || m),  m = beta p_teacher +
                (1 - beta) p_student

both distributions the softmax of logits / temperature. Shapes: M positions, V vocabulary, H hidden.
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


def _chunk_divergence(student_hidden: torch.Tensor, student_head: torch.nn.Module, teacher_logits: torch.Tensor,
                      tokens: torch.Tensor, beta: float,
                      temperature: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logits = student_head(student_hidden).float()  # C,V
    student = torch.log_softmax(logits / temperature, dim=-1)  # C,V
    # over the student's vocabulary: a teacher's extra (padding) rows carry no token the student samples
    teacher = torch.log_softmax(teacher_logits[:, :logits.shape[-1]].float() / temperature, dim=-1)  # C,V
    divergence = generalized_jsd(student, teacher, beta)  # C
    token_logprobs = student.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # C
    with torch.no_grad():
        entropy = -(student.exp() * student).sum(-1)  # C
    return divergence, token_logprobs, entropy


def chunked_generalized_jsd(student_hidden: torch.Tensor, student_head: torch.nn.Module, teacher_logits_of,
                            tokens: torch.Tensor, beta: float, temperature: float,
                            chunk_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """generalized_jsd at M positions from the student's last hidden states (M,H, with gradient) and its output layer;
    `teacher_logits_of(positions)` gives the teacher's logits at a slice of them (C,V, called without gradient).
    chunk_size positions at a time, each chunk's (C,V) tensors recomputed in the backward pass rather than kept: no
    (M,V) tensor is ever held. -> divergence (M), the sampled tokens' logprobs (M; both with gradient) and the
    student's entropy (M)"""
    parts = []
    for start in range(0, student_hidden.shape[0], chunk_size):
        where = slice(start, start + chunk_size)
        with torch.no_grad():
            teacher_logits = teacher_logits_of(where)
        parts.append(checkpoint(_chunk_divergence, student_hidden[where], student_head, teacher_logits, tokens[where],
                                beta, temperature, use_reentrant=False))
    if not parts:
        empty = student_hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty, empty
    return tuple(torch.cat(values) for values in zip(*parts, strict=True))
