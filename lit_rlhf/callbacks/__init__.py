"""Lightning callbacks for RLHF runs."""

from lit_rlhf.callbacks.summary import TrainingSummary

__all__ = ["TrainingSummary"]
