"""``LocalStrategy``: policy, generator and reference model in one process (CPU or one GPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from rlforge.errors import ConfigError
from rlforge.generation.factory import build_generator, check_generator_name, check_generator_options
from rlforge.models.adapter_sync import adapter_payload, check_sync_mode
from rlforge.models.peft import generator_weights
from rlforge.services import LocalReference, MergingGenerator, RunContext, Services, Staleness
from rlforge.strategies.base import Strategy

if TYPE_CHECKING:
    import rlforge


class LocalStrategy(Strategy):
    """Everything in-process.

    The generator samples from its OWN copy of the weights, refreshed only at a weight sync, so with
    ``WeightSync(sync_interval=k)`` rollouts are really up to ``k - 1`` versions stale.

    Args:
        device: ``auto`` (CUDA if available, else CPU), ``cpu``, ``cuda`` or ``cuda:N``.
        generator: Rollout sampler backend: ``torch`` (``TorchGenerator``) or ``vllm`` (``VLLMGenerator``, needs
            the ``vllm`` extra; validation also uses it while its weights are current).
        generator_options: Keyword arguments of the generator class (for vLLM e.g. ``gpu_memory_utilization``,
            ``sleep_between_rollouts``, ``dtype``; for torch ``compile``, ``compile_after_s``, ``static_cache``,
            ``cpu_kernels``).
        peft_sync: With a PEFT (LoRA) policy: ``merged`` sends the merged weights to the generator (any
            generator; vLLM reloads them), ``adapter`` sends only the LoRA tensors and the generator side
            merges them into its copy of the base weights (``torch`` generator only).
        max_staleness: 0: each step samples with the newest synced weights. k >= 1: the next step's rollout is
            sampled before the current update (as ``MonarchStrategy`` does, without the overlap: one process),
            episodes more than k versions old are dropped; gives the same curve as ``MonarchStrategy`` with the
            same ``max_staleness``.
        tis_cap: Upper bound of the truncated importance weight of stale rollouts.
        correction: ``tis`` or ``ppo`` (see ``MonarchStrategy``).
    """

    def __init__(
        self,
        device: str = "auto",
        generator: str = "torch",
        generator_options: dict[str, Any] | None = None,
        peft_sync: str = "merged",
        max_staleness: int = 0,
        tis_cap: float = 2.0,
        correction: str = "tis",
    ) -> None:
        super().__init__(device)
        check_generator_name(generator)
        self.generator_options = dict(generator_options or {})
        check_generator_options(generator, self.generator_options)
        check_sync_mode(peft_sync, generator)
        self.staleness = Staleness(max_staleness, correction, tis_cap)
        self.generator, self.peft_sync = generator, peft_sync

    def build(self, ctx: RunContext, module: rlforge.RLModule) -> Services:
        services, rollouts = self.place(ctx, module)
        if not rollouts:
            return services
        if self.generator == "vllm" and self.root_device.type == "cuda":
            check_vllm_placement(ctx.world_size, self.generator_options, torch.cuda.device_count())
        policy = module.policy
        # Rank r > 0 samples from its own stream (multi-turn episodes, sampling_seeds="stream").
        seed = ctx.seed + 7919 * ctx.rank
        generator = build_generator(
            self.generator, policy, module.tokenizer, seed, policy_version=0, options=self.generator_options
        )
        self._engine = generator  # closed at teardown (vLLM)
        services.full_weights = lambda: generator_weights(policy)  # merged for a PEFT policy
        services.payload = services.full_weights
        if self.peft_sync == "adapter":  # only the LoRA tensors cross; the generator side merges them
            generator = MergingGenerator(generator, policy)
            services.payload = lambda: adapter_payload(policy)
        # With several ranks the policy is sharded (its forwards are collectives): validation samples on the
        # generator whenever it holds the current weights, each rank on its share of the rows.
        services.generator = generator
        services.validate_on_generator = self.generator == "vllm" or ctx.world_size > 1
        if module.beta > 0 or module.needs_reference:
            services.reference = LocalReference(policy, module.compile_forward, module.precision)
        return services

    def teardown(self) -> None:
        engine, self._engine = getattr(self, "_engine", None), None
        close = getattr(engine, "close", None)
        if callable(close):
            close()


def check_vllm_placement(world_size: int, options: dict[str, Any], visible_gpus: int) -> None:
    """Raises ``ConfigError`` when several ranks' vLLM engines would share GPUs.

    An in-process vLLM engine takes the first ``tensor_parallel_size`` GPUs the process sees, whatever its rank,
    so with several ranks each must see only its own engine's GPUs (its trainer shares the first of them).
    """
    tp = int(dict(options.get("engine_kwargs") or {}).get("tensor_parallel_size", 1))
    if world_size > 1 and visible_gpus > tp:
        raise ConfigError(
            f"{world_size} ranks each start a vLLM engine on the first {tp} GPU(s) they see, but every rank sees "
            f"{visible_gpus}: launch so each rank sees only its own {tp} (srun --gpus-per-task={tp}, or "
            "CUDA_VISIBLE_DEVICES per rank), or use generator: torch"
        )
