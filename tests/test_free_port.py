"""tests.helpers.free_port: a port the kernel never hands to another socket on its own (below the ephemeral range)."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.helpers import free_port


def test_free_port_is_below_the_ephemeral_range_and_bindable():
    """bind(0) gave an ephemeral port, which srun took for its own socket before rank 0 bound it (EADDRINUSE)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(1024 <= port < low for port in ports), sorted(ports)
    assert len(ports) > 1  # drawn at random: tests started together do not all get the same port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports.pop()))
