"""Loggers: CSV (default), Weights & Biases and TensorBoard; pass several as a list."""

from rlforge.loggers.base import FolderLogger, Logger
from rlforge.loggers.csv_logger import CSVLogger
from rlforge.loggers.tensorboard_logger import TensorBoardLogger
from rlforge.loggers.wandb_logger import WandbLogger

__all__ = ["configure_loggers", "CSVLogger", "FolderLogger", "Logger", "TensorBoardLogger", "WandbLogger"]


def configure_loggers(logger: Logger | list[Logger] | bool | None) -> list[Logger]:
    """``RLTrainer(logger=...)`` as a list: ``True`` is a ``CSVLogger``, ``False``/``None`` none."""
    if logger is True:
        return [CSVLogger()]
    if logger is False or logger is None:
        return []
    return list(logger) if isinstance(logger, (list, tuple)) else [logger]
