"""``MonarchStrategy``: generator replicas, the reference model, reward and environment workers as Monarch actors.

The trainer (this process) keeps the trainable policy. Around it, on process meshes of this host or of a
Monarch job's hosts (SLURM, Kubernetes, ...), ``build`` starts:

* ``generator``: ``num_replicas`` ``GeneratorActor``s running ``backend`` (``torch`` or ``vllm``, built by the same
  factory as ``LocalStrategy``'s); replica ``i`` samples with seed ``seed + 1000 * i``, so one replica reproduces
  ``LocalStrategy``'s rollouts. Behind the ``Generator`` protocol: ``RemoteGenerator``.
* ``reference``: one ``ReferenceActor`` (only when ``module.beta > 0`` or ``module.needs_reference``).
* ``reward``: ``num_replicas * procs`` ``RewardActor``s scoring shards (0: score in-process).
* ``env``: ``num_replicas * procs`` ``EnvActor``s stepping the module's environments, episode ``e`` on actor
  ``e % n`` (``null``: in threads of this process). Behind the ``EnvRunner`` protocol: ``RemoteEnvRunner``.

Async rollouts (``max_staleness >= 1``) and their off-policy correction are the ``RolloutEngine``'s; here they
only mean that a weight update does not wait for the replicas' acknowledgements.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING, Any

from rlforge.errors import ConfigError
from rlforge.generation.factory import check_generator_name, check_generator_options
from rlforge.models.peft import generator_weights, is_peft_model
from rlforge.parallel import world_size
from rlforge.services import LocalReference, RunContext, Services, Staleness
from rlforge.strategies.base import Strategy
from rlforge.strategies.monarch import mesh, placement
from rlforge.strategies.monarch.config import ServiceConfig
from rlforge.strategies.monarch.weights import WeightPublisher

if TYPE_CHECKING:
    import rlforge
    from rlforge.strategies.monarch.envs import RemoteEnvRunner
    from rlforge.strategies.monarch.generators import RemoteGenerator


class MonarchStrategy(Strategy):
    """Generator, reference model, reward and environment workers as Monarch actors (one host or many).

    Args:
        generator: Placement and ``backend`` of the generator replicas (``procs`` must be 1: a replica is one
            process; vLLM tensor parallelism goes in ``options``).
        reference: Placement of the reference model (``procs`` and ``num_replicas`` must be 1).
        reward: Placement of reward workers; ``num_replicas: 0`` scores in the trainer process.
        env: Placement of environment workers (``module.environment``'s episodes, ``procs * num_replicas``
            processes; the environment must pickle); ``null``: environments run in threads of the trainer process.
        generator_backend: Deprecated alias of ``generator.backend``.
        max_staleness: 0: synchronous rollouts. k >= 1: the next rollout overlaps the current update and
            episodes more than k versions older than the policy are dropped. Needs
            ``WeightSync.sync_interval <= k + 1``.
        tis_cap: Upper bound of the truncated importance weight of async (stale) rollouts.
        correction: Off-policy correction of async rollouts: ``tis`` (decoupled PPO: ratio against the current
            policy, advantages times ``min(exp(current - behaviour), tis_cap)``; one extra no-grad forward per
            step) or ``ppo`` (the loss's ratio against the behaviour logprobs; no extra forward).
        restart_on_failure: Respawn a generator replica whose process died (with the current weights);
            else the run stops (the last completed step is checkpointed).
        max_restarts: Restarts allowed per replica before stopping anyway.
        sync_transport: ``rdma`` (generators pull an ``RDMABuffer``; real RDMA where ibverbs exists, TCP
            otherwise) or ``message`` (the bytes travel in the endpoint message).
        timeout_s: Time limit of every wait on a worker.
        num_threads: torch threads of each worker process (``null``: torch's default).
        job: A Monarch job to run on: the path of a dumped job (``job.dump(path)``, see
            ``scripts/launch_monarch.py``) or a ``monarch.job`` ``JobTrait``; ``null``: this host only.
        device: Device of the trainable policy: ``auto``, ``cpu`` or ``cuda[:N]``.
    """

    def __init__(
        self,
        generator: ServiceConfig = ServiceConfig(),  # noqa: B008 - copied below
        reference: ServiceConfig = ServiceConfig(),  # noqa: B008
        reward: ServiceConfig = ServiceConfig(num_replicas=0),  # noqa: B008
        env: ServiceConfig | None = None,
        generator_backend: str | None = None,
        max_staleness: int = 0,
        tis_cap: float = 2.0,
        correction: str = "tis",
        restart_on_failure: bool = False,
        max_restarts: int = 3,
        sync_transport: str = "rdma",
        timeout_s: float = 300.0,
        num_threads: int | None = None,
        job: Any = None,
        device: str = "auto",
    ) -> None:
        super().__init__(device)
        self.generator, self.reference, self.reward = (dataclasses.replace(c) for c in (generator, reference, reward))
        if generator_backend is not None:
            warnings.warn(
                "trainer.strategy.generator_backend is deprecated: use trainer.strategy.generator.backend",
                DeprecationWarning,
                stacklevel=2,
            )
            self.generator = dataclasses.replace(self.generator, backend=generator_backend)
        self.generator.check("generator")
        self.reference.check("reference")
        self.reward.check("reward", allow_zero=True)
        self.env = dataclasses.replace(env) if env is not None else None
        if self.env is not None:
            self.env.check("env")
        if self.generator.procs != 1:
            raise ConfigError(
                "trainer.strategy.generator.procs must be 1: a generator replica is one process "
                "(scale out with generator.num_replicas)"
            )
        if self.reference.procs != 1 or self.reference.num_replicas != 1:
            raise ConfigError("trainer.strategy.reference: procs and num_replicas must be 1")
        check_generator_name(self.generator.backend, "trainer.strategy.generator.backend")
        check_generator_options(self.generator.backend, self.generator.options, "trainer.strategy.generator.options")
        self.staleness = Staleness(max_staleness, correction, tis_cap)  # checks the three fields
        if timeout_s <= 0:
            raise ConfigError(f"trainer.strategy.timeout_s must be > 0, got {timeout_s}")
        self.max_staleness, self.tis_cap, self.correction = max_staleness, tis_cap, correction
        self.restart_on_failure, self.max_restarts = restart_on_failure, max_restarts
        self.sync_transport, self.timeout_s, self.num_threads, self.job = sync_transport, timeout_s, num_threads, job
        WeightPublisher(sync_transport)  # validates the transport name now, not at setup
        self._replicas: list[mesh.Replica] = []
        self._closers: list[Any] = []
        self._hook: mesh.FaultHook | None = None
        self.remote_generator: RemoteGenerator | None = None
        self._envs: RemoteEnvRunner | None = None

    @property
    def generator_backend(self) -> str:
        """The generator replicas' backend (``generator.backend``)."""
        return self.generator.backend

    def build(self, ctx: RunContext, module: rlforge.RLModule) -> Services:
        ranks = world_size()  # every rank, tensor-parallel peers included
        if ranks != ctx.world_size:
            raise ConfigError(
                f"MonarchStrategy with tensor parallelism ({ranks} ranks, {ctx.world_size} data-parallel) is not "
                "supported: use LocalStrategy, or FSDP without tensor_parallel_degree"
            )
        if ranks > 1 and ctx.rank != 0:  # rank 0 drives the run's one set of actors and scatters the groups
            services, rollouts = self.place(ctx, module)
            services.rank0_samples = True
            if rollouts:
                services.full_weights = services.payload = lambda: generator_weights(module.policy)
            return services
        services, rollouts = self.place(ctx, module)
        services.rank0_samples = ranks > 1
        self._check_env(module)
        remote_envs = self.env is not None  # checked: the module has an environment
        if not rollouts and not remote_envs:
            return services
        mesh.prepare_environment()
        self._hook = mesh.FaultHook()
        self._hook.install()
        job_state = placement.load_job(self.job)
        if remote_envs:  # validation runs episodes too, so env workers serve every stage
            services.envs = self._env_runner(module, job_state)
        if not rollouts:
            return services
        policy = module.policy
        from rlforge.strategies.monarch.actors.generator import GeneratorActor
        from rlforge.strategies.monarch.actors.spec import PolicySpec
        from rlforge.strategies.monarch.generators import RemoteGenerator

        spec = PolicySpec.of(policy)
        cfg = self.generator

        def spawn(index: int) -> mesh.Replica:
            return mesh.spawn_replica(
                placement.host_mesh(job_state, cfg, index), cfg, "generator", index, GeneratorActor, spec,
                module.tokenizer, ctx.seed + 1000 * index, cfg.backend, placement.worker_device(cfg, index),
                self.num_threads, cfg.options,
            )  # fmt: skip

        publisher = WeightPublisher(self.sync_transport)
        self._closers.append(publisher)
        generator = RemoteGenerator(
            spawn, cfg.num_replicas, publisher, self.timeout_s, self.staleness.asynchronous,
            self.restart_on_failure, self.max_restarts, ctx.log,
        )  # fmt: skip
        self._closers.insert(0, generator)
        self.remote_generator = generator
        services.generator, services.validate_on_generator = generator, False
        services.full_weights = services.payload = lambda: generator_weights(policy)  # merged for PEFT
        generator.update_weights(services.full_weights(), 0)
        generator.drain_acks()
        if module.beta > 0 or module.needs_reference:
            services.reference = self._reference(policy, spec, job_state, module.compile_forward, module.precision)
        if self.reward.num_replicas:
            services.scorer = self._scorer(module, job_state)
        return services

    def _reference(self, policy: Any, spec: Any, job_state: Any, compile: bool, precision: str) -> Any:
        if is_peft_model(policy):  # the base with adapters disabled, in this process: no actor, no copy
            return LocalReference(policy, compile, precision)
        from rlforge.strategies.monarch.actors.reference import ReferenceActor
        from rlforge.strategies.monarch.remote import RemoteReference

        cfg = self.reference
        replica = mesh.spawn_replica(
            placement.host_mesh(job_state, cfg, 0), cfg, "reference", 0, ReferenceActor, spec,
            placement.worker_device(cfg, 0), self.num_threads, compile, precision,
        )  # fmt: skip
        self._replicas.append(replica)
        return RemoteReference(replica, policy.state_dict(), self.sync_transport, self.timeout_s)

    def _scorer(self, module: rlforge.RLModule, job_state: Any) -> Any:
        from rlforge.strategies.monarch.actors.reward import RewardActor
        from rlforge.strategies.monarch.remote import RemoteRewardRunner

        runner = getattr(module, "reward_runner", None)
        if runner is None:
            raise ConfigError(
                f"trainer.strategy.reward.num_replicas > 0 needs a module with a `reward_runner` (GRPOModule); "
                f"{type(module).__name__} has none: set reward.num_replicas 0"
            )
        cfg, workers = self.reward, []
        dim = "gpus" if cfg.with_gpus else "procs"
        for i in range(cfg.num_replicas):
            replica = mesh.spawn_replica(
                placement.host_mesh(job_state, cfg, i), cfg, "reward", i, RewardActor,
                runner.reward_fns, runner.weights, runner.timeout_s, runner.max_error_frac,
            )  # fmt: skip
            self._replicas.append(replica)
            workers += [replica.actor.slice(**{dim: j}) for j in range(cfg.procs)]
        return RemoteRewardRunner(workers, runner, self.timeout_s)

    def _check_env(self, module: rlforge.RLModule) -> None:
        if self.env is None:
            return
        if module.environment is None:
            raise ConfigError(
                f"trainer.strategy.env places environment workers, but {type(module).__name__} has no "
                "module.environment: set one or drop trainer.strategy.env"
            )
        if not module.environment.timeout_s < self.timeout_s:  # a worker answers within it; the wait must be longer
            raise ConfigError(
                f"module.environment.timeout_s={module.environment.timeout_s:g} must be below "
                f"trainer.strategy.timeout_s={self.timeout_s:g} with trainer.strategy.env"
            )
        import cloudpickle  # what Monarch pickles spawn arguments with (a monarch dependency)

        try:
            cloudpickle.dumps(module.environment)
        except Exception as err:  # noqa: BLE001 - any pickling failure means the same thing to the user
            raise ConfigError(
                f"module.environment ({type(module.environment).__name__}) must pickle to run in env workers "
                f"(trainer.strategy.env): {type(err).__name__}: {' '.join(str(err).split())}; "
                "create what cannot pickle in reset()"
            ) from err

    def _env_runner(self, module: rlforge.RLModule, job_state: Any) -> RemoteEnvRunner:
        from rlforge.strategies.monarch.actors.env import EnvActor
        from rlforge.strategies.monarch.envs import RemoteEnvRunner

        template, cfg = module.environment, self.env
        dim, workers = "gpus" if cfg.with_gpus else "procs", []
        for i in range(cfg.num_replicas):
            replica = mesh.spawn_replica(placement.host_mesh(job_state, cfg, i), cfg, "env", i, EnvActor, template)
            self._replicas.append(replica)
            workers += [replica.actor.slice(**{dim: j}) for j in range(cfg.procs)]
        self._envs = RemoteEnvRunner(workers, template.max_turns, template.timeout_s, self.timeout_s)
        return self._envs

    def generator_pids(self) -> list[int]:
        """Process ids of the generator replicas (diagnostics and fault-injection tests)."""
        return self.remote_generator.pids() if self.remote_generator is not None else []

    def teardown(self) -> None:
        for closer in self._closers:
            closer.close()
        if self._envs is not None:  # open episodes' close() runs before their processes stop
            self._envs.shutdown()
        for replica in self._replicas:
            mesh.stop_replica(replica)
        if self._hook is not None:
            self._hook.uninstall()
        self._replicas, self._closers, self._hook, self.remote_generator, self._envs = [], [], None, None, None
