"""Adapter-only weight sync: send the LoRA tensors, merge them on the generator side.

A merged sync sends every weight of the model each time; with LoRA only the small ``A``/``B`` matrices
change, so the trainer can send those (``adapter_state_dict``) and let the generator add ``B @ A * scaling``
to the base weights it keeps from setup. ``AdapterMerger`` is that generator-side half: it holds a frozen
copy of the base weights of the adapted layers only, and turns an adapter payload into the merged weights
with the same arithmetic as PEFT's ``merge_and_unload`` (bitwise equal on fp32).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rlforge.errors import ConfigError
from rlforge.models.peft import adapter_state_dict, is_peft_model, plain_lora_layers

SYNC_MODES = ("merged", "adapter")
"""``merged``: the generator receives the full merged weights; ``adapter``: only the adapter tensors."""


@dataclass(frozen=True)
class _AdaptedWeight:
    base: torch.Tensor  # the frozen base weight (a copy owned by the merger)
    key_a: str  # names in the adapter payload
    key_b: str
    scaling: float
    fan_in_fan_out: bool


def check_sync_mode(mode: str, generator: str = "torch", field: str = "trainer.strategy.peft_sync") -> None:
    """Fails early on an unknown mode, or ``adapter`` with a generator that cannot merge on its side."""
    if mode not in SYNC_MODES:
        raise ConfigError(f"{field} must be one of {SYNC_MODES}, got {mode!r}")
    if mode == "adapter" and generator != "torch":
        raise ConfigError(
            f"{field}='adapter' needs the torch generator; with {generator!r} use 'merged' (vLLM reloads merged)"
        )


def payload_bytes(tensors: dict[str, torch.Tensor]) -> int:
    """Bytes of a state dict's tensors (what a sync moves)."""
    return sum(t.numel() * t.element_size() for t in tensors.values())


class AdapterMerger:
    """Generator side of an adapter-only sync for a plain-LoRA PEFT policy.

    Args:
        policy: The PEFT policy at setup (its base weights are copied once; vanilla LoRA only: no DoRA,
            LoRA bias or ``modules_to_save``, whose merge needs more than ``A`` and ``B``).
    """

    def __init__(self, policy: nn.Module) -> None:
        if not is_peft_model(policy):
            raise ConfigError("adapter-only weight sync needs a PEFT policy (set module.peft)")
        model = policy.get_base_model()
        layers = plain_lora_layers(model)
        if layers is None:
            raise ConfigError(
                "adapter-only weight sync supports plain LoRA adapters only (no DoRA, lora_bias or "
                "modules_to_save): use the merged sync"
            )
        (adapter,) = policy.active_adapters
        # get_peft_model_state_dict drops the adapter name: base_model.model.<module>.lora_A.weight
        prefix = "base_model.model."
        self.weights: dict[str, _AdaptedWeight] = {
            f"{name}.weight": _AdaptedWeight(
                base=layer.get_base_layer().weight.detach().clone(),
                key_a=f"{prefix}{name}.lora_A.weight",
                key_b=f"{prefix}{name}.lora_B.weight",
                scaling=layer.scaling[adapter],
                fan_in_fan_out=layer.fan_in_fan_out,
            )
            for name, layer in layers.items()
            if adapter in layer.lora_A
        }

    @torch.no_grad()
    def merge(self, adapter: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The merged weights (HF names) of every adapted layer, from one adapter payload."""
        merged = {}
        for name, w in self.weights.items():
            delta = adapter[w.key_b].to(w.base.device) @ adapter[w.key_a].to(w.base.device)
            delta = (delta.T if w.fan_in_fan_out else delta) * w.scaling
            merged[name] = (w.base + delta).to(w.base.dtype)  # promoted add, then cast: PEFT's merge
        return merged


def adapter_payload(policy: nn.Module) -> dict[str, torch.Tensor]:
    """What an adapter-only sync sends: the adapter tensors, detached."""
    return {k: v.detach() for k, v in adapter_state_dict(policy).items()}
