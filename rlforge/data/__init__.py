"""Prompt data: built-in synthetic tasks, local/HF datasets, the episode collate function."""

from rlforge.data.collate import collate_episodes
from rlforge.data.datamodule import RLDataModule
from rlforge.data.prompts import TARGET_FORMATS, encode_chat_prompt, extract_target, load_prompt_rows
from rlforge.data.tasks import TASKS, TaskSplits, make_task

__all__ = [
    "TARGET_FORMATS",
    "TASKS",
    "RLDataModule",
    "TaskSplits",
    "collate_episodes",
    "encode_chat_prompt",
    "extract_target",
    "load_prompt_rows",
    "make_task",
]
