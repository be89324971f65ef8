"""A picklable recipe of the policy: actors rebuild the model from it and receive the weights separately."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass
class PolicySpec:
    """How an actor builds an empty copy of the policy (weights come through the weight buffer).

    Hugging Face models travel as their config (a few KB, whatever the model size); any other
    ``nn.Module`` travels as a deep copy.

    Attributes:
        config: The HF ``PretrainedConfig`` (``None`` for a plain module).
        generation_config: The HF ``GenerationConfig`` (EOS ids), if any.
        dtype: Parameter dtype.
        module: A copy of a non-HF policy.
    """

    config: Any = None
    generation_config: Any = None
    dtype: torch.dtype = torch.float32
    module: nn.Module | None = None

    @classmethod
    def of(cls, policy: nn.Module) -> PolicySpec:
        """The spec of ``policy``; a non-HF policy with ``to_hf_model()`` (torchtitan) travels as its HF twin,
        whose weights are the policy's ``state_dict()`` under HF names."""
        to_hf = getattr(policy, "to_hf_model", None)
        if callable(to_hf):
            policy = to_hf()
        dtype = next(policy.parameters()).dtype
        config = getattr(policy, "config", None)
        if config is not None and hasattr(config, "to_dict") and hasattr(policy, "generation_config"):
            return cls(config=config, generation_config=policy.generation_config, dtype=dtype)
        return cls(dtype=dtype, module=copy.deepcopy(policy).cpu())

    def build(self, device: torch.device | str = "cpu") -> nn.Module:
        """An eval-mode, gradient-free model with this architecture (weights still to be loaded)."""
        if self.module is not None:
            model = self.module
        else:
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_config(self.config, dtype=self.dtype)
            if self.generation_config is not None:
                model.generation_config = self.generation_config
        return model.to(device).requires_grad_(False).eval()
