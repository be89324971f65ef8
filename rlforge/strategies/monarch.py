"""``MonarchStrategy``: generator replicas, the reference model and reward workers as Monarch actors.

The trainer (this process) keeps the trainable policy. Around it, on process meshes of this host or
of a Monarch job's hosts (SLURM, Kubernetes, ...):

* ``generator``: ``num_replicas`` ``GeneratorActor``s; a prompt batch is split into contiguous shards,
  one per replica (replica ``i`` samples with seed ``trainer.seed + 1000 * i``, so one replica reproduces
  ``LocalStrategy``'s rollouts).
* ``reference``: one ``ReferenceActor`` (only when ``module.beta > 0`` or ``module.needs_reference``).
* ``reward``: ``num_replicas * procs`` ``RewardActor``s scoring shards (0: score in-process).

Weights: ``sync_weights`` packs the policy into a flat versioned buffer (``WeightPublisher``); each
replica pulls it (``RDMABuffer.read_into``) and acknowledges the version; a version is freed once every
replica acked a newer one.

Async rollouts (``max_staleness >= 1``): the rollout of step k+1 is submitted before the update of
step k, so sampling and training overlap; episodes more than ``max_staleness`` versions old are dropped
(``rollout/dropped_stale``) and the update is corrected by truncated importance sampling (see
``rlforge.strategies.offpolicy``).

Faults: see ``rlforge.strategies.mesh``; a dead generator is respawned with the current weights
(``restart_on_failure``) or the run stops after saving a checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

import torch

from rlforge.errors import ConfigError, WorkerDiedError
from rlforge.generation import PolicySampler, SamplingParams
from rlforge.models import compute_logprobs
from rlforge.models.peft import base_model, generator_weights, is_peft_model
from rlforge.strategies import mesh, placement
from rlforge.strategies.actors.factory import check_backend
from rlforge.strategies.actors.spec import PolicySpec
from rlforge.strategies.base import Strategy
from rlforge.strategies.offpolicy import drop_stale, truncated_is
from rlforge.strategies.remote_reward import RemoteRewardRunner
from rlforge.strategies.services import ServiceConfig
from rlforge.strategies.weights import WeightPublisher
from rlforge.types import Completion, Episode, Group, TrainBatch

if TYPE_CHECKING:
    import rlforge

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Request:
    """One submitted rollout: its rows and one future per generator shard."""

    rows: list[dict[str, Any]]
    prompt_ids: list[list[int]]
    params: SamplingParams
    shards: list[tuple[int, int, int, Any]]  # (replica index, lo, hi, future)


class MonarchStrategy(Strategy):
    """Generator, reference model and reward workers as Monarch actors (one host or many).

    Args:
        generator: Placement of the generator replicas (``procs`` must be 1 for the ``torch`` backend).
        reference: Placement of the reference model (``procs`` and ``num_replicas`` must be 1).
        reward: Placement of reward workers; ``num_replicas: 0`` scores in the trainer process.
        generator_backend: Generator built inside each replica (``torch``: ``TorchGenerator``).
        max_staleness: 0: synchronous rollouts. k >= 1: the next rollout overlaps the current update and
            episodes more than k versions older than the policy are dropped. Needs
            ``WeightSync.sync_interval <= k + 1``.
        tis_cap: Upper bound of the truncated importance weight of async (stale) rollouts.
        correction: Off-policy correction of async rollouts: ``tis`` (decoupled PPO: ratio against the current
            policy, advantages times ``min(exp(current - behaviour), tis_cap)``; one extra no-grad forward per
            step) or ``ppo`` (the loss's ratio against the behaviour logprobs, truncated by its own clip; no
            extra forward).
        restart_on_failure: Respawn a generator replica whose process died (with the current weights);
            else save a checkpoint and stop.
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
        generator_backend: str = "torch",
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
        from rlforge.strategies.local import LocalStrategy

        self.generator, self.reference, self.reward = (dataclasses.replace(c) for c in (generator, reference, reward))
        self.generator.check("generator")
        self.reference.check("reference")
        self.reward.check("reward", allow_zero=True)
        if self.generator.procs != 1:
            raise ConfigError(
                "trainer.strategy.generator.procs must be 1: a TorchGenerator replica is one process "
                "(scale out with generator.num_replicas)"
            )
        if self.reference.procs != 1 or self.reference.num_replicas != 1:
            raise ConfigError("trainer.strategy.reference: procs and num_replicas must be 1")
        check_backend(generator_backend)
        if max_staleness < 0:
            raise ConfigError(f"trainer.strategy.max_staleness must be >= 0, got {max_staleness}")
        if not tis_cap >= 1.0:
            raise ConfigError(f"trainer.strategy.tis_cap must be >= 1, got {tis_cap}")
        if correction not in ("tis", "ppo"):
            raise ConfigError(f"trainer.strategy.correction must be 'tis' or 'ppo', got {correction!r}")
        self.correction = correction
        if timeout_s <= 0:
            raise ConfigError(f"trainer.strategy.timeout_s must be > 0, got {timeout_s}")
        self.generator_backend, self.max_staleness, self.tis_cap = generator_backend, max_staleness, tis_cap
        self.restart_on_failure, self.max_restarts = restart_on_failure, max_restarts
        self.sync_transport, self.timeout_s, self.num_threads = sync_transport, timeout_s, num_threads
        self.job, self.device = job, device
        WeightPublisher(sync_transport)  # validates the transport name now, not at setup
        self._device_of = LocalStrategy(device)  # root-device rules shared with LocalStrategy
        self._reset()

    def _reset(self) -> None:
        self._trainer: rlforge.RLTrainer | None = None
        self._policy_sampler: PolicySampler | None = None
        self._generators: list[mesh.Replica] = []
        self._reference_replica: mesh.Replica | None = None
        self._reward_replicas: list[mesh.Replica] = []
        self._reward_runner_backup: Any = None
        self._publisher: WeightPublisher | None = None
        self._acks: list[tuple[int, Any]] = []
        self._versions: dict[int, int] = {}  # replica index -> acknowledged version
        self._inflight: deque[_Request] = deque()
        self._resume_rows: deque[list[dict[str, Any]]] = deque()
        self._collecting: _Request | None = None
        self._reference_weights: dict[str, torch.Tensor] | None = None
        self._hook: mesh.FaultHook | None = None
        self._job_state: Any = None
        self._spec: PolicySpec | None = None

    # ------------------------------------------------------------------------------------ placement
    @property
    def root_device(self) -> torch.device:
        return self._device_of.root_device

    @property
    def asynchronous(self) -> bool:
        return self.max_staleness > 0

    # ---------------------------------------------------------------------------------------- setup
    def setup(self, trainer: rlforge.RLTrainer, module: rlforge.RLModule) -> None:
        self._trainer = trainer
        module.policy.to(self.root_device)
        self._policy_sampler = PolicySampler(module.policy, module.tokenizer, seed=trainer.seed + 1)
        if trainer.stage != "fit" or module.supervised:
            return
        sync_interval = trainer.weight_sync.sync_interval
        if self.asynchronous and sync_interval > self.max_staleness + 1:
            raise ConfigError(
                f"trainer.strategy.max_staleness={self.max_staleness} with WeightSync.sync_interval={sync_interval} "
                f"would drop every rollout: set max_staleness >= sync_interval - 1"
            )
        mesh.prepare_environment()
        from rlforge.strategies.actors.generator import GeneratorActor
        from rlforge.strategies.actors.reference import ReferenceActor
        from rlforge.strategies.actors.reward import RewardActor

        self._hook = mesh.FaultHook()
        self._hook.install()
        self._job_state = placement.load_job(self.job)
        self._publisher = WeightPublisher(self.sync_transport)
        self._spec = PolicySpec.of(module.policy)
        for i in range(self.generator.num_replicas):
            self._generators.append(self._spawn_generator(i, module, GeneratorActor))
        # A PEFT policy is its own reference (adapters disabled, in this process): no reference actor.
        if (module.beta > 0 or module.needs_reference) and not is_peft_model(module.policy):
            self._reference_weights = {
                k: v.detach().to("cpu", copy=True) for k, v in module.policy.state_dict().items()
            }
            self._reference_replica = mesh.spawn_replica(
                placement.host_mesh(self._job_state, self.reference, 0), self.reference, "reference", 0, ReferenceActor,
                self._spec, placement.worker_device(self.reference, 0), self.num_threads,
            )  # fmt: skip
        if self.reward.num_replicas:
            self._setup_rewards(module, RewardActor)
        handle = self._publisher.publish(generator_weights(module.policy), trainer.policy_version)
        for replica in self._generators:
            self._acks.append((replica.index, replica.actor.update_weights.call_one(handle, self.timeout_s)))
        if self._reference_replica is not None:
            mesh.wait(
                self._reference_replica.actor.load_weights.call_one(handle, self.timeout_s),
                "reference: load_weights",
                self.timeout_s,
            )
        self._drain_acks()

    def _spawn_generator(self, index: int, module: rlforge.RLModule, actor_cls: type | None = None) -> mesh.Replica:
        if actor_cls is None:
            from rlforge.strategies.actors.generator import GeneratorActor as actor_cls
        replica = mesh.spawn_replica(
            placement.host_mesh(self._job_state, self.generator, index), self.generator, "generator", index, actor_cls,
            self._spec, module.tokenizer, self._trainer.seed + 1000 * index, self.generator_backend,
            placement.worker_device(self.generator, index), self.num_threads,
        )  # fmt: skip
        return replica

    def _setup_rewards(self, module: rlforge.RLModule, actor_cls: type) -> None:
        runner = getattr(module, "reward_runner", None)
        if runner is None:
            raise ConfigError(
                f"trainer.strategy.reward.num_replicas > 0 needs a module with a `reward_runner` (GRPOModule); "
                f"{type(module).__name__} has none: set reward.num_replicas 0"
            )
        workers = []
        dim = "gpus" if self.reward.with_gpus else "procs"
        for i in range(self.reward.num_replicas):
            replica = mesh.spawn_replica(
                placement.host_mesh(self._job_state, self.reward, i), self.reward, "reward", i, actor_cls,
                runner.reward_fns, runner.weights, runner.timeout_s, runner.max_error_frac,
            )  # fmt: skip
            self._reward_replicas.append(replica)
            workers += [replica.actor.slice(**{dim: j}) for j in range(self.reward.procs)]
        self._reward_runner_backup = runner
        module.reward_runner = RemoteRewardRunner(workers, runner, self.timeout_s)

    # ------------------------------------------------------------------------------- weight sync
    @property
    def generator_version(self) -> int:
        return min(self._versions.values()) if self._versions else 0

    def _drain_acks(self) -> None:
        """Waits for outstanding version acknowledgements (in order; each is behind at most one request)."""
        pulls = []
        while self._acks:
            index, future = self._acks.pop(0)
            version, pull_s = self._guard(index, lambda f=future: f, "update_weights")
            self._versions[index] = version
            self._publisher.ack(f"generator{index}", version)
            pulls.append(pull_s)
        if pulls and self._trainer is not None:
            self._trainer._log_metric("perf/sync_pull_s", max(pulls))

    @torch.no_grad()
    def sync_weights(self, module: rlforge.RLModule, version: int) -> int:
        handle = self._publisher.publish(generator_weights(module.policy), version)  # merged for a PEFT policy
        for replica in self._generators:
            self._acks.append((replica.index, replica.actor.update_weights.call_one(handle, self.timeout_s)))
        if not self.asynchronous:
            self._drain_acks()
        return handle.layout.nbytes

    # -------------------------------------------------------------------------------- rollouts
    def _submit(
        self, module: rlforge.RLModule, prompt_ids: list[list[int]], params: SamplingParams, rows=None
    ) -> _Request:
        self._drain_acks()  # the request below must see the newest published weights
        n = len(self._generators)
        bounds = [len(prompt_ids) * i // n for i in range(n + 1)]
        shards = []
        for replica, lo, hi in zip(self._generators, bounds[:-1], bounds[1:], strict=True):
            if hi > lo:
                shards.append((replica.index, lo, hi, replica.actor.generate.call_one(prompt_ids[lo:hi], params)))
        return _Request(rows or [], prompt_ids, params, shards)

    def _collect(self, request: _Request) -> list[list[Completion]]:
        self._collecting = request
        out: list[list[Completion]] = []
        for index, lo, hi, future in request.shards:
            retry = (
                lambda i=index, lo=lo, hi=hi: self._generators[i].actor.generate.call_one(  # noqa: E731
                    request.prompt_ids[lo:hi], request.params
                )
            )
            out += self._guard(index, lambda f=future: f, "generate", retry)
        self._collecting = None
        return out

    def generate(
        self, module: rlforge.RLModule, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Completion]]:
        return self._collect(self._submit(module, prompt_ids, params))

    def generate_with_policy(
        self, module: rlforge.RLModule, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Completion]]:
        return self._policy_sampler.generate(prompt_ids, params)

    def _next_rows(self, datamodule: rlforge.RLDataModule) -> list[dict[str, Any]]:
        return self._resume_rows.popleft() if self._resume_rows else datamodule.next_batch()

    def _request(self, module: rlforge.RLModule, rows: list[dict[str, Any]]) -> _Request:
        prompt_ids = [module.encode_prompt(row["prompt"]) for row in rows]
        return self._submit(module, prompt_ids, module.sampling, rows)

    def _groups(self, request: _Request, completions: list[list[Completion]]) -> list[Group]:
        return [
            [Episode(prompt=row["prompt"], target=str(row["target"]), completion=c) for c in group]
            for row, group in zip(request.rows, completions, strict=True)
        ]

    def next_rollout(self, module: rlforge.RLModule, datamodule: rlforge.RLDataModule) -> list[Group]:
        trainer = self._trainer
        if not self._inflight:
            self._inflight.append(self._request(module, self._next_rows(datamodule)))
        request = self._inflight.popleft()
        groups = self._groups(request, self._collect(request))
        if self.asynchronous and trainer.global_step + 1 < trainer.max_steps:
            # Step k+1's rollout starts now and samples while step k trains (with version k-1 weights).
            self._inflight.append(self._request(module, self._next_rows(datamodule)))
        if not self.asynchronous:
            return groups
        kept, dropped = drop_stale(groups, trainer.policy_version, self.max_staleness)
        trainer._log_metric("rollout/dropped_stale", dropped)
        while not kept:  # all too old (sync_interval > 1): sample afresh with the newest weights
            fresh = self._request(module, self._next_rows(datamodule))
            kept, _ = drop_stale(self._groups(fresh, self._collect(fresh)), trainer.policy_version, self.max_staleness)
        return kept

    @torch.no_grad()
    def prepare_batch(self, module: rlforge.RLModule, batch: TrainBatch) -> TrainBatch:
        if not self.asynchronous or self.correction == "ppo":
            return batch
        prox, _ = compute_logprobs(
            module.policy, batch.input_ids, batch.attention_mask, batch.prompt_len, module.sampling.temperature
        )
        batch, metrics = truncated_is(batch, prox * batch.response_mask, self.tis_cap)
        for name, value in metrics.items():
            self._trainer._log_metric(name, value)
        return batch

    @torch.no_grad()
    def reference_logprobs(self, module: rlforge.RLModule, batch: TrainBatch) -> torch.Tensor:
        if is_peft_model(module.policy):
            with base_model(module.policy) as reference:
                logprobs, _ = compute_logprobs(
                    reference, batch.input_ids, batch.attention_mask, batch.prompt_len, module.sampling.temperature
                )
            return logprobs
        if self._reference_replica is None:
            raise ConfigError(
                "a KL term needs the reference model, but it was not built at setup: start with beta > 0 "
                "or set `module.needs_reference = True` in a setup hook (e.g. an adaptive KL controller)"
            )
        future = self._reference_replica.actor.logprobs.call_one(
            batch.input_ids.cpu(), batch.attention_mask.cpu(), batch.prompt_len, module.sampling.temperature
        )
        return mesh.wait(future, "reference: logprobs", self.timeout_s).to(batch.input_ids.device)

    # ---------------------------------------------------------------------------------------- faults
    def _guard(self, index: int, future_fn: Any, what: str, retry: Any = None) -> Any:
        """Waits on a generator call; a dead process is respawned (and ``retry`` re-sent) or stops the run."""
        future = future_fn()
        while True:
            try:
                return mesh.wait(future, f"generator replica {index}: {what}", self.timeout_s)
            except WorkerDiedError as err:
                replica = self._generators[index]
                if not self.restart_on_failure or replica.restarts >= self.max_restarts:
                    self._stop_with_checkpoint(err)
                self._respawn(index)
                if retry is None:  # a lost weight update: the respawned replica already has the newest
                    return self._versions[index], 0.0
                future = retry()

    def _respawn(self, index: int) -> None:
        old = self._generators[index]
        log.warning(
            "generator replica %d died; respawning it with policy version %d", index, self._publisher.latest.version
        )
        mesh.stop_replica(old, timeout_s=5.0)
        self._publisher.forget(f"generator{index}")
        replica = self._spawn_generator(index, self._trainer.module)
        replica.restarts = old.restarts + 1
        self._generators[index] = replica
        # Acks still queued for the dead actor can never arrive.
        self._acks = [(i, f) for i, f in self._acks if i != index]
        handle = self._publisher.latest
        version, _ = mesh.wait(
            replica.actor.update_weights.call_one(handle, self.timeout_s),
            f"generator replica {index}: update_weights",
            self.timeout_s,
        )
        self._versions[index] = version
        self._publisher.ack(f"generator{index}", version)
        if self._trainer is not None:
            self._trainer._log_metric("rollout/restarts", 1.0)

    def _stop_with_checkpoint(self, err: WorkerDiedError) -> None:
        trainer = self._trainer
        try:
            callback = trainer.checkpoint_callback
            if callback is not None:
                path = callback.save(trainer)
            else:
                path = trainer.save_checkpoint(trainer.log_dir / "checkpoints" / f"step-{trainer.global_step:06d}")
            saved = f"saved checkpoint {path} (step {trainer.global_step}); resume with --ckpt_path last"
        except Exception as save_err:  # never hide the cause behind a failed save
            saved = f"saving a checkpoint failed too ({type(save_err).__name__}: {save_err})"
        raise WorkerDiedError(f"{err}; {saved}") from err

    # -------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        if not self._generators:
            return {}
        rng = []
        for replica in self._generators:
            try:
                rng.append(mesh.wait(replica.actor.state_dict.call_one(), "generator: state_dict", self.timeout_s))
            except WorkerDiedError:
                rng.append(None)
        requests = ([self._collecting] if self._collecting else []) + list(self._inflight)
        pending = [r.rows for r in requests if r.rows]
        state: dict[str, Any] = {"generators": rng, "pending_rows": [*pending, *self._resume_rows]}
        latest = self._publisher.latest
        state["generator_version"] = latest.version
        if latest.version != self._trainer.policy_version:
            state["generator_weights"] = {k: v.clone() for k, v in self._publisher.latest_state_dict().items()}
        if self._reference_weights is not None:
            state["reference_weights"] = self._reference_weights
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state or not self._generators:
            return
        weights = state.get("generator_weights") or generator_weights(self._trainer.module.policy)
        version = int(state.get("generator_version", self._trainer.policy_version))
        handle = self._publisher.publish(weights, version)
        for replica in self._generators:
            self._acks.append((replica.index, replica.actor.update_weights.call_one(handle, self.timeout_s)))
        self._drain_acks()
        for replica, rng in zip(self._generators, state.get("generators", []), strict=False):
            if rng is not None:
                mesh.wait(replica.actor.load_state_dict.call_one(rng), "generator: load_state_dict", self.timeout_s)
        self._resume_rows = deque(state.get("pending_rows", []))
        if "reference_weights" in state and self._reference_replica is not None:
            self._reference_weights = state["reference_weights"]
            ref_publisher = WeightPublisher(self.sync_transport)
            ref_handle = ref_publisher.publish(self._reference_weights, -1)
            mesh.wait(
                self._reference_replica.actor.load_weights.call_one(ref_handle, self.timeout_s),
                "reference: load_weights",
                self.timeout_s,
            )
            ref_publisher.close()

    def generator_pids(self) -> list[int]:
        """Process ids of the generator replicas (diagnostics and fault-injection tests)."""
        return [mesh.wait(r.actor.pid.call_one(), "generator: pid", self.timeout_s) for r in self._generators]

    def teardown(self) -> None:
        module = self._trainer.module if self._trainer is not None else None
        if module is not None and self._reward_runner_backup is not None:
            module.reward_runner = self._reward_runner_backup
        replicas = [*self._generators, *self._reward_replicas]
        if self._reference_replica is not None:
            replicas.append(self._reference_replica)
        for replica in replicas:
            mesh.stop_replica(replica)
        if self._publisher is not None:
            self._publisher.close()
        if self._hook is not None:
            self._hook.uninstall()
        self._reset()
