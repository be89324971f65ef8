"""``RolloutEngine``: the rollout half of an RL step, the same for every strategy.

``next(step)`` turns prompts into a training batch::

    rows -> generator (prefetched when async) -> scores (+ DAPO overlong shaping) -> drop stale groups
         -> dynamic sampling -> advantages -> collate -> overlong filtering -> off-policy correction
         -> reference logprobs -> rollout metrics

It talks only to ``Services`` (``rlforge.services``), the datamodule and the module's algorithm hooks
(``score``, ``compute_advantages``, ``configure_rollout``). With ``services.envs`` (``module.environment``) the
generator step is the multi-turn episode loop of ``rlforge.envs.episodes``; everything after it is the same.

Async rollouts are scored ahead: step k+1's request is scored on a background thread as soon as its completions
arrive, while step k's update runs, so reward work (the reward workers, a verifier, a judge) is off the critical
path. ``module.score`` then runs outside the main thread: it must only touch the groups it is given (the built-in
``GRPOModule.score`` does) and return its metrics rather than log them. Scores are the same either way.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import threading
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from rlforge.data.collate import collate_episodes
from rlforge.envs.encoding import ModuleTurnEncoder, context_limit
from rlforge.envs.episodes import episode_metrics, group_seed, run_episodes
from rlforge.errors import ConfigError
from rlforge.metrics import Reduce, rollout_metrics
from rlforge.models import compute_logprobs
from rlforge.offpolicy import drop_stale, truncated_is
from rlforge.parallel.shard import check_divisible, rank_slice
from rlforge.services import Done, Pending, RunContext, Services, submit
from rlforge.shaping import apply_overlong_penalty, dynamic_sample, mask_truncated
from rlforge.types import Episode, Group, TrainBatch

if TYPE_CHECKING:
    from rlforge.module import RLModule

Rows = list[dict[str, Any]]
# One scoring at a time (a background one and a fresh resample may meet): reward runners need not be reentrant.
# Module-level so an engine stays deep-copyable.
_SCORE_LOCK = threading.Lock()


@dataclass(frozen=True)
class RolloutOptions:
    """Data-side techniques of the algorithm (DAPO's), applied by the engine (``RLModule.configure_rollout``).

    Attributes:
        dynamic_sampling: Resample prompts until the batch has ``data.batch_size`` groups whose rewards differ.
        max_sampling_tries: Rollout calls per step allowed by dynamic sampling.
        overlong_cache_len: Soft overlong punishment over the last N tokens before ``max_new_tokens`` (0: off).
        overlong_penalty: Reward subtracted at ``max_new_tokens`` by the overlong punishment.
        filter_truncated: Truncated responses get no loss.
    """

    dynamic_sampling: bool = False
    max_sampling_tries: int = 1
    overlong_cache_len: int = 0
    overlong_penalty: float = 1.0
    filter_truncated: bool = False


class RolloutEngine:
    """Samples, scores and prepares one training batch per step.

    With several ranks (``ctx.world_size``) every rank draws the same ``data.batch_size`` prompts and keeps its
    contiguous share: whole groups, scored and given advantages on the rank that sampled them.

    Args:
        services: The strategy's services (``generator`` required).
        datamodule: Source of prompt rows (``next_batch()``, ``batch_size``).
        module: The algorithm (``encode_prompt``, ``sampling``, ``score``, ``compute_advantages``, ``beta``).
        ctx: The run (seed, device, ``sync_interval``, ``max_steps``, metric sink, rank and world size).
    """

    def __init__(self, services: Services, datamodule: Any, module: RLModule, ctx: RunContext) -> None:
        self.services, self.datamodule, self.module, self.ctx = services, datamodule, module, ctx
        self.options: RolloutOptions = module.configure_rollout()
        self.staleness = services.staleness
        if self.staleness.asynchronous and ctx.sync_interval > self.staleness.max_staleness + 1:
            raise ConfigError(
                f"trainer.strategy.max_staleness={self.staleness.max_staleness} with WeightSync.sync_interval="
                f"{ctx.sync_interval} would drop every rollout: set max_staleness >= sync_interval - 1"
            )
        check_divisible(datamodule.batch_size, ctx.world_size, "data.batch_size")
        self._episode_ids = itertools.count()
        # Same seed on every rank: the k-th request draws the same base seed everywhere (group_seeds).
        self._seed_rng = torch.Generator().manual_seed(ctx.seed)
        self._inflight: deque[tuple[Rows, Pending | _ScoredAhead]] = deque()
        self._collecting: Rows | None = None
        self._resume_rows: deque[Rows] = deque()

    # ----------------------------------------------------------------------------------------- a step
    def next(self, step: int) -> tuple[list[Group], TrainBatch]:
        """The groups and the collated batch of RL step ``step + 1`` (``step`` = completed steps = policy version)."""
        groups = self.groups(step)
        return groups, self.train_batch(groups, step)

    def groups(self, step: int) -> list[Group]:
        """This step's scored groups with advantages (``data.batch_size / world_size`` of them)."""
        if self.options.dynamic_sampling:
            sample = functools.partial(self._scored, step)
            wanted = self.datamodule.batch_size // self.ctx.world_size
            groups, stats = dynamic_sample(sample, wanted, self.options.max_sampling_tries)
            for name, value in stats.items():
                self.ctx.log(name, value)
        else:
            groups = self._scored(step)
        self.module.compute_advantages(groups)
        return groups

    def train_batch(self, groups: list[Group], step: int) -> TrainBatch:
        """``groups`` collated for the update: overlong filtering, off-policy correction, reference logprobs
        (taken from the episodes when they carry them already), rollout metrics."""
        module, log = self.module, self.ctx.log
        episodes = [ep for group in groups for ep in group]
        batch = collate_episodes(episodes, module.tokenizer.pad_token_id, self.ctx.device)
        if self.options.filter_truncated:
            batch.response_mask = mask_truncated(episodes, batch.response_mask)
        batch = self._correct(batch)
        # needs_reference: KL measured (KLMonitor) or beta adapted. Episodes scored by rank 0's reference (a
        # scattered step) arrive with their logprobs, which collate already put in the batch.
        if (module.beta > 0 or module.needs_reference) and batch.ref_logprobs is None:
            batch.ref_logprobs = self._reference_logprobs(batch)
            for ep, row in zip(episodes, batch.ref_logprobs.tolist(), strict=True):
                ep.ref_logprobs = row[: len(ep.completion.token_ids)]
        for name, value in rollout_metrics(groups, step).items():
            log(name, value)
        if self.services.envs is not None:
            for name, (value, reduce) in episode_metrics(groups).items():
                log(name, value, reduce)
        return batch

    def attach_reference(self, groups: list[Group]) -> None:
        """Puts the reference logprobs on every episode of ``groups`` (rank 0 of a scattered step: its reference
        service scores the whole step once, before the groups go to the ranks that train on them)."""
        if not (self.module.beta > 0 or self.module.needs_reference):
            return
        episodes = [ep for group in groups for ep in group]
        batch = collate_episodes(episodes, self.module.tokenizer.pad_token_id, self.ctx.device)
        for ep, row in zip(episodes, self._reference_logprobs(batch).tolist(), strict=True):
            ep.ref_logprobs = row[: len(ep.completion.token_ids)]

    def _scored(self, step: int) -> list[Group]:
        """The next scored groups: the prefetched request if any; async: prefetch (and score ahead) the next one,
        drop the too-stale groups."""
        if not self._inflight:
            self._inflight.append(self._request(self._next_rows(), step))
        rows, request = self._inflight.popleft()
        self._collecting = rows
        if isinstance(request, _ScoredAhead):
            groups, metrics, dropped = request.result()
        else:
            groups = request.result()
            metrics = self._score(groups)
        self._collecting = None
        if self.staleness.asynchronous:
            if step + 1 < self.ctx.max_steps:  # step k+1 samples now, while step k trains, with version k-1 weights
                self._inflight.append(self._request(self._next_rows(), step + 1))
            self.ctx.log("rollout/dropped_stale", dropped, Reduce.SUM)
        while not groups:  # all too old (sync_interval > 1): sample afresh with the newest weights
            _, pending = self._submit(self._next_rows(), step)
            groups, metrics, _ = self._fresh_and_scored(step, pending.result())
        for name, value in metrics.items():
            self.ctx.log(name, value)
        return groups

    def _request(self, rows: Rows, step: int) -> tuple[Rows, Pending | _ScoredAhead]:
        """Submits ``rows`` for RL step ``step + 1``; async: scored ahead on a background thread."""
        rows, pending = self._submit(rows, step)
        if not self.staleness.asynchronous:
            return rows, pending
        return rows, _ScoredAhead(pending, functools.partial(self._fresh_and_scored, step))

    def _fresh_and_scored(self, step: int, groups: list[Group]) -> tuple[list[Group], dict[str, float], int]:
        """Async: the groups fresh enough for step ``step + 1`` and their reward metrics; the count dropped."""
        kept, dropped = drop_stale(groups, step, self.staleness.max_staleness)
        return kept, (self._score(kept) if kept else {}), dropped

    def _score(self, groups: list[Group]) -> dict[str, float]:
        """Fills the groups' rewards (``module.score``, then DAPO overlong shaping); returns the reward metrics."""
        scorer, module = self.services.scorer, self.module
        with _SCORE_LOCK:
            metrics = module.score(groups) if scorer is None else module.score(groups, scorer=scorer)
        if self.options.overlong_cache_len:
            episodes = [ep for group in groups for ep in group]
            max_len = module.sampling.max_new_tokens
            apply_overlong_penalty(episodes, max_len, self.options.overlong_cache_len, self.options.overlong_penalty)
        return metrics

    def _next_rows(self) -> Rows:
        if self._resume_rows:  # saved per rank: already this rank's share
            return self._resume_rows.popleft()
        return rank_slice(self.datamodule.next_batch(), self.ctx.rank, self.ctx.world_size)

    def _submit(self, rows: Rows, step: int) -> tuple[Rows, Pending]:
        """Starts sampling the groups of ``rows`` for RL step ``step + 1``; ``result()`` gives the groups."""
        module, generator = self.module, self.services.generator
        if self.services.envs is not None:  # multi-turn: every turn waits on the environments, so run it now
            seeds = [group_seed(self.ctx.seed, step, zlib.crc32(str(row.get("prompt", "")).encode())) for row in rows]
            groups = run_episodes(
                rows, module.group_size, generator, self.services.envs, ModuleTurnEncoder(module), module.sampling,
                seeds, ids=self._episode_ids, reward_mode=module.environment.reward_mode,
                max_context=context_limit(module),
            )  # fmt: skip
            return rows, Done(groups)
        prompt_ids = [module.encode_prompt(row["prompt"]) for row in rows]
        params = module.sampling
        if self.ctx.group_seeds:  # group i of the global batch samples from base + i on whichever rank has it
            base = int(torch.randint(2**62, (1,), generator=self._seed_rng))
            params = dataclasses.replace(params, seed=base + self.ctx.rank * len(rows))
        return rows, _Grouped(rows, submit(generator, prompt_ids, params))

    @torch.no_grad()
    def _correct(self, batch: TrainBatch) -> TrainBatch:
        """Truncated importance sampling of async rollouts (``rlforge.offpolicy``); on-policy batches pass."""
        if not self.staleness.asynchronous or self.staleness.correction == "ppo":
            return batch
        module = self.module
        prox, _ = compute_logprobs(
            module.policy,
            batch.input_ids,
            batch.attention_mask,
            batch.prompt_len,
            module.sampling.temperature,
            compile=module.compile_forward,
            precision=module.precision,
        )
        batch, metrics = truncated_is(batch, prox * batch.response_mask, self.staleness.tis_cap)
        for name, value in metrics.items():
            self.ctx.log(name, value)
        return batch

    def _reference_logprobs(self, batch: TrainBatch) -> torch.Tensor:
        if self.services.reference is None:
            raise ConfigError(
                "a KL term needs the reference model, but it was not built at setup: start with beta > 0 "
                "or set `module.needs_reference = True` in a setup hook (e.g. an adaptive KL controller)"
            )
        return self.services.reference.logprobs(batch, self.module.sampling.temperature)

    # -------------------------------------------------------------------------------------- state
    def state_dict(self, policy_version: int, step_only: bool = False) -> dict[str, Any]:
        """Generator state (RNG; unless ``step_only``, stale and reference weights) and rows sampled but unused."""
        state = self.services.state_dict(policy_version, step_only)
        pending = ([self._collecting] if self._collecting else []) + [rows for rows, _ in self._inflight]
        state["pending_rows"] = pending + list(self._resume_rows)  # always present: a crash save overrides it
        state["seed_rng"] = self._seed_rng.get_state()
        return state

    def load_state_dict(self, state: dict[str, Any], weights: dict[str, torch.Tensor] | None = None) -> None:
        """Restores ``state_dict``; rows that were in flight are sampled again first (``weights``: the policy's,
        gathered already, for a generator that was in sync)."""
        self.services.load_state_dict(state, weights)
        self._resume_rows = deque(state.get("pending_rows", []))
        if "seed_rng" in state:
            self._seed_rng.set_state(state["seed_rng"])


class _ScoredAhead:
    """A submitted request scored on a background thread as soon as its completions arrive.

    ``result()`` waits and gives ``prepare(groups)``; an exception raised there is raised by ``result()``.
    """

    def __init__(self, pending: Pending, prepare: Callable[[list[Group]], Any]) -> None:
        self._future: Future = Future()
        args = (pending, prepare)
        threading.Thread(target=self._run, args=args, name="rlforge-score-ahead", daemon=True).start()

    def _run(self, pending: Pending, prepare: Callable[[list[Group]], Any]) -> None:
        try:
            self._future.set_result(prepare(pending.result()))
        except BaseException as error:  # noqa: BLE001 - handed to the main thread, which raises it
            self._future.set_exception(error)

    def result(self) -> Any:
        return self._future.result()


class _Grouped:
    """A submitted ``generate`` whose ``result()`` is its completions as groups of episodes."""

    def __init__(self, rows: Rows, pending: Pending) -> None:
        self.rows, self.pending = rows, pending

    def result(self) -> list[Group]:
        return [
            [Episode(prompt=row["prompt"], target=str(row["target"]), completion=c) for c in group]
            for row, group in zip(self.rows, self.pending.result(), strict=True)
        ]
