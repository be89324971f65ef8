"""The flat weight buffer: exact packing, version lifetime, layout checks (no monarch needed)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("monarch", reason="MonarchStrategy tests need the `monarch` extra (in `dev`)")

from rlforge.errors import ConfigError
from rlforge.strategies.monarch.weights import FlatLayout, WeightPublisher, WeightReceiver, pack, unpack


def _state(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "a": torch.randn(3, 5, generator=g),
        "b": torch.randn(7, generator=g).to(torch.bfloat16),
        "c": torch.arange(11, dtype=torch.int64),
        "d": torch.randn(2, 2, 2, generator=g).half(),
    }


def test_pack_unpack_round_trip_is_bit_exact_and_aligned():
    state = _state()
    layout = FlatLayout.of(state)
    flat = pack(state, layout)
    assert flat.dtype == torch.uint8 and flat.numel() == layout.nbytes
    assert all(slot.offset % 64 == 0 for slot in layout.slots)
    back = unpack(flat, layout)
    for name, tensor in state.items():
        assert back[name].dtype == tensor.dtype and back[name].shape == tensor.shape
        assert torch.equal(back[name], tensor)


def test_receiver_loads_published_version_into_a_model():
    src, dst = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    publisher = WeightPublisher("message")
    handle = publisher.publish(src.state_dict(), version=7)
    WeightReceiver().load(handle, dst, timeout_s=5)
    assert handle.version == 7
    for name, value in src.state_dict().items():
        assert torch.equal(dst.state_dict()[name], value)


def test_old_versions_are_freed_only_after_every_replica_acked_a_newer_one():
    publisher = WeightPublisher("message")
    for version in range(3):
        publisher.publish(_state(version), version)
        if version == 0:
            publisher.ack("g0", 0)
            publisher.ack("g1", 0)
    assert publisher.live_versions == [0, 1, 2]
    publisher.ack("g0", 2)
    assert publisher.live_versions == [0, 1, 2]  # g1 still holds version 0
    publisher.ack("g1", 1)
    assert publisher.live_versions == [1, 2]
    publisher.ack("g1", 2)
    assert publisher.live_versions == [2]  # the newest always stays (respawned replicas pull it)
    publisher.forget("g1")
    assert publisher.latest.version == 2


def test_layout_change_and_bad_transport_are_config_errors():
    publisher = WeightPublisher("message")
    publisher.publish({"w": torch.zeros(2)}, 0)
    with pytest.raises(ConfigError, match="changed between weight syncs"):
        publisher.publish({"w": torch.zeros(3)}, 1)
    with pytest.raises(ConfigError, match="sync_transport"):
        WeightPublisher("carrier-pigeon")
