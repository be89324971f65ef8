"""Flat, versioned weight buffers: the trainer publishes one, generators pull it.

A state dict is packed into ONE contiguous byte tensor (every tensor at an aligned offset), so a
generator fetches a whole version with a single transfer: ``RDMABuffer.read_into`` (real RDMA on GPU
hosts with ibverbs, Monarch's TCP fallback elsewhere), or the tensor itself as a message argument.
The publisher keeps a version alive until every replica has acknowledged a newer one, then frees it.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from rlforge.errors import ConfigError

log = logging.getLogger(__name__)
_ALIGN = 64  # bytes; keeps every view aligned for any dtype (and for vectorised copies)
TRANSPORTS = ("rdma", "message")


@dataclass(frozen=True)
class TensorSlot:
    """Where one tensor lives in the flat buffer."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True)
class FlatLayout:
    """The packing of a state dict: one slot per tensor and the total size in bytes."""

    slots: tuple[TensorSlot, ...]
    nbytes: int

    @classmethod
    def of(cls, state_dict: dict[str, torch.Tensor]) -> FlatLayout:
        slots, offset = [], 0
        for name, tensor in state_dict.items():
            nbytes = tensor.numel() * tensor.element_size()
            slots.append(TensorSlot(name, tensor.dtype, tuple(tensor.shape), offset, nbytes))
            offset += -(-nbytes // _ALIGN) * _ALIGN
        return cls(tuple(slots), max(offset, _ALIGN))


def pack(state_dict: dict[str, torch.Tensor], layout: FlatLayout, out: torch.Tensor | None = None) -> torch.Tensor:
    """Copies ``state_dict`` into a flat ``uint8`` CPU tensor laid out as ``layout``."""
    flat = out if out is not None else torch.empty(layout.nbytes, dtype=torch.uint8)
    for slot in layout.slots:
        view = flat[slot.offset : slot.offset + slot.nbytes].view(slot.dtype).view(slot.shape)
        view.copy_(state_dict[slot.name].detach())
    return flat


def unpack(flat: torch.Tensor, layout: FlatLayout) -> dict[str, torch.Tensor]:
    """Views of ``flat`` as a state dict (no copy)."""
    return {
        slot.name: flat[slot.offset : slot.offset + slot.nbytes].view(slot.dtype).view(slot.shape)
        for slot in layout.slots
    }


@dataclass
class WeightHandle:
    """What a generator needs to fetch one version: sent to actors, so it must stay small.

    Attributes:
        version: Policy version of the weights.
        layout: How to unpack the bytes.
        buffer: A ``monarch.rdma.RDMABuffer`` over the publisher's flat tensor (``rdma`` transport).
        tensor: The flat tensor itself (``message`` transport: the bytes travel inside the message).
    """

    version: int
    layout: FlatLayout
    buffer: Any = None
    tensor: torch.Tensor | None = None

    def fetch(self, into: torch.Tensor, timeout_s: float) -> torch.Tensor:
        """Fills ``into`` (a flat ``uint8`` tensor of ``layout.nbytes``) with this version's bytes."""
        if self.tensor is not None:
            into.copy_(self.tensor)
        else:
            self.buffer.read_into(into, timeout=max(1, int(timeout_s))).get(timeout=timeout_s)
        return into


class WeightPublisher:
    """Trainer side: one flat buffer per live version, freed once every replica acked a newer one.

    Args:
        transport: ``rdma`` (generators pull with ``RDMABuffer.read_into``) or ``message`` (bytes in the
            endpoint message).
    """

    def __init__(self, transport: str = "rdma") -> None:
        if transport not in TRANSPORTS:
            raise ConfigError(f"trainer.strategy.sync_transport must be one of {TRANSPORTS}, got {transport!r}")
        self.transport = transport
        self.layout: FlatLayout | None = None
        self._live: dict[int, tuple[torch.Tensor, WeightHandle]] = {}
        self._acked: dict[str, int] = {}  # replica name -> newest version it acknowledged

    @property
    def latest(self) -> WeightHandle:
        return self._live[max(self._live)][1]

    def latest_state_dict(self) -> dict[str, torch.Tensor]:
        """Views of the newest published version (no copy)."""
        return unpack(self._live[max(self._live)][0], self.layout)

    @property
    def live_versions(self) -> list[int]:
        return sorted(self._live)

    def publish(self, state_dict: dict[str, torch.Tensor], version: int) -> WeightHandle:
        """Packs ``state_dict`` as ``version`` and returns the handle generators pull."""
        layout = FlatLayout.of(state_dict)
        if self.layout is not None and layout != self.layout:
            raise ConfigError("the policy's parameter names, shapes or dtypes changed between weight syncs")
        self.layout = layout
        flat = pack(state_dict, layout)
        if self.transport == "rdma":
            from monarch.rdma import RDMABuffer, RDMATcpFallbackWarning, get_rdma_backend

            with warnings.catch_warnings():
                # Said once per publisher (below) instead of once per sync.
                warnings.simplefilter("ignore", RDMATcpFallbackWarning)
                handle = WeightHandle(version, layout, buffer=RDMABuffer(flat))
            if not self._live:
                log.info("weight sync: RDMABuffer over the %s backend", get_rdma_backend())
        else:
            handle = WeightHandle(version, layout, tensor=flat)
        self._live[version] = (flat, handle)
        return handle

    def ack(self, replica: str, version: int) -> None:
        """Records that ``replica`` now holds ``version``; frees versions nobody can still need."""
        self._acked[replica] = max(version, self._acked.get(replica, -1))
        self._free_older_than(min(self._acked.values()))

    def forget(self, replica: str) -> None:
        """Stops waiting for ``replica`` (it died or was removed)."""
        self._acked.pop(replica, None)

    def _free_older_than(self, version: int) -> None:
        newest = max(self._live)
        for old in [v for v in self._live if v < version and v != newest]:
            _, handle = self._live.pop(old)
            if handle.buffer is not None:
                handle.buffer.drop().get(timeout=30)

    def close(self) -> None:
        """Frees every version."""
        for _, handle in self._live.values():
            if handle.buffer is not None:
                try:
                    handle.buffer.drop().get(timeout=10)
                except Exception:  # the owner mesh may be gone at teardown; the memory goes with it
                    pass
        self._live.clear()
        self._acked.clear()


class WeightReceiver:
    """Generator side: one reusable flat tensor; loads a pulled version into a model in place."""

    def __init__(self) -> None:
        self._flat: torch.Tensor | None = None

    def read(self, handle: WeightHandle, timeout_s: float) -> dict[str, torch.Tensor]:
        """Pulls ``handle``'s version; returns views into the reused buffer (valid until the next ``read``)."""
        if self._flat is None or self._flat.numel() != handle.layout.nbytes:
            self._flat = torch.empty(handle.layout.nbytes, dtype=torch.uint8)
        handle.fetch(self._flat, timeout_s)
        return unpack(self._flat, handle.layout)

    def load(self, handle: WeightHandle, model: torch.nn.Module, timeout_s: float) -> None:
        """Pulls ``handle``'s version into ``model`` in place."""
        model.load_state_dict(self.read(handle, timeout_s), strict=True)
