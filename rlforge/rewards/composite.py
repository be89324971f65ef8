"""``CompositeReward``: a weighted sum of rewards that remembers each part of its last score."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from rlforge.errors import ConfigError
from rlforge.rewards.base import Reward, RewardFn
from rlforge.rewards.naming import unique_reward_names

__all__ = ["CompositeReward"]


class CompositeReward:
    """``sum_i weights[i] * rewards[i](prompt, response, target)``.

    After each call, :attr:`last_scores` holds the unweighted score of every part, keyed by reward name
    (:func:`~rlforge.rewards.naming.reward_name`; repeats get ``_2``...), so callers can log
    ``reward/<name>_mean``. It is per thread: a call in one thread never shows up in another's
    ``last_scores``. Exceptions from a part propagate (the
    :class:`~rlforge.rewards.runner.RewardRunner` counts them); to time out or count parts one by one,
    give them to the runner as separate ``reward_fns`` instead.

    Args:
        rewards: Reward callables ``(prompt, response, target) -> float``.
        weights: One weight per reward; default all 1.
    """

    def __init__(self, rewards: Sequence[Reward | RewardFn], weights: Sequence[float] | None = None) -> None:
        self.rewards = list(rewards)
        if not self.rewards:
            raise ConfigError("CompositeReward.rewards is empty; give at least one reward callable.")
        if weights is None:
            weights = [1.0] * len(self.rewards)
        if len(weights) != len(self.rewards):
            raise ConfigError(
                f"CompositeReward.weights has {len(weights)} entries but rewards has {len(self.rewards)}; "
                "give one weight per reward or leave weights unset."
            )
        self.weights = [float(w) for w in weights]
        self.names = unique_reward_names(self.rewards)
        self._local = threading.local()

    @property
    def last_scores(self) -> dict[str, float]:
        """Unweighted score of each part in this thread's last call (empty before the first call)."""
        return dict(getattr(self._local, "scores", {}))

    def __call__(self, prompt: str, response: str, target: str) -> float:
        """Weighted sum of the parts' scores for one response.

        Args:
            prompt: The prompt.
            response: The model's completion.
            target: The reference answer.
        """
        self._local.scores = {}
        pairs = zip(self.names, self.rewards, strict=True)
        scores = {name: float(fn(prompt, response, target)) for name, fn in pairs}
        self._local.scores = scores
        return sum(w * s for w, s in zip(self.weights, scores.values(), strict=True))

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("_local", None)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()
