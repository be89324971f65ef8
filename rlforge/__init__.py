"""rlforge: PyTorch-native RL post-training for LLMs."""

import os

from lightning_utilities.core.rank_zero import rank_zero_only

# Lightning leaves the rank unset until a strategy sets it; read it from the launcher as Lightning does.
rank_zero_only.rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", os.environ.get("LOCAL_RANK", 0))))

from rlforge.callbacks import (  # noqa: E402
    Callback,
    EarlyStopping,
    EntropyCollapseGuard,
    KLMonitor,
    LearningRateMonitor,
    ModelCheckpoint,
    ProgressBar,
    SampleLogger,
    WeightSync,
)
from rlforge.data import RLDataModule  # noqa: E402
from rlforge.data.sft import SFTDataModule  # noqa: E402
from rlforge.generation import SamplingParams, TorchGenerator  # noqa: E402
from rlforge.grpo import GRPOModule  # noqa: E402
from rlforge.loggers import CSVLogger, Logger, TensorBoardLogger, WandbLogger  # noqa: E402
from rlforge.module import PolicyModule, RLModule  # noqa: E402
from rlforge.sft import SFTModule  # noqa: E402
from rlforge.strategies import LocalStrategy, Strategy  # noqa: E402
from rlforge.trainer import RLTrainer  # noqa: E402
from rlforge.types import Completion, Episode, Group, TrainBatch  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "CSVLogger",
    "Callback",
    "Completion",
    "EarlyStopping",
    "EntropyCollapseGuard",
    "Episode",
    "GRPOModule",
    "Group",
    "KLMonitor",
    "LearningRateMonitor",
    "LocalStrategy",
    "Logger",
    "ModelCheckpoint",
    "PolicyModule",
    "ProgressBar",
    "RLDataModule",
    "RLModule",
    "RLTrainer",
    "SFTDataModule",
    "SFTModule",
    "SampleLogger",
    "SamplingParams",
    "Strategy",
    "TensorBoardLogger",
    "TorchGenerator",
    "TrainBatch",
    "WandbLogger",
    "WeightSync",
]
