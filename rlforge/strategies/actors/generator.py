"""``GeneratorActor``: one rollout replica; samples with its own weights, refreshed by pulling a version."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from monarch.actor import Actor, endpoint

from rlforge.generation import SamplingParams
from rlforge.strategies.actors.factory import build_generator
from rlforge.strategies.actors.spec import PolicySpec
from rlforge.strategies.weights import WeightHandle, WeightReceiver
from rlforge.types import Completion


class GeneratorActor(Actor):
    """Holds a copy of the policy and a generator built by ``backend``.

    Messages are handled one at a time, so an ``update_weights`` sent while a ``generate`` is running
    waits for it: in-flight requests always finish with the weights they started with, and their
    completions carry that version.

    Args:
        spec: How to build the policy copy.
        tokenizer: The policy's tokenizer.
        seed: Sampler seed.
        backend: Generator backend name (``torch``).
        device: Device of the copy (``cpu`` or ``cuda:N``).
        num_threads: torch intra-op threads of this process (``None``: torch's default).
    """

    def __init__(
        self,
        spec: PolicySpec,
        tokenizer: Any,
        seed: int,
        backend: str = "torch",
        device: str = "cpu",
        num_threads: int | None = None,
    ) -> None:
        if num_threads:
            torch.set_num_threads(num_threads)
        self.model = spec.build(device)
        self.generator = build_generator(backend, self.model, tokenizer, seed, policy_version=-1)
        self.receiver = WeightReceiver()

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def generate(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        return self.generator.generate(prompt_ids, params)

    @endpoint
    def update_weights(self, handle: WeightHandle, timeout_s: float = 300.0) -> tuple[int, float]:
        """Pulls ``handle``'s version into the model; returns ``(version, seconds)`` as the acknowledgement."""
        start = time.perf_counter()
        self.receiver.load(handle, self.model, timeout_s)
        self.generator.policy_version = handle.version
        return handle.version, time.perf_counter() - start

    @endpoint
    def state_dict(self) -> dict[str, Any]:
        return self.generator.state_dict()

    @endpoint
    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.load_state_dict(state)
