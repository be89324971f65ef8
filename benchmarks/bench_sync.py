"""Weight sync between processes: MonarchStrategy's flat buffer vs LocalStrategy's in-process copy vs memcpy.

For each model size (float32 tensors of 4 MiB each) this times, in one process, interleaved:

* ``memcpy``: one ``Tensor.copy_`` of the same bytes (same machine, same process): the ceiling;
* ``local``: the local weight sync's path (``Services.sync``): ``load_state_dict`` into the generator's own copy;
* ``monarch/<transport>``: ``RemoteGenerator.update_weights``' path: pack into a versioned flat buffer
  (``WeightPublisher.publish``), the generator actor in ANOTHER process pulls it (``RDMABuffer.read_into``,
  or the bytes in the message) and loads it, acknowledges; then the old version is freed.

With ``--lora`` it instead compares, for a LoRA policy (PEFT, r=8 on all linear layers), the two weight
syncs ``LocalStrategy(peft_sync=...)`` offers, in one process, interleaved (no Monarch needed):

* ``merged``: the trainer computes the merged weights (``generator_weights``) and the generator loads all of them;
* ``adapter``: only the LoRA tensors cross (``adapter_payload``); the generator side adds ``B @ A * scaling`` to
  its base copy (``AdapterMerger``) and loads the adapted weights.

``bytes`` is what crosses from trainer to generator (what a process boundary would carry).

::

    python benchmarks/bench_sync.py --sizes-mb 10 100 400 --repeats 5
    python benchmarks/bench_sync.py --lora --lora-hidden 0 1024 --repeats 5   # 0: the bundled default policy
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from rlforge.strategies.monarch import mesh

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


def _lora_policy(hidden: int, rank: int) -> nn.Module:
    """The bundled default policy (``hidden == 0``) or a random Qwen3 of that width, with LoRA on all linears."""
    from peft import LoraConfig
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlforge.models import load_policy
    from rlforge.models.peft import apply_peft

    if hidden == 0:
        policy, _ = load_policy("rlforge/default-policy")
    else:
        config = AutoConfig.for_model(
            "qwen3", hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=8, head_dim=128,
            num_attention_heads=hidden // 128, num_key_value_heads=max(1, hidden // 256), vocab_size=32000,
        )  # fmt: skip
        policy = AutoModelForCausalLM.from_config(config)
    policy = apply_peft(policy, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear"))
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.01)
    return policy


def measure_lora(hidden: int, repeats: int, rank: int = 8) -> dict[str, float]:
    """Median seconds and bytes of the merged and the adapter-only sync of one LoRA policy."""
    from rlforge.generation.factory import hf_copy
    from rlforge.models.adapter_sync import AdapterMerger, adapter_payload, payload_bytes
    from rlforge.models.peft import generator_weights

    policy = _lora_policy(hidden, rank)
    generator, merger = hf_copy(policy), AdapterMerger(policy)
    own = generator.state_dict()

    def merged() -> None:
        generator.load_state_dict(generator_weights(policy))

    def adapter() -> None:
        generator.load_state_dict({**own, **merger.merge(adapter_payload(policy))})

    merged(), adapter()  # warm-up
    results = {
        "merged_bytes": payload_bytes(generator_weights(policy)),
        "adapter_bytes": payload_bytes(adapter_payload(policy)),
    }
    times = {"merged": [], "adapter": []}
    for _ in range(repeats):  # interleaved, so load drift hits both alike
        for name, fn in (("merged", merged), ("adapter", adapter)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    results.update({f"{name}_s": statistics.median(t) for name, t in times.items()})
    return results


def main_lora(hiddens: list[int], repeats: int) -> None:
    print(f"{'model':>14} {'merged MB':>10} {'adapter MB':>11} {'ratio':>7} {'merged s':>9} {'adapter s':>10}")
    for hidden in hiddens:
        r = measure_lora(hidden, repeats)
        name = "default" if hidden == 0 else f"qwen3-h{hidden}"
        ratio = r["adapter_bytes"] / r["merged_bytes"]
        print(
            f"{name:>14} {r['merged_bytes'] / 1e6:>10.2f} {r['adapter_bytes'] / 1e6:>11.3f} {ratio:>7.2%} "
            f"{r['merged_s']:>9.4f} {r['adapter_s']:>10.4f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[10, 100, 400])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--transports", nargs="+", default=["rdma", "message"])
    parser.add_argument("--lora", action="store_true", help="Merged vs adapter-only sync of a LoRA policy.")
    parser.add_argument("--lora-hidden", type=int, nargs="+", default=[0, 1024], help="0: the default policy.")
    args = parser.parse_args()
    if args.lora:
        main_lora(args.lora_hidden, args.repeats)
        return

    mesh.prepare_environment()
    from monarch.actor import Actor, endpoint, this_host

    from rlforge.strategies.monarch.actors.spec import PolicySpec
    from rlforge.strategies.monarch.weights import WeightPublisher, WeightReceiver

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
