"""The preference losses of train_dpo.py's algo.loss_type, each computed as TRL's DPOTrainer computes the loss type of
that name (several, weighted by algo.loss_weights, add up as in TRL's MPO recipe).

Every loss reads a batch's B pairs through `PairLogprobs`: each response's summed logprob under the policy and the
reference and its token count. With x = beta * delta, delta = s(chosen) - s(rejected) and s(y) the f-divergence score
of the log-ratio log pi(y) - log ref(y) (itself for the default reverse KL, algo.f_divergence_type):

    sigmoid   -log sigmoid(x)                      (DPO)
    hinge     relu(1 - x)                          (SLiC)
    ipo       (delta / length - 1 / (2 beta))^2    (IPO; each score over its response's tokens, as TRL)
    robust    (-(1 - e) log sigmoid(x) + e log sigmoid(-x)) / (1 - 2e)   (rDPO; e = label_smoothing)
    ...

and the others of TRL's list (exo_pair, nca_pair, bco_pair, sppo_hard, aot, aot_unpaired, apo_zero, apo_down,
discopop, sft, sigmoid_norm) below, each with its paper in TRL's words. With use_weighting (WPO, TRL's name),
each pair's losses are weighted by how likely the policy finds its two responses (wpo_weights). Shapes: B pairs, R
response length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lit_rlhf.config.validation import check_choice, check_flag, check_number, is_number, warn_once
from lit_rlhf.errors import ConfigError

LOSS_TYPES = ("sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
              "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm")
F_DIVERGENCES = ("reverse_kl", "forward_kl", "js_divergence", "alpha_divergence")
READ_LABEL_SMOOTHING = ("robust", "exo_pair", "aot", "aot_unpaired")  # the loss types label_smoothing enters


@dataclass
class PairLogprobs:
    """Summed response logprobs of B pairs under the policy and the reference, and the responses' token counts."""

    policy_chosen: torch.Tensor  # B
    policy_rejected: torch.Tensor  # B
    reference_chosen: torch.Tensor  # B
    reference_rejected: torch.Tensor  # B
    chosen_tokens: torch.Tensor  # B
    rejected_tokens: torch.Tensor  # B

    @property
    def chosen_logratios(self) -> torch.Tensor:
        return self.policy_chosen - self.reference_chosen

    @property
    def rejected_logratios(self) -> torch.Tensor:
        return self.policy_rejected - self.reference_rejected


def f_divergence_scores(logratios: torch.Tensor, divergence: str, alpha: float) -> torch.Tensor:
    """f'(pi / ref) with its constants dropped (f-DPO, Wang et al. 2023), as TRL's f_divergence_type: the log-ratio
    itself for reverse_kl (standard DPO)."""
    if divergence == "reverse_kl" or (divergence == "alpha_divergence" and abs(alpha - 1.0) < 1e-6):
        return logratios
    if divergence == "forward_kl":
        return -torch.exp(-logratios)
    if divergence == "js_divergence":
        return F.logsigmoid(logratios)
    # alpha_divergence: (t^(alpha-1) - 1) / (alpha - 1), the -1 dropped; exp in float32 at least, its exponent clamped
    # so that the result stays finite in the logprobs' dtype
    t = (alpha - 1.0) * logratios
    t = t.float() if t.dtype in (torch.float16, torch.bfloat16) else t
    limit = 11.0 if logratios.dtype == torch.float16 else 80.0
    return torch.exp(t.clamp(max=limit)).to(logratios.dtype) / (alpha - 1.0)


def pair_loss(loss_type: str, pairs: PairLogprobs, beta: float, label_smoothing: float = 0.0,
              discopop_tau: float = 0.05, divergence: str = "reverse_kl", divergence_alpha: float = 0.5,
              cdpo_epsilon: float = 0.0) -> torch.Tensor:
    """The loss of each pair under `loss_type` (TRL's formula of that name; sigmoid with cdpo_epsilon > 0:
    conservative DPO, each label taken as flipped with that probability). -> B"""
    chosen = f_divergence_scores(pairs.chosen_logratios, divergence, divergence_alpha)  # B
    rejected = f_divergence_scores(pairs.rejected_logratios, divergence, divergence_alpha)  # B
    delta = chosen - rejected
    x, e = beta * delta, label_smoothing
    if loss_type == "sigmoid":
        return -(1 - cdpo_epsilon) * F.logsigmoid(x) - cdpo_epsilon * F.logsigmoid(-x)
    if loss_type == "hinge":
        return torch.relu(1 - x)
    if loss_type in ("ipo", "sigmoid_norm"):  # the scores averaged over each response's tokens
        average = chosen / pairs.chosen_tokens.clamp(min=1) - rejected / pairs.rejected_tokens.clamp(min=1)
        return (average - 1 / (2 * beta)) ** 2 if loss_type == "ipo" else -F.logsigmoid(beta * average)
    if loss_type == "exo_pair":  # EXO-pref (Ji et al. 2024): KL(softmax(x) over the pair || [1 - e, e])
        return (torch.sigmoid(x) * (F.logsigmoid(x) - math.log1p(-e))
                + torch.sigmoid(-x) * (F.logsigmoid(-x) - math.log(e)))
    if loss_type == "nca_pair":  # NCA (Chen et al. 2024)
        return -F.logsigmoid(beta * chosen) - 0.5 * F.logsigmoid(-beta * chosen) - 0.5 * F.logsigmoid(-beta * rejected)
    if loss_type == "robust":  # rDPO (Chowdhury et al. 2024): unbiased under labels flipped with probability e
        return (-(1 - e) * F.logsigmoid(x) + e * F.logsigmoid(-x)) / (1 - 2 * e)
    if loss_type == "bco_pair":  # BCO on pairs (Jung et al. 2024)
        return -F.logsigmoid(beta * chosen) - F.logsigmoid(-beta * rejected)
    if loss_type == "sppo_hard":  # SPPO with hard win probabilities (Wu et al. 2024)
        return (chosen - 0.5 / beta) ** 2 + (rejected + 0.5 / beta) ** 2
    if loss_type in ("aot", "aot_unpaired"):  # AOT (Melnyk et al. 2024): the batch's sorted quantities compared
        if loss_type == "aot":
            policy = torch.sort(pairs.policy_chosen - pairs.policy_rejected, dim=0).values
            delta = policy - torch.sort(pairs.reference_chosen - pairs.reference_rejected, dim=0).values
        else:
            delta = (torch.sort(pairs.chosen_logratios, dim=0).values
                     - torch.sort(pairs.rejected_logratios, dim=0).values)
        return -F.logsigmoid(beta * delta) * (1 - e) - F.logsigmoid(-beta * delta) * e
    if loss_type == "apo_zero":  # APO-zero (D'Oosterlinck et al. 2024): chosen up, rejected down
        return 1 - torch.sigmoid(beta * pairs.chosen_logratios) + torch.sigmoid(beta * pairs.rejected_logratios)
    if loss_type == "apo_down":  # APO-down: both down, rejected more
        return torch.sigmoid(beta * pairs.chosen_logratios) + 1 - torch.sigmoid(x)
    if loss_type == "discopop":  # DiscoPOP (Chris Lu et al. 2024): logistic and exponential blended by x / tau
        modulation = torch.sigmoid(x / discopop_tau)
        return -F.logsigmoid(x) * (1 - modulation) + torch.exp(-x) * modulation
    if loss_type == "sft":  # the chosen responses' token-mean cross-entropy, the same for every pair
        sft = -pairs.policy_chosen.sum() / pairs.chosen_tokens.sum().clamp(min=1)
        return sft.expand(len(pairs.policy_chosen))
    raise ValueError(f"unknown loss type {loss_type!r}; one of {', '.join(LOSS_TYPES)}")


@torch.no_grad()
def wpo_weights(token_logprobs: torch.Tensor, log_sum_p2: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
    """WPO (Zhou et al. 2024) as TRL's use_weighting: a response's weight is exp(the mean over its tokens of
    log p(y_t) - log sum_v p_v^2), the policy's probability of the token against that of a token drawn from the
    policy itself; a pair's weight is the product of its two. No gradient. token_logprobs, log_sum_p2 and the response
    mask: (2B,R) for B chosen then B rejected responses. -> B"""
    lengths = response.sum(-1).clamp(min=1)  # 2B
    mean = ((token_logprobs - log_sum_p2) * response).sum(-1) / lengths  # 2B
    chosen, rejected = torch.exp(mean).chunk(2)
    return chosen * rejected


@dataclass
class DPOLoss:
    """train_dpo.py's loss settings (TRL's DPOConfig names but cdpo_epsilon), checked at construction; called on a
    batch's PairLogprobs: the sum over the loss types of weight x the mean of its pair losses (TRL's combination)."""

    loss_type: str | list[str] = "sigmoid"
    loss_weights: list[float] | None = None
    beta: float = 0.1
    label_smoothing: float = 0.0
    cdpo_epsilon: float = 0.0
    discopop_tau: float = 0.05
    f_divergence_type: str = "reverse_kl"
    f_alpha_divergence_coef: float = 0.5
    use_weighting: bool = False

    def __post_init__(self):
        self.loss_types = [self.loss_type] if isinstance(self.loss_type, str) else list(self.loss_type or [])
        check_loss_settings(self)
        self.weights = list(self.loss_weights) if self.loss_weights is not None else [1.0] * len(self.loss_types)

    def __call__(self, pairs: PairLogprobs, pair_weights: torch.Tensor | None = None) -> torch.Tensor:
        """pair_weights (B): each pair's losses multiplied by its weight before the mean (use_weighting's
        wpo_weights)."""
        settings = {"label_smoothing": self.label_smoothing, "discopop_tau": self.discopop_tau,
                    "divergence": self.f_divergence_type, "divergence_alpha": self.f_alpha_divergence_coef,
                    "cdpo_epsilon": self.cdpo_epsilon}
        weighted = (lambda losses: losses) if pair_weights is None else (lambda losses: losses * pair_weights)
        return sum(weight * weighted(pair_loss(loss_type, pairs, self.beta, **settings)).mean()
                   for loss_type, weight in zip(self.loss_types, self.weights, strict=True))


def check_loss_settings(loss: DPOLoss) -> None:
    """One line per setting that TRL's loss would reject, that would make it non-finite, or that the chosen loss
    types never read."""
    if not loss.loss_types or not all(isinstance(t, str) for t in loss.loss_types):
        raise ConfigError(f"algo.loss_type={loss.loss_type!r} must be a loss type or a list of them, of "
                          f"{', '.join(LOSS_TYPES)}.")
    for loss_type in loss.loss_types:
        check_choice("loss_type", loss_type, LOSS_TYPES)
    if loss.loss_weights is not None and (
            not isinstance(loss.loss_weights, (list, tuple)) or len(loss.loss_weights) != len(loss.loss_types)
            or not all(is_number(w) and math.isfinite(w) for w in loss.loss_weights)):
        raise ConfigError(f"algo.loss_weights={loss.loss_weights!r} must be a list of {len(loss.loss_types)} finite "
                          f"number(s), one per algo.loss_type (null: 1 each).")
    if not (is_number(loss.beta) and math.isfinite(loss.beta) and loss.beta > 0):
        raise ConfigError(f"algo.beta={loss.beta!r} must be a finite number > 0 (TRL's default 0.1).")
    for name in ("label_smoothing", "cdpo_epsilon"):
        value = getattr(loss, name)
        if not (is_number(value) and 0 <= value < 0.5):
            raise ConfigError(f"algo.{name}={value!r} must be a number in [0, 0.5) (0: off).")
    check_number("discopop_tau", loss.discopop_tau, minimum=0, strictly=True)
    check_choice("f_divergence_type", loss.f_divergence_type, F_DIVERGENCES)
    check_number("f_alpha_divergence_coef", loss.f_alpha_divergence_coef)
    check_flag("algo.use_weighting", loss.use_weighting)
    if loss.use_weighting and (sorted_types := [t for t in loss.loss_types if t in ("aot", "aot_unpaired")]):
        raise ConfigError(f"algo.use_weighting=true weights each pair, and algo.loss_type={sorted_types[0]} compares "
                          f"the batch's sorted quantities, not pairs (TRL refuses it too); drop one of them.")
    readers = [t for t in loss.loss_types if t in READ_LABEL_SMOOTHING]
    if loss.label_smoothing and not readers:  # TRL's sigmoid loss ignores it: a user expecting cDPO is told
        raise ConfigError(f"algo.label_smoothing={loss.label_smoothing} is read by algo.loss_type="
                          f"{'|'.join(READ_LABEL_SMOOTHING)} only, not by {','.join(loss.loss_types)} (TRL's sigmoid "
                          f"loss ignores it); conservative DPO is algo.cdpo_epsilon here.")
    if "exo_pair" in loss.loss_types and not loss.label_smoothing:
        raise ConfigError("algo.loss_type=exo_pair needs algo.label_smoothing > 0 (its target distribution's epsilon; "
                          "the EXO paper recommends 1e-3).")
    if loss.cdpo_epsilon and "sigmoid" not in loss.loss_types:
        raise ConfigError(f"algo.cdpo_epsilon={loss.cdpo_epsilon} makes algo.loss_type=sigmoid conservative, and the "
                          f"loss types are {','.join(loss.loss_types)}; for label noise use algo.loss_type=robust "
                          f"algo.label_smoothing={loss.cdpo_epsilon}.")
    for line in idle_loss_settings(loss):
        warn_once(line)


def idle_loss_settings(loss: DPOLoss) -> list[str]:
    said = []
    if loss.discopop_tau != 0.05 and "discopop" not in loss.loss_types:
        said.append(f"algo.discopop_tau={loss.discopop_tau} shapes algo.loss_type=discopop, which is not among the "
                    f"loss types: it does nothing; drop it.")
    if loss.f_alpha_divergence_coef != 0.5 and loss.f_divergence_type != "alpha_divergence":
        said.append(f"algo.f_alpha_divergence_coef={loss.f_alpha_divergence_coef} is the alpha of algo."
                    f"f_divergence_type=alpha_divergence, and it is {loss.f_divergence_type}: it does nothing; drop "
                    f"it.")
    return said
