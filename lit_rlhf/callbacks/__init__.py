"""Lightning callbacks for RLHF runs; each works in any Lightning project. They observe the module through
RLHFModuleView (callbacks/protocol.py) and change nothing in the training maths."""

from lit_rlhf.callbacks.busy import BusyMachineCheck
from lit_rlhf.callbacks.checkpoint import LastCheckpoint
from lit_rlhf.callbacks.curves import CurvesPlot
from lit_rlhf.callbacks.evaluation import PolicyEvaluation
from lit_rlhf.callbacks.gold import GoldCurve, GoldReward
from lit_rlhf.callbacks.histograms import Histograms
from lit_rlhf.callbacks.interrupt import CheckpointOnInterrupt
from lit_rlhf.callbacks.monitor import HackingSigns, RewardHackingMonitor
from lit_rlhf.callbacks.progress import ProgressLines
from lit_rlhf.callbacks.protocol import RLHFModuleView
from lit_rlhf.callbacks.samples import GenerationSamples
from lit_rlhf.callbacks.summary import TrainingSummary
from lit_rlhf.display import ModelSummaryTable, RLStepsProgressBar

__all__ = ["BusyMachineCheck", "CheckpointOnInterrupt", "CurvesPlot", "GenerationSamples", "GoldCurve", "GoldReward",
           "HackingSigns", "Histograms", "LastCheckpoint", "ModelSummaryTable", "PolicyEvaluation", "ProgressLines",
           "RLHFModuleView", "RLStepsProgressBar", "RewardHackingMonitor", "TrainingSummary"]
