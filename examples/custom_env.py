"""A user-defined environment in ~40 lines: arithmetic with retries, trained from YAML.

Run it (from the repository root)::

    rlforge fit --config configs/custom_env.yaml

The contract (``rlforge.envs.Environment``): ``reset(row, seed)`` returns the first ``Observation``;
``step(action)`` gets the model's turn as text and returns ``StepResult(observation, reward, done, info)``.
The configured instance is copied per episode, so per-episode state lives on ``self``.
"""

from __future__ import annotations

from rlforge.data.tasks import extract_answer
from rlforge.envs import Environment, Observation, StepResult


class RetryArithmetic(Environment):
    """Answer ``#### N``; a wrong answer gets "wrong, try again" and another turn, worth ``discount`` less.

    Args:
        discount: Reward factor per extra attempt (1.0 on the first try, ``discount`` on the second, ...).
        max_turns: Attempts per episode.
    """

    def __init__(self, discount: float = 0.5, max_turns: int = 3, timeout_s: float = 10.0) -> None:
        super().__init__(max_turns=max_turns, timeout_s=timeout_s, reward_mode="final")
        self.discount = discount

    def reset(self, row: dict, seed: int) -> Observation:
        self.target, self.attempt = str(row["target"]), 0  # rows of the built-in tasks: prompt, target
        return Observation(row["prompt"])

    def step(self, action: str) -> StepResult:
        self.attempt += 1
        if extract_answer(action) == self.target:
            return StepResult(reward=self.discount ** (self.attempt - 1), done=True, info={"success": True})
        # Wrong: say so and ask again; the text is appended to the context, masked out of the loss.
        return StepResult(Observation("\nQ: wrong, try again.\nA:"), reward=0.0, info={"success": False})
