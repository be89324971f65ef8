"""Loggers: CSV (default), Weights & Biases and TensorBoard; pass several as a list."""

from rlforge.loggers.base import FolderLogger, Logger
from rlforge.loggers.csv_logger import CSVLogger
from rlforge.loggers.tensorboard_logger import TensorBoardLogger
from rlforge.loggers.wandb_logger import WandbLogger

__all__ = ["CSVLogger", "FolderLogger", "Logger", "TensorBoardLogger", "WandbLogger"]
