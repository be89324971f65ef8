"""torchtitan's parallelize function (FSDP2) on CPU over gloo, 2 processes (runs where torchtitan is installed).

Build the env with `bash scripts/make_titan_env.sh`, run with `bash scripts/test_titan_cpu.sh`.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip(
    "torchtitan",
    reason="torchtitan is not installed here: build its env with `bash scripts/make_titan_env.sh`, "
    "then run `bash scripts/test_titan_cpu.sh`",
)

from rlforge.models import load_policy  # noqa: E402
from rlforge.models.titan_policy import TitanPolicy  # noqa: E402
from tests.helpers import free_port  # noqa: E402

WORLD = 2


def _one_step(policy: torch.nn.Module, ids: torch.Tensor) -> float:
    # SGD, not AdamW: its update scales with the gradient, so a wrong FSDP gradient division would show.
    opt = torch.optim.SGD(policy.parameters(), lr=0.5)
    logits = policy(input_ids=ids).logits[:, :-1]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    return loss.item()


def _worker(rank: int, path: str, port: int, out: str, tp: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        policy = TitanPolicy.from_pretrained(path, tensor_parallel_degree=tp)  # parallelize: world size > 1
        assert policy.parallel_dims is not None
        sharded = type(next(policy.model.parameters())).__name__
        local = sum(p.to_local().numel() for p in policy.model.parameters()) / sum(
            p.numel() for p in policy.model.parameters()
        )  # this rank's share of the parameters
        ids = _batch(policy.config.vocab_size)
        # FSDP: each rank its own half of the batch; TP: one replica, both ranks the whole batch.
        loss = _one_step(policy, ids if tp > 1 else ids[rank : rank + 1])
        weights = policy.state_dict()  # full, gathered HF-named weights
        # An engine's folder (VLLMGenerator.from_policy): every rank writes its own.
        policy.save_pretrained(f"{out}.rank{rank}", is_main_process=True)
        losses = [None] * WORLD
        torch.distributed.all_gather_object(losses, loss)
        if rank == 0:
            torch.save({"loss": sum(losses) / WORLD, "weights": weights, "param_type": sharded, "local": local}, out)
    finally:
        torch.distributed.destroy_process_group()


def _batch(vocab_size: int) -> torch.Tensor:
    return (torch.arange(2, 34).reshape(2, 16) * 7) % vocab_size


@pytest.mark.parametrize("tp", [1, 2])  # FSDP 2, or tensor parallel 2 (x DP 1)
def test_fsdp2_step_matches_single_process(tiny_policy_dir, tmp_path, tp):
    out = tmp_path / "rank0.pt"
    torch.multiprocessing.spawn(_worker, args=(tiny_policy_dir, free_port(), str(out), tp), nprocs=WORLD)
    result = torch.load(out)
    assert result["param_type"] == "DTensor"  # parameters really are sharded
    # Each rank holds about half of the parameters (TP replicates the norms, the rest is split).
    assert result["local"] < 0.6, result["local"]
    for rank in range(WORLD):
        assert (tmp_path / f"rank0.pt.rank{rank}" / "model.safetensors").is_file()

    single = TitanPolicy.from_pretrained(tiny_policy_dir)
    loss = _one_step(single, _batch(single.config.vocab_size))  # the whole batch in one process
    assert abs(result["loss"] - loss) < 1e-5
    ref = single.state_dict()
    diff = max((result["weights"][k] - ref[k]).abs().max().item() for k in ref)
    print(f"\n2 ranks (tp={tp}) vs one process (full batch), one SGD step: max weight diff {diff:.2e}")
    assert diff < 1e-5
    start = load_policy(tiny_policy_dir)[0].state_dict()
    assert max((ref[k] - start[k]).abs().max().item() for k in ref) > 1e-3  # the step really moved weights
