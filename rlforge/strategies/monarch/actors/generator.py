"""``GeneratorActor``: one rollout replica; samples with its own weights, refreshed by pulling a version."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from monarch.actor import Actor, endpoint

from rlforge.generation import SamplingParams
from rlforge.generation.factory import build_generator
from rlforge.strategies.monarch.actors.spec import PolicySpec
from rlforge.strategies.monarch.weights import WeightHandle, WeightReceiver
from rlforge.types import Completion


class GeneratorActor(Actor):
    """Holds a generator built by ``backend`` (the same factory as ``LocalStrategy``'s) over a copy of the policy.

    Messages are handled one at a time, so an ``update_weights`` sent while a ``generate`` is running
    waits for it: in-flight requests always finish with the weights they started with, and their
    completions carry that version.

    Args:
        spec: How to build the policy copy.
        tokenizer: The policy's tokenizer.
        seed: Sampler seed.
        backend: Generator backend name (``torch`` or ``vllm``).
        options: Keyword arguments of the generator class (vLLM's).
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
        options: dict[str, Any] | None = None,
    ) -> None:
        if num_threads:
            torch.set_num_threads(num_threads)
        model = spec.build(device)  # this replica's private copy: sampled in place, or handed to vLLM once
        self.generator = build_generator(
            backend, model, tokenizer, seed, policy_version=-1, options=options, copy_weights=False,
            field="trainer.strategy.generator.backend", options_field="trainer.strategy.generator.options",
        )  # fmt: skip
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
        self.generator.update_weights(self.receiver.read(handle, timeout_s), handle.version)
        return handle.version, time.perf_counter() - start

    @endpoint
    def state_dict(self) -> dict[str, Any]:
        return self.generator.state_dict()

    @endpoint
    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.load_state_dict(state)
