"""Weight sync between processes: MonarchStrategy's flat buffer vs LocalStrategy's in-process copy vs memcpy.

For each model size (float32 tensors of 4 MiB each) this times, in one process, interleaved:

* ``memcpy``: one ``Tensor.copy_`` of the same bytes (same machine, same process): the ceiling;
* ``local``: ``LocalStrategy.sync_weights``' path, ``load_state_dict`` into the generator's own copy;
* ``monarch/<transport>``: ``MonarchStrategy.sync_weights``' path: pack into a versioned flat buffer
  (``WeightPublisher.publish``), the generator actor in ANOTHER process pulls it (``RDMABuffer.read_into``,
  or the bytes in the message) and loads it, acknowledges; then the old version is freed.

::

    python benchmarks/bench_sync.py --sizes-mb 10 100 400 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from rlforge.strategies import mesh

MiB = 2**20


class _Weights(nn.Module):
    def __init__(self, size_mb: int) -> None:
        super().__init__()
        n = max(1, size_mb // 4)
        self.chunks = nn.ParameterList([nn.Parameter(torch.randn(MiB), requires_grad=False) for _ in range(n)])


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(size_mb: int, sink, transports: list[str], repeats: int, publisher_cls) -> dict[str, float]:
    """Median seconds per side (and ``MB``, the bytes moved, in decimal MB)."""
    source, target = _Weights(size_mb), _Weights(size_mb)
    state = source.state_dict()
    flat_src = torch.cat([t.flatten() for t in state.values()])
    flat_dst = torch.empty_like(flat_src)
    flat_dst.copy_(flat_src), target.load_state_dict(state)  # warm-up: first-touch page faults
    results = {"MB": flat_src.numel() * flat_src.element_size() / 1e6}
    results["memcpy"] = _median_s(lambda: flat_dst.copy_(flat_src), repeats)
    results["local"] = _median_s(lambda: target.load_state_dict(state), repeats)
    for transport in transports:
        publisher, version = publisher_cls(transport), [0]

        def sync(publisher=publisher, version=version) -> None:
            version[0] += 1
            handle = publisher.publish(state, version[0])
            publisher.ack("sink", sink.update_weights.call_one(handle, 300.0).get(timeout=300))

        sync()  # warm-up: connections, the receiver's buffer
        results[f"monarch/{transport}"] = _median_s(sync, repeats)
        publisher.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[10, 100, 400])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--transports", nargs="+", default=["rdma", "message"])
    args = parser.parse_args()

    mesh.prepare_environment()
    from monarch.actor import Actor, endpoint, this_host

    from rlforge.strategies.actors.spec import PolicySpec
    from rlforge.strategies.weights import WeightPublisher, WeightReceiver

    class Sink(Actor):
        """The generator side of a sync: a model copy and a receiver."""

        def __init__(self, spec: PolicySpec) -> None:
            self.model, self.receiver = spec.build(), WeightReceiver()

        @endpoint
        def update_weights(self, handle, timeout_s: float) -> int:
            self.receiver.load(handle, self.model, timeout_s)
            return handle.version

    procs = this_host().spawn_procs(per_host={"procs": 1}, bootstrap_command=mesh.bootstrap_command())
    print(f"{'MB':>5} {'side':>16} {'MB/s':>9} {'vs memcpy':>10}")
    for size_mb in args.sizes_mb:
        sink = procs.spawn(f"sink{size_mb}", Sink, PolicySpec(module=_Weights(size_mb)))
        results = measure(size_mb, sink, args.transports, args.repeats, WeightPublisher)
        mb = results.pop("MB")
        for side, seconds in results.items():
            print(f"{size_mb:>5} {side:>16} {mb / seconds:>9.0f} {results['memcpy'] / seconds:>10.3f}")
    procs.stop().get(timeout=30)


if __name__ == "__main__":
    main()
