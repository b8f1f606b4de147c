"""Statistics: per-prompt means, bootstrap intervals and distinct-n (estimates), and the statistics of a drawn batch
that every RL step logs (rollout)."""
