"""``RewardActor``: scores a shard of a rollout batch with the module's reward functions."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from monarch.actor import Actor, endpoint

from rlforge.rewards import RewardResult, RewardRunner


class RewardActor(Actor):
    """Runs a ``RewardRunner`` (same time limits and error budget as in-process scoring).

    Args:
        reward_fns: Reward callables ``(prompt, response, target) -> float`` (must pickle).
        weights: One weight per reward.
        timeout_s: Per-call time limit.
        max_error_frac: Error budget of one shard.
    """

    def __init__(
        self,
        reward_fns: Sequence[Callable[[str, str, str], float]],
        weights: Sequence[float],
        timeout_s: float | None,
        max_error_frac: float,
    ) -> None:
        self.runner = RewardRunner(
            list(reward_fns), weights=weights, timeout_s=timeout_s, max_error_frac=max_error_frac
        )

    @endpoint
    def score(self, prompts: list[str], responses: list[str], targets: list[str]) -> RewardResult:
        return self.runner(prompts, responses, targets)
