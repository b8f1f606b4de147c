"""The full-vocabulary divergences of algo.divergence=generalized_jsd against their definitions written out with
probabilities, one vocabulary entry at a time, and the chunked computation against the whole one (values and
gradients)."""

import math

import pytest
import torch

from lit_rlhf.ops.divergence import chunked_generalized_jsd, generalized_jsd, top_k_generalized_jsd


def softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    return [e / sum(exps) for e in exps]


def slow_divergence(student_logits: list[float], teacher_logits: list[float], beta: float) -> float:
    """beta KL(t || m) + (1 - beta) KL(s || m), m = beta t + (1 - beta) s; KL(t || s) at 0 and KL(s || t) at 1."""
    return divergence_of_probabilities(softmax(student_logits), softmax(teacher_logits), beta)


def divergence_of_probabilities(s: list[float], t: list[float], beta: float) -> float:
    def kl(p, q):
        return sum(pi * (math.log(pi) - math.log(qi)) for pi, qi in zip(p, q, strict=True) if pi > 0)

    if beta == 0:
        return kl(t, s)
    if beta == 1:
        return kl(s, t)
    m = [beta * ti + (1 - beta) * si for si, ti in zip(s, t, strict=True)]
    return beta * kl(t, m) + (1 - beta) * kl(s, m)


@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_each_position_equals_the_definition(beta):
    torch.manual_seed(0)
    student, teacher = torch.randn(5, 7, dtype=torch.float64) * 2, torch.randn(5, 7, dtype=torch.float64) * 2
    got = generalized_jsd(student.log_softmax(-1), teacher.log_softmax(-1), beta)
    expected = [slow_divergence(s.tolist(), t.tolist(), beta) for s, t in zip(student, teacher, strict=True)]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))
    same = generalized_jsd(student.log_softmax(-1), student.log_softmax(-1), beta)
    torch.testing.assert_close(same, torch.zeros(5, dtype=torch.float64))  # no divergence from itself


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_chunks_give_the_values_and_gradients_of_the_whole_computation(beta):
    torch.manual_seed(0)
    head, teacher_head = torch.nn.Linear(6, 11), torch.nn.Linear(6, 11)
    hidden, teacher_hidden = torch.randn(9, 6, requires_grad=True), torch.randn(9, 6)
    tokens = torch.randint(0, 11, (9,))
    divergence, logprobs, entropy = chunked_generalized_jsd(hidden, head, lambda at: teacher_head(teacher_hidden[at]),
                                                            tokens, beta, temperature=0.7, chunk_size=4)
    (divergence.sum() + logprobs.sum()).backward()
    chunked_grads = [hidden.grad.clone(), head.weight.grad.clone()]
    hidden.grad, head.weight.grad = None, None

    student = (head(hidden) / 0.7).log_softmax(-1)
    whole = generalized_jsd(student, (teacher_head(teacher_hidden) / 0.7).log_softmax(-1).detach(), beta)
    whole_logprobs = student.gather(-1, tokens[:, None]).squeeze(-1)
    (whole.sum() + whole_logprobs.sum()).backward()
    torch.testing.assert_close(divergence, whole)
    torch.testing.assert_close(logprobs, whole_logprobs)
    torch.testing.assert_close(entropy, -(student.exp() * student).sum(-1).detach())
    torch.testing.assert_close(chunked_grads[0], hidden.grad)
    torch.testing.assert_close(chunked_grads[1], head.weight.grad)
    assert teacher_head.weight.grad is None  # the teacher is never trained


def coarse_divergence(student_logits: list[float], teacher_logits: list[float], kept: list[int], beta: float) -> float:
    """The divergence of the two distributions over the kept tokens and one outcome "any other token", written out:
    each side's probabilities of the kept tokens, then 1 minus their sum."""
    def coarse(probs):
        kept_probs = [probs[i] for i in kept]
        return kept_probs + [1 - sum(kept_probs)]

    return divergence_of_probabilities(coarse(softmax(student_logits)), coarse(softmax(teacher_logits)), beta)


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_a_top_k_teacher_is_compared_over_its_tokens_and_the_rest(beta):
    """The teacher's 3 most likely tokens of 9 (a row padded to 4 entries by -inf) against the definition; with all
    9 tokens kept the divergence is the full one."""
    torch.manual_seed(1)
    student, teacher = torch.randn(4, 9, dtype=torch.float64) * 2, torch.randn(4, 9, dtype=torch.float64) * 2
    teacher_log_probs = teacher.log_softmax(-1)
    top = teacher_log_probs.topk(3, dim=-1)
    ids = torch.cat([top.indices, torch.zeros(4, 1, dtype=torch.long)], -1)  # 4,4: the last entry padding
    log_probs = torch.cat([top.values, torch.full((4, 1), float("-inf"), dtype=torch.float64)], -1)
    got = top_k_generalized_jsd(student.log_softmax(-1), ids, log_probs, beta)
    expected = [coarse_divergence(s.tolist(), t.tolist(), i[:3].tolist(), beta)
                for s, t, i in zip(student, teacher, ids, strict=True)]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))
    everything = teacher_log_probs.topk(9, dim=-1)
    whole = top_k_generalized_jsd(student.log_softmax(-1), everything.indices, everything.values, beta)
    torch.testing.assert_close(whole, generalized_jsd(student.log_softmax(-1), teacher_log_probs, beta))
    assert (got <= whole + 1e-12).all()  # coarser outcomes never diverge more


def test_top_k_chunks_give_the_values_and_gradients_of_the_whole_computation():
    torch.manual_seed(0)
    head = torch.nn.Linear(6, 11)
    hidden = torch.randn(9, 6, requires_grad=True)
    tokens = torch.randint(0, 11, (9,))
    top = torch.randn(9, 11).log_softmax(-1).topk(4, dim=-1)
    divergence, _, _ = chunked_generalized_jsd(hidden, head, lambda at: (top.indices[at], top.values[at]), tokens,
                                               0.5, temperature=1.0, chunk_size=4, top_k=True)
    divergence.sum().backward()
    chunked_grad = hidden.grad.clone()
    hidden.grad = None
    whole = top_k_generalized_jsd(head(hidden).log_softmax(-1), top.indices, top.values, 0.5)
    whole.sum().backward()
    torch.testing.assert_close(divergence, whole)
    torch.testing.assert_close(chunked_grad, hidden.grad)
