"""Alias module for torchforge's import path: ``from forge.losses.reinforce_loss import ReinforceLoss``."""

from __future__ import annotations

from rlforge.losses.reinforce import ReinforceLoss, SimpleGRPOLoss

__all__ = ["ReinforceLoss", "SimpleGRPOLoss"]
