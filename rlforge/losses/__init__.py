"""Policy-gradient losses for LLM post-training: one file per family, each a transcription of its paper.

Every loss follows ``PolicyLoss``'s contract:
``forward(logprobs, ref_logprobs, advantages, padding_mask, old_logprobs=None) -> scalar`` plus
``last_metrics``. Select one in YAML with ``class_path: rlforge.losses.DAPOLoss``.
"""

from __future__ import annotations

from rlforge.losses.aggregation import AGGREGATION_MODES, aggregate
from rlforge.losses.base import PolicyLoss
from rlforge.losses.cispo import CISPOLoss
from rlforge.losses.dapo import DAPOLoss
from rlforge.losses.dr_grpo import DrGRPOLoss
from rlforge.losses.grpo import GRPOLoss
from rlforge.losses.gspo import GSPOLoss
from rlforge.losses.kl import KL_ESTIMATORS, k1, k2, k3, kl_estimate
from rlforge.losses.reinforce import ReinforceLoss, SimpleGRPOLoss
from rlforge.losses.sapo import SAPOLoss

__all__ = [
    "AGGREGATION_MODES",
    "KL_ESTIMATORS",
    "CISPOLoss",
    "DAPOLoss",
    "DrGRPOLoss",
    "GRPOLoss",
    "GSPOLoss",
    "PolicyLoss",
    "ReinforceLoss",
    "SAPOLoss",
    "SimpleGRPOLoss",
    "aggregate",
    "k1",
    "k2",
    "k3",
    "kl_estimate",
]
