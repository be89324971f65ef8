"""Loggers: CSV (default); W&B and TensorBoard follow the same contract."""

from rlforge.loggers.base import Logger
from rlforge.loggers.csv_logger import CSVLogger

__all__ = ["CSVLogger", "Logger"]
