"""Over-optimization measured with a gold reward (Gao, Schulman, Hilton 2022): the gold score against d = sqrt(KL to
the reference), and the RL form fitted to it. The gold reward is scored by the Sampler beside the trained one
(callbacks.GoldReward) and drawn against the KL by callbacks.GoldCurve."""

from __future__ import annotations

import math

import torch

PEAK_EXPONENT_LIMIT = 300.0  # d* = e^300 at most: its square and gain stay finite floats (exp overflows past ~709)


def fit_rl_form(sqrt_kl: list[float], gold_gain: list[float]) -> dict[str, float] | None:
    """Least squares of gold_gain = d (alpha - beta log d) over the points with d > 0 (Gao et al.'s RL form; the
    gain is the gold score minus the initial policy's). -> alpha, beta, and where the fitted curve peaks: d* =
    exp(alpha / beta - 1), KL* = d*^2 (beta > 0; else no peak within the form; `peak_beyond_range` when d* would
    exceed e^300)."""
    points = [(d, y) for d, y in zip(sqrt_kl, gold_gain, strict=True) if d > 0]
    if len(points) < 3:
        return None
    design = torch.tensor([[d, -d * math.log(d)] for d, _ in points], dtype=torch.float64)  # P,2
    target = torch.tensor([y for _, y in points], dtype=torch.float64)  # P
    alpha, beta = torch.linalg.lstsq(design, target.unsqueeze(1)).solution.squeeze(1).tolist()
    fit = {"alpha": alpha, "beta": beta, "points": len(points)}
    if beta > 0:
        exponent = alpha / beta - 1
        if exponent > PEAK_EXPONENT_LIMIT:  # a tiny beta: the fitted curve keeps rising far past any reachable KL
            fit["peak_beyond_range"] = True
        else:
            peak = math.exp(exponent)
            fit.update(peak_sqrt_kl=peak, peak_kl=peak ** 2, peak_gain=peak * (alpha - beta * math.log(peak)))
    return fit
