"""A plain reverse loop for GAE, shared by the ops and PPO tests."""

import torch


def gae_reverse_loop(rewards, values, mask, gamma, lam):
    """Plain reverse Python loop over one sequence at a time, on its real tokens only."""
    advantages = torch.zeros_like(rewards)
    for n in range(rewards.shape[0]):
        length = int(mask[n].sum())
        last = 0.0
        for t in reversed(range(length)):
            next_value = values[n, t + 1].item() if t + 1 < length else 0.0
            delta = rewards[n, t].item() + gamma * next_value - values[n, t].item()
            last = delta + gamma * lam * last
            advantages[n, t] = last
    return advantages
