"""Tasks with verifiable answers: their rewards (the dataset's reference answer as ground truth) and metrics."""
