"""Rewards: callables ``(prompt, response, target) -> float`` and the runner that applies them to a batch.

Select them in YAML by ``class_path`` (e.g. ``rlforge.rewards.MathReward``). Rewards never ``eval``
model output.
"""

from rlforge.rewards.composite import CompositeReward
from rlforge.rewards.extract import (
    EXTRACTORS,
    extract_answer_is,
    extract_answer_tag,
    extract_boxed,
    extract_hash,
    strip_thinking,
)
from rlforge.rewards.format import FormatReward
from rlforge.rewards.length import LengthPenalty
from rlforge.rewards.math import MathReward
from rlforge.rewards.naming import reward_name, unique_reward_names
from rlforge.rewards.normalize import is_too_costly, normalize_answer, parse_number
from rlforge.rewards.runner import RewardResult, RewardRunner
from rlforge.rewards.thinking import ThinkingReward

__all__ = [
    "EXTRACTORS",
    "CompositeReward",
    "FormatReward",
    "LengthPenalty",
    "MathReward",
    "RewardResult",
    "RewardRunner",
    "ThinkingReward",
    "extract_answer_is",
    "extract_answer_tag",
    "extract_boxed",
    "extract_hash",
    "is_too_costly",
    "normalize_answer",
    "parse_number",
    "reward_name",
    "strip_thinking",
    "unique_reward_names",
]
