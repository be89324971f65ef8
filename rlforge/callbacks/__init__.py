"""Built-in callbacks; user callbacks subclass ``Callback``."""

from rlforge.callbacks.callback import Callback
from rlforge.callbacks.checkpoint import ModelCheckpoint
from rlforge.callbacks.progress import ProgressBar
from rlforge.callbacks.weight_sync import WeightSync

__all__ = ["Callback", "ModelCheckpoint", "ProgressBar", "WeightSync"]
