"""In-process services: the reference model and the generator side of an adapter-only (LoRA) sync."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from rlforge.generation.params import SamplingParams
from rlforge.models import compute_logprobs
from rlforge.models.adapter_sync import AdapterMerger
from rlforge.models.peft import base_model, is_peft_model
from rlforge.types import Completion, TrainBatch


class LocalReference:
    """The reference model in this process: a frozen copy of the policy, or for a PEFT policy the policy itself
    with its adapters disabled (no second copy of the weights).

    Args:
        policy: The trainable policy at the start of the run.
        compile: Run the packed forward's layers through ``torch.compile`` (``compute_logprobs``).
        precision: Compute precision of the forward, the policy module's (``rlforge.precision``).
    """

    def __init__(self, policy: nn.Module, compile: bool = False, precision: str = "32-true") -> None:
        self._peft, self.compile, self.precision = is_peft_model(policy), compile, precision
        self.model = policy if self._peft else copy.deepcopy(policy).requires_grad_(False).eval()

    @torch.no_grad()
    def logprobs(self, batch: TrainBatch, temperature: float) -> torch.Tensor:
        if self._peft:
            with base_model(self.model) as reference:
                return self._logprobs(reference, batch, temperature)
        return self._logprobs(self.model, batch, temperature)

    def _logprobs(self, model: nn.Module, batch: TrainBatch, temperature: float) -> torch.Tensor:
        logprobs, _ = compute_logprobs(
            model,
            batch.input_ids,
            batch.attention_mask,
            batch.prompt_len,
            temperature,
            compile=self.compile,
            precision=self.precision,
        )
        return logprobs

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The reference weights (empty for a PEFT policy: its base weights are saved with the policy)."""
        return {} if self._peft else self.model.state_dict()

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        if not self._peft:
            self.model.load_state_dict(state_dict)


class MergingGenerator:
    """The generator side of ``peft_sync: adapter``: receives only LoRA tensors and merges them into its copy.

    Full HF weights (a resume) are loaded as they are. Every other call goes to the wrapped generator.

    Args:
        generator: A generator holding merged HF weights (``TorchGenerator``).
        policy: The PEFT policy (read once, for the base weights and the adapter layout).
    """

    def __init__(self, generator: Any, policy: nn.Module) -> None:
        self.inner, self.merger = generator, AdapterMerger(policy)

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        current = self.inner.weights_state_dict()
        if state_dict.keys() <= current.keys():
            self.inner.update_weights(state_dict, version)
        else:
            self.inner.update_weights({**current, **self.merger.merge(state_dict)}, version)

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        return self.inner.generate(prompt_ids, params)

    def weights_state_dict(self) -> dict[str, torch.Tensor]:
        return self.inner.weights_state_dict()

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
