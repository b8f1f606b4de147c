"""Lightning callbacks for RLHF runs; each works in any Lightning project."""

from lit_rlhf.callbacks.checkpoint import LastCheckpoint
from lit_rlhf.callbacks.curves import CurvesPlot
from lit_rlhf.callbacks.evaluation import PolicyEvaluation
from lit_rlhf.callbacks.histograms import Histograms
from lit_rlhf.callbacks.interrupt import CheckpointOnInterrupt
from lit_rlhf.callbacks.kl_controller import KLController, adaptive_kl_update
from lit_rlhf.callbacks.normalizer import RewardNormalizer
from lit_rlhf.callbacks.progress import RLStepsProgressBar
from lit_rlhf.callbacks.samples import GenerationSamples
from lit_rlhf.callbacks.summary import TrainingSummary

__all__ = ["CheckpointOnInterrupt", "CurvesPlot", "GenerationSamples", "Histograms", "KLController",
           "LastCheckpoint", "PolicyEvaluation", "RLStepsProgressBar", "RewardNormalizer", "TrainingSummary",
           "adaptive_kl_update"]
