"""Rewards: callables ``(prompt, response, target) -> float`` and the runner that applies them to a batch.

Select them in YAML by ``class_path`` (a ``Reward`` subclass, e.g. ``rlforge.rewards.MathReward``) or give a
plain function by import path (``my_project.rewards.exact_match``). Rewards never ``eval`` model output.
"""

from rlforge.rewards.base import Reward, RewardFn, check_reward, import_reward_fn
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

# The built-in reward classes are Rewards: a config may construct them by class_path.
for _cls in (CompositeReward, FormatReward, LengthPenalty, MathReward, ThinkingReward):
    Reward.register(_cls)
del _cls

__all__ = [
    "EXTRACTORS",
    "CompositeReward",
    "FormatReward",
    "LengthPenalty",
    "MathReward",
    "Reward",
    "RewardFn",
    "RewardResult",
    "RewardRunner",
    "ThinkingReward",
    "extract_answer_is",
    "extract_answer_tag",
    "extract_boxed",
    "extract_hash",
    "is_too_costly",
    "check_reward",
    "import_reward_fn",
    "normalize_answer",
    "parse_number",
    "reward_name",
    "strip_thinking",
    "unique_reward_names",
]
