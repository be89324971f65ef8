"""``ReferenceActor``: the frozen reference model, answering logprob requests for the KL term."""

from __future__ import annotations

from typing import Any

import torch
from monarch.actor import Actor, endpoint

from rlforge.models import compute_logprobs
from rlforge.strategies.monarch.actors.spec import PolicySpec
from rlforge.strategies.monarch.weights import WeightHandle, WeightReceiver


class ReferenceActor(Actor):
    """A frozen copy of the initial policy (or of whatever version it is given).

    Args:
        spec: How to build the copy.
        device: Its device.
        num_threads: torch intra-op threads of this process (``None``: torch's default).
        compile: Run the packed forward's layers through ``torch.compile`` (the module's ``compile_forward``).
        precision: Compute precision of the forward (the module's ``precision``, ``rlforge.precision``).
    """

    def __init__(
        self,
        spec: PolicySpec,
        device: str = "cpu",
        num_threads: int | None = None,
        compile: bool = False,
        precision: str = "32-true",
    ) -> None:
        if num_threads:
            torch.set_num_threads(num_threads)
        self.device, self.compile, self.precision = torch.device(device), compile, precision
        self.model = spec.build(device)
        self.receiver = WeightReceiver()
        self.version = -1

    @endpoint
    def load_weights(self, handle: WeightHandle, timeout_s: float = 300.0) -> int:
        self.receiver.load(handle, self.model, timeout_s)
        self.version = handle.version
        return handle.version

    @endpoint
    @torch.no_grad()
    def logprobs(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int, temperature: float
    ) -> torch.Tensor:
        ids, mask = input_ids.to(self.device), attention_mask.to(self.device)
        logprobs, _ = compute_logprobs(
            self.model, ids, mask, prompt_len, temperature, compile=self.compile, precision=self.precision
        )
        return logprobs.cpu()

    @endpoint
    def state(self) -> dict[str, Any]:
        return {"version": self.version, "compile": self.compile, "precision": self.precision}
