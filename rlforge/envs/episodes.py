"""The multi-turn episode loop: token-in/token-out rollouts against an ``EnvRunner``.

All live episodes of a call advance together: one ``generate`` call per turn for every episode not yet done,
then one ``step`` per episode, run concurrently by the runner. An episode's response is its model turns as
sampled (``loss_mask`` 1, sampler logprobs) and the observations between them (``loss_mask`` 0, logprob 0),
tokenised one observation at a time and never re-tokenised, so the update scores exactly the tokens sampled.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlforge.envs.base import Observation, StepResult
from rlforge.generation.params import SamplingParams
from rlforge.metrics import Reduce
from rlforge.types import Completion, Episode, Group


class EnvRunner(Protocol):
    """Environments of live episodes: ``LocalEnvRunner`` in process, env actors on Monarch."""

    max_turns: int

    def reset(self, ids: Sequence[int], rows: Sequence[dict[str, Any]], seeds: Sequence[int]) -> list[StepResult]:
        """Starts episodes; each result's ``observation`` is the first prompt (or the result is a failure)."""
        ...

    def step(self, ids: Sequence[int], actions: Sequence[str]) -> list[StepResult]:
        """Applies one model turn per episode."""
        ...

    def close(self, ids: Sequence[int]) -> None:
        """Ends episodes."""
        ...


class TurnEncoder(Protocol):
    """How text becomes tokens: the module's prompt encoding and the observation encoding."""

    def prompt(self, text: str) -> list[int]: ...
    def observation(self, obs: Observation) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...


@dataclass
class _Trajectory:
    id: int
    row: dict[str, Any]
    prompt: str = ""
    prompt_ids: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    env_seconds: list[float] = field(default_factory=list)
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    stop_reason: str = "stop"
    success: bool | None = None
    error: str | None = None
    done: bool = False

    def append(self, ids: list[int], logprobs: list[float] | None) -> None:
        self.ids += ids
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.mask += [1 if logprobs is not None else 0] * len(ids)


def group_seed(seed: int, step: int, index: int) -> int:
    """The environment seed shared by the episodes of group ``index`` of ``step`` (stable across resumes)."""
    return (seed * 1_000_003 + (step + 1) * 9_176 + index) % (2**31 - 1)


def run_episodes(
    rows: Sequence[dict[str, Any]],
    group_size: int,
    generator: Any,
    envs: EnvRunner,
    encoder: TurnEncoder,
    params: SamplingParams,
    seeds: Sequence[int],
    ids: Iterator[int] | None = None,
    reward_mode: str = "final",
    max_context: int | None = None,
) -> list[Group]:
    """Runs ``group_size`` episodes per row to the end; returns one group per row.

    Args:
        rows: Dataset rows (each reaches ``Environment.reset``).
        group_size: Episodes per row; they share the row's seed.
        generator: Samples model turns (``generate(prompt_ids, params)``).
        envs: The environments.
        encoder: Prompt/observation tokenisation and decoding.
        params: Sampling of one model turn (``n`` is ignored: each episode samples its own turn).
        seeds: One environment seed per row.
        ids: Source of unique episode ids (default: from 0).
        reward_mode: ``final`` (last step's reward) or ``sum``.
        max_context: The model's context length: an episode whose context cannot hold another full turn ends
            there, truncated (``stop_reason`` ``length``), instead of overrunning the position embeddings.

    Each episode's ``completion.metadata`` records its ``env_error`` (if any) and ``env_s`` (seconds per
    environment step); ``episode_metrics`` turns them into the step's metrics.
    """
    ids = ids if ids is not None else itertools.count()
    trajs = [_Trajectory(next(ids), row) for row in rows for _ in range(group_size)]
    row_seeds = [seed for seed in seeds for _ in range(group_size)]
    for traj, start in zip(trajs, envs.reset([t.id for t in trajs], [t.row for t in trajs], row_seeds), strict=True):
        if start.observation is None:  # failed reset: an empty episode with reward 0 keeps the group aligned
            traj.error, traj.done = str(start.info.get("error", "reset failed")), True
            traj.prompt = str(traj.row.get("prompt", ""))
        else:
            traj.prompt = start.observation.text
        traj.prompt_ids = encoder.prompt(traj.prompt) or encoder.prompt(" ")
    turn = dataclasses.replace(params, n=1)
    while live := [t for t in trajs if not t.done]:
        if max_context is not None:
            for traj in live:
                if len(traj.prompt_ids) + len(traj.ids) + turn.max_new_tokens > max_context:
                    traj.done, traj.stop_reason = True, "length"
            if not (live := [t for t in live if not t.done]):
                break
        completions = generator.generate([t.prompt_ids + t.ids for t in live], turn)
        for traj, (completion,) in zip(live, completions, strict=True):
            traj.append(list(completion.token_ids), list(completion.logprobs))
            traj.versions.append(completion.policy_version)
            traj.turns, traj.stop_reason = traj.turns + 1, completion.stop_reason
        results = envs.step([t.id for t in live], [c[0].text for c in completions])
        for traj, result in zip(live, results, strict=True):
            _apply(traj, result, envs.max_turns, encoder)
    envs.close([t.id for t in trajs])
    return [
        [_episode(t, encoder, reward_mode) for t in trajs[i : i + group_size]] for i in range(0, len(trajs), group_size)
    ]


def _apply(traj: _Trajectory, result: StepResult, max_turns: int, encoder: TurnEncoder) -> None:
    """Adds one step's outcome to ``traj``."""
    traj.rewards.append(float(result.reward))
    if "seconds" in result.info:
        traj.env_seconds.append(float(result.info["seconds"]))
    traj.tool_calls += int(result.info.get("tool_calls", 0))
    traj.tool_errors += int(result.info.get("tool_errors", 0))
    if "success" in result.info:
        traj.success = bool(result.info["success"])
    failed = "error" in result.info
    if failed:
        traj.error = str(result.info["error"])
    if failed or result.done or result.observation is None or traj.turns >= max_turns:
        traj.done = True
    else:
        traj.append(encoder.observation(result.observation), None)


def _episode(traj: _Trajectory, encoder: TurnEncoder, reward_mode: str) -> Episode:
    if traj.error is not None or not traj.rewards:
        reward = 0.0
    else:
        reward = sum(traj.rewards) if reward_mode == "sum" else traj.rewards[-1]
    completion = Completion(
        text=encoder.decode(traj.ids),
        token_ids=traj.ids,
        logprobs=traj.logprobs,
        prompt_ids=traj.prompt_ids,
        stop_reason=traj.stop_reason,
        policy_version=min(traj.versions, default=0),  # staleness is that of the oldest turn
        metadata={
            "env_s": traj.env_seconds,
            "tool_errors": traj.tool_errors,
            **({"env_error": traj.error} if traj.error else {}),
        },
        loss_mask=traj.mask,
    )
    success = traj.success if traj.success is not None and traj.error is None else reward > 0
    return Episode(
        prompt=traj.prompt,
        target=str(traj.row.get("target", "")),
        completion=completion,
        reward=float(reward),
        reward_breakdown={"env": float(reward)},
        turns=traj.turns,
        tool_calls=traj.tool_calls,
        success=bool(success),
    )


def episode_metrics(groups: Sequence[Group]) -> dict[str, tuple[float, Reduce]]:
    """``env/*`` and turn metrics of the episodes a step trains on: ``{name: (value, reduce)}``."""
    episodes = [ep for group in groups for ep in group]
    seconds = [s for ep in episodes for s in ep.completion.metadata.get("env_s", [])]
    metrics = {
        "env/errors": (float(sum("env_error" in ep.completion.metadata for ep in episodes)), Reduce.SUM),
        "rollout/turns_mean": (statistics.fmean(ep.turns for ep in episodes), Reduce.MEAN),
        "rollout/tool_calls_mean": (statistics.fmean(ep.tool_calls for ep in episodes), Reduce.MEAN),
        "rollout/tool_errors_mean": (
            statistics.fmean(ep.completion.metadata.get("tool_errors", 0) for ep in episodes),
            Reduce.MEAN,
        ),
        "rollout/episode_len": (statistics.fmean(len(ep.completion.token_ids) for ep in episodes), Reduce.MEAN),
    }
    if seconds:
        metrics["env/step_s"] = (statistics.fmean(seconds), Reduce.MEAN)
    return metrics
