"""Launch ``rlforge fit`` on several hosts through Monarch's job API (SLURM, Kubernetes, or local processes).

The script allocates the host meshes, dumps the job to ``--job-file`` and runs ``rlforge fit`` here (the
trainer, i.e. the Monarch client) with ``MonarchStrategy`` pointed at that file: generator replicas go
to the ``generators`` hosts, reward workers to the ``rewards`` hosts. Anything after ``--`` goes to
``rlforge fit`` unchanged::

    # SLURM: 2 generator nodes (one replica each), 1 reward node, trainer on this node
    python scripts/launch_monarch.py --scheduler slurm --generators 2 --rewards 1 --partition gpu \\
        --gpus-per-node 8 -- --config configs/grpo_gsm8k_qwen3_1_7b.yaml

    # SLURM, everything on one node whose hostname resolves only to 127.0.0.1 (a workstation, a test cluster)
    python scripts/launch_monarch.py --scheduler slurm --generators 1 --bind-address 127.0.0.1 -- ...

    # Kubernetes (pods labelled for the meshes `generators` and `rewards`, see monarch.job.KubernetesJob)
    python scripts/launch_monarch.py --scheduler kubernetes --namespace rl --generators 2 --rewards 1 -- ...

    # Simulate several hosts on this machine (one local worker process per "host")
    python scripts/launch_monarch.py --scheduler local --generators 2 -- --trainer.max_steps 20

The job is killed when ``rlforge fit`` exits (``--keep-job`` keeps it for the next launch). SLURM workers
write ``slurm_<job id>_*.out``/``.err`` next to ``--job-file``. SLURM 22.05-23.02 work too: the job is a
``CompatSlurmJob`` (``rlforge/strategies/monarch/slurm.py``), which reads their ``squeue --json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from rlforge.strategies.monarch import mesh

TRANSPORT_ENV = "HYPERACTOR_MESH_DEFAULT_TRANSPORT"


def make_job(args: argparse.Namespace):
    """The Monarch job for ``args.scheduler`` with the host meshes ``generators`` (and ``rewards``)."""
    meshes = {"generators": args.generators, **({"rewards": args.rewards} if args.rewards else {})}
    if args.scheduler == "local":
        from monarch.job import ProcessJob

        return ProcessJob(meshes)
    if args.scheduler == "slurm":
        # monarch's SlurmJob misreads SLURM < 23.11's `squeue --json`; the adapter reads both schemas.
        from rlforge.strategies.monarch.slurm import CompatSlurmJob

        return CompatSlurmJob(
            meshes, python_exe=sys.executable, partition=args.partition, gpus_per_node=args.gpus_per_node,
            time_limit=args.time_limit, monarch_port=args.monarch_port, job_start_timeout=args.job_start_timeout,
            log_dir=os.path.dirname(os.path.abspath(args.job_file)),  # not the cwd: the workers' slurm_<id>_*.out
            bind_to=args.bind_address,
        )  # fmt: skip
    from monarch._src.job.kubernetes import KubernetesJob  # re-exported as monarch.job.kubernetes in newer releases

    job = KubernetesJob(namespace=args.namespace)
    for name, hosts in meshes.items():
        job.add_mesh(name, hosts)
    return job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", choices=["local", "slurm", "kubernetes"], default="local")
    parser.add_argument("--generators", type=int, default=1, help="hosts (= generator replicas)")
    parser.add_argument("--rewards", type=int, default=0, help="hosts of reward workers (0: score in the trainer)")
    parser.add_argument("--job-file", default=".monarch/rlforge_job.pkl")
    parser.add_argument("--partition", default=None, help="SLURM partition (default: the cluster's default)")
    parser.add_argument("--gpus-per-node", type=int, default=None, help="SLURM GPUs per node (default: none)")
    parser.add_argument("--time-limit", default=None, help="SLURM HH:MM:SS (default: the partition's)")
    parser.add_argument("--monarch-port", type=int, default=22222, help="SLURM: the port Monarch workers listen on")
    parser.add_argument(
        "--job-start-timeout", type=int, default=None, help="SLURM: seconds to wait in the queue (default: no limit)"
    )
    parser.add_argument(
        "--bind-address",
        default=None,
        help="SLURM: the address Monarch workers and this client listen on, e.g. 127.0.0.1 on a one-node cluster "
        "whose hostname resolves only to a loopback address (default: the address the node's hostname resolves to)",
    )
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--keep-job", action="store_true")
    args, fit_args = parser.parse_known_args()
    fit_args = [a for a in fit_args if a != "--"]
    if args.bind_address and args.scheduler != "slurm":
        parser.error("--bind-address applies to --scheduler slurm only")

    mesh.prepare_environment()
    if args.bind_address:
        # Read when monarch loads, here and in `rlforge fit` (it inherits the environment); it outranks the
        # hostname transport SlurmJob configures, which fails on a host whose name resolves only to loopback.
        os.environ[TRANSPORT_ENV] = f"tcp://{args.bind_address}:0"
    job = make_job(args)
    job.apply()
    job.dump(args.job_file)
    strategy = [
        "--trainer.strategy", "rlforge.strategies.MonarchStrategy",
        "--trainer.strategy.job", os.path.abspath(args.job_file),
        "--trainer.strategy.generator.hosts", "generators",
        "--trainer.strategy.generator.num_replicas", str(args.generators),
        "--trainer.strategy.generator.with_gpus", str(bool(args.gpus_per_node)).lower(),
    ]  # fmt: skip
    if args.rewards:
        strategy += ["--trainer.strategy.reward.hosts", "rewards"]
        strategy += ["--trainer.strategy.reward.num_replicas", str(args.rewards)]
    try:
        code = subprocess.call([sys.executable, "-m", "rlforge.cli", "fit", *strategy, *fit_args])
    finally:
        if not args.keep_job:
            job.kill()
    sys.exit(code)


if __name__ == "__main__":
    main()
