"""Prompt data: built-in synthetic tasks, local/HF datasets, the episode collate function."""

from rlforge.data.collate import collate_episodes
from rlforge.data.datamodule import RLDataModule, load_rows
from rlforge.data.tasks import TASKS, TaskSplits, make_task

__all__ = ["TASKS", "RLDataModule", "TaskSplits", "collate_episodes", "load_rows", "make_task"]
