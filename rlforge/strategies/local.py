"""``LocalStrategy``: policy, generator and reference model in one process (CPU or one GPU)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch

from rlforge.errors import ConfigError
from rlforge.generation import Generator, SamplingParams
from rlforge.generation.factory import PolicySampler, build_generator, check_generator_name
from rlforge.models import compute_logprobs
from rlforge.models.adapter_sync import AdapterMerger, adapter_payload, check_sync_mode, payload_bytes
from rlforge.models.peft import base_model, generator_weights, is_peft_model
from rlforge.strategies.base import Strategy
from rlforge.types import Completion, TrainBatch

if TYPE_CHECKING:
    import rlforge


class LocalStrategy(Strategy):
    """Everything in-process.

    The generator samples from its OWN copy of the weights, refreshed only by ``sync_weights``, so
    with ``WeightSync(sync_interval=k)`` rollouts are really up to ``k - 1`` versions stale.

    Args:
        device: ``auto`` (CUDA if available, else CPU), ``cpu``, ``cuda`` or ``cuda:N``.
        generator: Rollout sampler: ``torch`` (``TorchGenerator``) or ``vllm`` (``VLLMGenerator``, needs the
            ``vllm`` extra; validation also uses it while its weights are current).
        generator_options: Keyword arguments of the generator class (e.g. for vLLM
            ``gpu_memory_utilization``, ``sleep_between_rollouts``, ``dtype``).
        peft_sync: With a PEFT (LoRA) policy: ``merged`` sends the merged weights to the generator (any
            generator; vLLM reloads them), ``adapter`` sends only the LoRA tensors and the generator side
            merges them into its copy of the base weights (``torch`` generator only).
    """

    def __init__(
        self,
        device: str = "auto",
        generator: str = "torch",
        generator_options: dict[str, Any] | None = None,
        peft_sync: str = "merged",
    ) -> None:
        if device != "auto" and not (device == "cpu" or device.startswith("cuda")):
            raise ConfigError(f"trainer.strategy.device must be auto, cpu or cuda[:N], got {device!r}")
        check_generator_name(generator)
        check_sync_mode(peft_sync, generator)
        self.peft_sync = peft_sync
        self._merger: AdapterMerger | None = None
        self.device = device
        self.generator, self.generator_options = generator, dict(generator_options or {})
        self._trainer: rlforge.RLTrainer | None = None
        self._generator: Generator | None = None
        self._policy_sampler: PolicySampler | None = None
        self._reference: torch.nn.Module | None = None

    @property
    def root_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"trainer.strategy.device is {self.device!r} but CUDA is not available")
        return torch.device(self.device)

    def setup(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        self._trainer = trainer
        module.policy.to(self.root_device)
        seed = trainer.seed
        self._policy_sampler = PolicySampler(module.policy, module.tokenizer, seed=seed + 1)
        if trainer.stage == "fit" and not module.supervised:
            self._generator = build_generator(
                self.generator, module.policy, module.tokenizer, seed, policy_version=0, options=self.generator_options
            )
            if self.peft_sync == "adapter":
                self._merger = AdapterMerger(module.policy)  # the generator side of an adapter-only sync
            # A PEFT policy is its own reference (adapters disabled): no second copy of the weights.
            if (module.beta > 0 or module.needs_reference) and not is_peft_model(module.policy):
                self._reference = copy.deepcopy(module.policy).requires_grad_(False).eval()

    @property
    def generator_version(self) -> int:
        return self._generator.policy_version if self._generator is not None else 0

    def generate(
        self, module: rlforge.RLModule, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Completion]]:
        return self._generator.generate(prompt_ids, params)

    def generate_with_policy(
        self, module: rlforge.RLModule, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Completion]]:
        if self.generator == "vllm" and self._generator is not None:
            if self._generator.policy_version == self._trainer.policy_version:
                return self._generator.generate(prompt_ids, params)
        return self._policy_sampler.generate(prompt_ids, params)

    @torch.no_grad()
    def reference_logprobs(self, module: rlforge.RLModule, batch: TrainBatch) -> torch.Tensor:
        if is_peft_model(module.policy):
            with base_model(module.policy) as reference:
                logprobs, _ = compute_logprobs(
                    reference, batch.input_ids, batch.attention_mask, batch.prompt_len, module.sampling.temperature
                )
            return logprobs
        if self._reference is None:
            raise ConfigError(
                "a KL term needs the reference model, but it was not built at setup: start with beta > 0 "
                "or set `module.needs_reference = True` in a setup hook (e.g. an adaptive KL controller)"
            )
        logprobs, _ = compute_logprobs(
            self._reference, batch.input_ids, batch.attention_mask, batch.prompt_len, module.sampling.temperature
        )
        return logprobs

    @torch.no_grad()
    def sync_weights(self, module: rlforge.RLModule, version: int) -> int:
        if self._merger is not None:  # adapter-only: the LoRA tensors cross, the generator side merges them
            payload = adapter_payload(module.policy)
            weights = {**self._generator.weights_state_dict(), **self._merger.merge(payload)}
            self._generator.update_weights(weights, version)
            return payload_bytes(payload)
        weights = generator_weights(module.policy)  # a PEFT policy sends its merged weights
        self._generator.update_weights(weights, version)
        return payload_bytes(weights)

    def state_dict(self) -> dict[str, Any]:
        if self._generator is None:
            return {}
        state: dict[str, Any] = {"generator": self._generator.state_dict()}
        if self._generator.policy_version != self._trainer.policy_version:
            # Stale generator weights differ from the policy's: keep them for an exact resume.
            state["generator_weights"] = _cpu_copy(self._generator.weights_state_dict())
        if self._reference is not None:
            state["reference_weights"] = _cpu_copy(self._reference.state_dict())
        return state

    def step_state_dict(self) -> dict[str, Any]:
        # Generator and reference weights only change at weight sync, after the update: RNG is enough.
        return {"generator": self._generator.state_dict()} if self._generator is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state or self._generator is None:
            return
        # Without saved generator weights the generator was in sync with the (restored) policy.
        weights = state.get("generator_weights") or generator_weights(self._trainer.module.policy)
        self._generator.update_weights(weights, self._generator.policy_version)
        self._generator.load_state_dict(state["generator"])
        if "reference_weights" in state:
            if self._reference is None:
                self._reference = copy.deepcopy(self._trainer.module.policy).requires_grad_(False).eval()
            self._reference.load_state_dict(state["reference_weights"])

    def teardown(self) -> None:
        self._generator = self._policy_sampler = None
        self._reference = self._merger = None


def _cpu_copy(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in state_dict.items()}
