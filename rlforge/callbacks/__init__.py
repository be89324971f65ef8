"""Built-in callbacks; user callbacks subclass ``Callback``."""

from rlforge.callbacks.callback import Callback
from rlforge.callbacks.checkpoint import ModelCheckpoint
from rlforge.callbacks.early_stopping import EarlyStopping
from rlforge.callbacks.entropy_guard import EntropyCollapseGuard
from rlforge.callbacks.kl_monitor import KLMonitor
from rlforge.callbacks.lr_monitor import LearningRateMonitor
from rlforge.callbacks.progress import ProgressBar
from rlforge.callbacks.sample_logger import SampleLogger
from rlforge.callbacks.weight_sync import WeightSync

__all__ = [
    "Callback",
    "EarlyStopping",
    "EntropyCollapseGuard",
    "KLMonitor",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ProgressBar",
    "SampleLogger",
    "WeightSync",
]
