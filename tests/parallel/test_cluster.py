"""Which launcher started the process, read from the environment as Lightning's cluster environments do."""

from __future__ import annotations

import pytest

from rlforge.errors import ConfigError
from rlforge.parallel import cluster
from rlforge.parallel.cluster import SingleProcess, SLURMEnvironment, TorchElasticEnvironment, detect_cluster

LAUNCH_VARS = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "SLURM_PROCID",
    "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "SLURM_JOB_NODELIST",
    "SLURM_STEP_NODELIST", "SLURM_JOB_ID",
)  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)


def test_a_plain_process_is_rank_0_of_1():
    env = detect_cluster()
    assert isinstance(env, SingleProcess) and (env.rank, env.world_size) == (0, 1)


def test_torchrun_variables(monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    for name, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.2"}.items():
        monkeypatch.setenv(name, value)
    env = detect_cluster()
    assert isinstance(env, TorchElasticEnvironment)
    assert (env.rank, env.world_size, env.local_rank, env.main_address, env.main_port) == (3, 4, 1, "10.0.0.2", 29500)


def test_srun_task_is_a_rank_and_the_first_node_is_the_rendezvous(monkeypatch):
    steps = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1"}
    for name, value in {**steps, "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "77"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[03-04,09]")
    monkeypatch.setattr(cluster.shutil, "which", lambda name: None)  # no scontrol: the hostlist is parsed here
    env = detect_cluster()
    assert isinstance(env, SLURMEnvironment)
    assert (env.rank, env.world_size, env.local_rank, env.main_address) == (5, 8, 1, "gpu03")
    assert env.main_port == SLURMEnvironment().main_port and 15000 <= env.main_port < 35000  # from the job id
    monkeypatch.setenv("MASTER_PORT", "1234")
    assert env.main_port == 1234


def test_an_sbatch_script_without_srun_is_one_process(monkeypatch):
    """The batch step has SLURM_PROCID/SLURM_NTASKS but no SLURM_STEP_ID (measured on SLURM 22.05)."""
    for name, value in {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"}.items():
        monkeypatch.setenv(name, value)
    assert isinstance(detect_cluster(), SingleProcess)


def test_torchrun_inside_an_allocation_wins_over_slurm(monkeypatch):
    for name, value in {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_ID": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert isinstance(detect_cluster(), TorchElasticEnvironment)


@pytest.mark.parametrize(("variables", "message"), [
    ({"RANK": "2", "WORLD_SIZE": "2"}, "rank 2 is not in 0..1"),
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
])  # fmt: skip
def test_bad_launcher_variables_are_one_line(monkeypatch, variables, message):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message):
        detect_cluster()


@pytest.mark.parametrize(("nodelist", "first"), [("node7", "node7"), ("a[1-3],b2", "a1"), ("n[08,10]", "n08")])
def test_first_host_of_a_hostlist(monkeypatch, nodelist, first):
    monkeypatch.setattr(cluster.shutil, "which", lambda name: None)
    assert cluster.first_host(nodelist) == first


@pytest.mark.parametrize(("world", "tp", "visible", "ok"), [
    (1, 1, 8, True),   # one process: vLLM takes the first GPU, the trainer too
    (4, 1, 1, True),   # srun --gpus-per-task=1: each rank its own GPU
    (4, 2, 2, True),   # srun --gpus-per-task=2: each rank's engine its own pair
    (4, 1, 4, False),  # torchrun on a 4-GPU node: every engine would land on GPU 0
    (4, 2, 8, False),
])  # fmt: skip
def test_vllm_engines_of_several_ranks_must_not_share_gpus(world, tp, visible, ok):
    from rlforge.strategies.local import check_vllm_placement

    options = {"engine_kwargs": {"tensor_parallel_size": tp}}
    if ok:
        check_vllm_placement(world, options, visible)
    else:
        with pytest.raises(ConfigError, match=f"every rank sees {visible}: launch so each rank sees only its own {tp}"):
            check_vllm_placement(world, options, visible)


def test_groups_split_evenly_over_ranks_lose_none():
    from rlforge.parallel.shard import rank_slice, split_evenly

    assert split_evenly(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split_evenly(list(range(4)), 2) == [rank_slice(list(range(4)), r, 2) for r in range(2)]
    with pytest.raises(ConfigError, match="1 groups cannot be shared by 2 ranks"):
        split_evenly([0], 2)
